"""Server-sent events read from a byte stream as it passes, in every layout the WHATWG
event-stream grammar allows (HTML Living Standard §9.2.6 "Interpreting an event stream"):
CRLF, LF or CR line endings (a CRLF may be split between two chunks), `data:` with or without
its one optional space, comments (`:` lines), multi-line data (joined with LF), `event:`,
`id:` and `retry:` fields, and one leading UTF-8 BOM.

Cheap on the common layout (vLLM's `data: {...}\\n\\n`): a chunk costs a split at its line
feeds and a look at each line's first bytes; nothing is decoded.
"""

from __future__ import annotations

BOM = b"\xef\xbb\xbf"
# OpenAI's last event; its client ends a stream on data that starts with it (openai-python
# `Stream.__stream__`).
DONE = b"[DONE]"

Event = tuple[bytes, bytes]  # (type: b"" when no `event:` field, as for "message"; data)


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

    def feed(self, chunk: bytes) -> list[Event]:
        """The events that `chunk` completes (an event ends at a blank line and has at least
        one `data` field), as (type, data) with the data lines joined by LF."""
        if self._cr:
            self._cr = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
        if not chunk:
            return []
        if (  # vLLM's layout, one event a chunk: `data: ...\n\n`
            chunk.startswith(b"data: ")
            and chunk.find(b"\n") == len(chunk) - 2
            and chunk.endswith(b"\n\n")
            and not (self._line or self._pending)
            and b"\r" not in chunk
        ):
            self._started = True
            data = chunk[6:-2]
            if data.startswith(DONE):
                self.done = True
            return [(b"", data)]
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
