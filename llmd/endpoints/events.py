"""Server-sent events read from a byte stream as it passes, in every layout the WHATWG
event-stream grammar allows (HTML Living Standard §9.2.6 "Interpreting an event stream"):
CRLF, LF or CR line endings (a CRLF may be split between two chunks), `data:` with or without
its one optional space, comments (`:` lines), multi-line data (joined with LF), `event:`,
`id:` and `retry:` fields, and one leading UTF-8 BOM.

Cheap on the common layouts (vLLM's `data: {...}\\n\\n`, and `event: TYPE\\ndata: {...}\\n\\n`
for its Responses and Anthropic events): a run of chat events costs a few scans of the chunk
(`feed_run`), a typed event one look at its two lines, a run of them one match in C
(`typed_run`); another layout a split at its line feeds and a look at each line's first
bytes; nothing is decoded.
"""

from __future__ import annotations

import re

from llmd.endpoints.shapes import TokenShape

BOM = b"\xef\xbb\xbf"
# OpenAI's last event; its client ends a stream on data that starts with it (openai-python
# `Stream.__stream__`).
DONE = b"[DONE]"

Event = tuple[bytes, bytes]  # (type: b"" when no `event:` field, as for "message"; data)
# A run of whole typed events in vLLM's layout: each `event: TYPE`, `data: DATA`, a blank line.
_TYPED_RUN = re.compile(rb"(?:event: [^\r\n]*\ndata: [^\r\n]*\n\n)+")


class EventStream:
    """One stream's parser state. `feed(chunk)` gives the events each chunk completes, in
    order; `between_events` says whether something appended now would be read as an event of
    its own; `done` whether an event whose data starts with `[DONE]` was dispatched."""

    __slots__ = ("_cr", "_data", "_event", "_line", "_pending", "_started", "done")

    def __init__(self) -> None:
        self._line = b""  # the line read so far (no line ending yet), CRs made LFs
        self._cr = False  # the last byte fed was a CR: a LF right after it ends no new line
        self._started = False  # past the stream's first bytes (its BOM, if any, dropped)
        self._data: list[bytes] | None = None  # this event's data lines; None: no data field
        self._event = b""  # this event's type
        self._pending = False  # a data or event field since the last blank line
        self.done = False

    @property
    def between_events(self) -> bool:
        """At the start of a line, with no data or event field waiting for its blank line."""
        return not self._line and not self._pending

    def feed_run(self, chunk: bytes) -> int:
        """Read `chunk` when it is a run of whole events in vLLM's layout (`data: X\\n\\n` each,
        X without CR or LF) that starts between events: its number of events (each one's
        data is what follows its `data: `), `done` set when one of them is `[DONE]`. Else 0,
        and nothing is read: `feed` it. A few scans of the chunk in C, however many events
        it holds (a relay that falls behind reads many at once)."""
        if (
            self._cr
            or self._line
            or self._pending
            or not chunk.startswith(b"data: ")
            or not chunk.endswith(b"\n\n")
            or b"\r" in chunk
        ):
            return 0
        if chunk.find(b"\n") == len(chunk) - 2:  # the most common: one event
            events = 1
        else:
            events = chunk.count(b"\n\n")
            # Every LF is in a blank line's pair, and every pair but the last is followed by
            # the next event's `data: `: the lines are `data: X` and blank, in turn.
            if chunk.count(b"\n") != 2 * events or chunk.count(b"\n\ndata: ") != events - 1:
                return 0
        self._started = True
        if chunk.startswith(b"data: [DONE]") or (events > 1 and b"\n\ndata: [DONE]" in chunk):
            self.done = True
        return events

    def feed_shaped(self, chunk: bytes, shape: TokenShape) -> tuple[int, bool, int] | None:
        """Read the whole events of `shape` that `chunk` starts with, when it starts between
        events (and a last `data: [DONE]` right after them, which sets `done`): (those events,
        whether any had text, the bytes read); the rest of `chunk` is for `feed` and the
        others. None when it starts with anything else: nothing was read. A few compares and
        finds an event (`TokenShape.read`)."""
        if self._cr or self._line or self._pending:
            return None
        events, text, at, done = shape.read(chunk)
        if not at:
            return None
        self._started = True
        if done:
            self.done = True
        return events, text, at

    def feed_object(self, chunk: bytes) -> bool:
        """Read `chunk` when it is one whole event in vLLM's layout (`data: {...}\\n\\n`, without
        CR or another LF) whose data is a JSON object's text, starting between events: True
        (its data is `chunk[6:-2]`). Else False, and nothing is read. The most common chunk of
        a stream, read by a few scans in C."""
        if (
            chunk[:7] != b"data: {"
            or chunk[-3:] != b"}\n\n"
            or self._cr
            or self._line
            or self._pending
            or chunk.find(b"\n") != len(chunk) - 2
            or b"\r" in chunk
        ):
            return False
        self._started = True
        return True

    def typed_run(self, chunk: bytes) -> int:
        """Read `chunk` when it is a run of whole typed events in vLLM's layout (`event:
        TYPE\\ndata: DATA\\n\\n` each, TYPE and DATA without CR or LF: its Responses and
        Anthropic events) that starts between events: its number of events (`split_run`
        gives them), `done` set when a data is `[DONE]`. Else 0, and nothing is read: `feed`
        it. One event is one look at its lines; a run of them one match in C."""
        if self._cr or self._line or self._pending or not chunk.startswith(b"event: "):
            return 0
        if chunk.find(b"\n\n") == len(chunk) - 2:  # the most common: one event
            return 0 if self._typed_event(chunk) is None else 1
        if _TYPED_RUN.fullmatch(chunk) is None:
            return 0
        self._started = True
        if b"\ndata: [DONE]" in chunk:
            self.done = True
        return chunk.count(b"\n\n")

    def _typed_event(self, chunk: bytes) -> Event | None:
        """`chunk` as one whole `event: TYPE\ndata: DATA\n\n` (how vLLM 0.32 writes each
        Responses event), or None when it is anything else (the general path reads it)."""
        end = chunk.find(b"\n")
        if (
            chunk.find(b"\n", end + 1) != len(chunk) - 2
            or not chunk.endswith(b"\n\n")
            or not chunk.startswith(b"data: ", end + 1)
            or b"\r" in chunk
        ):
            return None
        self._started = True
        data = chunk[end + 7 : -2]
        if data.startswith(DONE):
            self.done = True
        return chunk[7:end], data

    def feed(self, chunk: bytes) -> list[Event]:
        """The events that `chunk` completes (an event ends at a blank line and has at least
        one `data` field), as (type, data) with the data lines joined by LF."""
        if self._cr:
            self._cr = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
        if not chunk:
            return []
        if self.feed_run(chunk):  # vLLM's layout: one event, or a run of them
            return [(b"", event[6:]) for event in chunk[:-2].split(b"\n\n")]
        if chunk.startswith(b"event: ") and not (self._line or self._pending):
            if chunk.find(b"\n\n") == len(chunk) - 2:  # vLLM's typed layout, one event
                typed = self._typed_event(chunk)
                if typed is not None:
                    return [typed]
            elif self.typed_run(chunk):  # a run of them
                return split_run(chunk)
        if b"\r" in chunk:
            self._cr = chunk[-1:] == b"\r"
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        text = self._line + chunk if self._line else chunk
        if not self._started:
            if len(text) < len(BOM) and BOM.startswith(text):
                self._line = text  # maybe a BOM cut short: wait for the rest
                return []
            self._started = True
            if text.startswith(BOM):
                text = text[len(BOM) :]
        end = text.rfind(b"\n")
        if end < 0:
            self._line = text
            return []
        self._line = text[end + 1 :]
        events: list[Event] = []
        for line in text[:end].split(b"\n"):
            if not line:  # a blank line: dispatch
                if self._data is not None:
                    data = b"\n".join(self._data)
                    events.append((self._event, data))
                    if data.startswith(DONE):
                        self.done = True
                self._data, self._event, self._pending = None, b"", False
            elif line[0] != 0x3A:  # not a comment
                name, colon, value = line.partition(b":")
                if colon and value[:1] == b" ":
                    value = value[1:]
                if name == b"data":
                    if self._data is None:
                        self._data = [value]
                    else:
                        self._data.append(value)
                    self._pending = True
                elif name == b"event":
                    self._event = value
                    self._pending = True
                # `id` and `retry` set the stream's state, not the event's; others are ignored
        return events


def split_run(chunk: bytes) -> list[Event]:
    """The events of a run that `EventStream.typed_run` read, as (type, data)."""
    events = []
    for event in chunk[:-2].split(b"\n\n"):
        end = event.find(b"\n")
        events.append((event[7:end], event[end + 7 :]))
    return events
