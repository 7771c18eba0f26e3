"""What a Responses answer tells llmd as it passes (`POST /v1/responses`): a whole response
object, or a stream of typed events (`event: TYPE` / `data: {...}`, vLLM 0.32
`responses/api_router.py`) that opens with `response.created` and ends with
`response.completed` (vLLM also ends an `incomplete` response so; OpenAI's spec has
`response.incomplete` and `response.failed` too), its events read by the shared parser
(llmd/endpoints/events.py) in any layout the WHATWG grammar allows; and the stream's own
in-band error event (OpenAI's `ResponseErrorEvent`: `type` `error`, `code`, `message`,
`param`, `sequence_number`).

`ResponsesAnswer` is the dialect's reader (RESPONSES): it accounts one exchange's answer and,
when asked, keeps its response object for the store (the whole JSON, or the `response` of
the stream's last event; only that event is decoded).
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

from llmd.endpoints.dialects import Dialect
from llmd.endpoints.events import EventStream
from llmd.errors import ApiError
from llmd.inflight import Exchange

# The events that end a stream: after one the client has its whole answer.
TERMINAL = frozenset({b"response.completed", b"response.incomplete", b"response.failed"})
# In an event's data, when the event has no `event:` field (the grammar allows it; vLLM 0.32
# always writes one): a delta's `type` ends `.delta"` (escaped JSON text cannot hold that), and
# a last event's type. Each delta event (output text, reasoning, function call arguments,
# custom tool input) is about one token: vLLM 0.32 sends one per engine step.
_DELTA = b'.delta"'
_TERMINAL = re.compile(rb'"type"\s*:\s*"response\.(?:completed|incomplete|failed)"')
_SOME_TEXT = re.compile(rb'"(?:delta|text|arguments)"\s*:\s*"[^"]')
_OUTPUT_TOKENS = re.compile(rb'"output_tokens"\s*:\s*(\d{1,12})')
_SEQUENCE = re.compile(rb'"sequence_number"\s*:\s*(\d{1,12})')
_INCOMPLETE = re.compile(rb'"incomplete_details"\s*:\s*\{')
SSE_BOUNDARY = b"\n\n"


def error_event(error: ApiError, sequence_number: int) -> bytes:
    """`error` as a Responses stream's `error` event (OpenAI `ResponseErrorEvent`), numbered
    after the last event sent. The stream ends with it (it has no `[DONE]`)."""
    event = {
        "type": "error",
        "code": error.code,
        "message": error.message,
        "param": error.param,
        "sequence_number": sequence_number,
    }
    return b"event: error\ndata: " + json.dumps(event).encode() + SSE_BOUNDARY


class ResponsesAnswer:
    """One exchange's Responses answer as it passes (llmd/endpoints/dialects.py's
    AnswerReader), accounted into the exchange: first-byte time, output tokens (one per delta
    event of a stream until the usage's `output_tokens` replaces the estimate), whether it
    carried text, the finish reason (`length` for an incomplete response, when
    `max_output_tokens` was reached; else `stop`). `done`: a stream's last event went out;
    `sequence`: the last event's `sequence_number` (for an in-band error after it); with
    `keep`, `response` is the response object once complete. A whole answer is read when its
    last bytes come (`feed(..., last=True)`)."""

    __slots__ = ("_parts", "done", "events", "exchange", "keep", "response", "sequence")

    def __init__(self, exchange: Exchange, *, keep: bool = False) -> None:
        self.exchange = exchange
        self.keep = keep
        self.events = EventStream() if exchange.stream else None
        self.response: dict[str, Any] | None = None
        self.sequence = -1
        self.done = False
        self._parts: list[bytes] = []  # a whole answer's bytes so far

    @property
    def between_events(self) -> bool:
        return self.events is None or self.events.between_events

    def feed(self, chunk: bytes, *, last: bool = False) -> None:
        """Read `chunk`, the next bytes sent to the client (`last`: no more follow)."""
        exchange = self.exchange
        if chunk and exchange.first_byte_at is None:
            exchange.first_byte_at = time.monotonic()
        if self.events is None:
            self._parts.append(chunk)
            if last:
                whole, self._parts = b"".join(self._parts), []
                self._ended(whole)
            return
        for kind, data in self.events.feed(chunk) if chunk else ():
            self._event(kind, data)

    def error_event(self, error: ApiError) -> bytes:
        """The in-band error event that follows what was sent (`error_event`)."""
        return error_event(error, self.sequence + 1)

    def _event(self, kind: bytes, data: bytes) -> None:
        exchange = self.exchange
        at = data.rfind(b'"sequence_number"')
        if at >= 0 and (found := _SEQUENCE.match(data, at)) is not None:
            self.sequence = int(found.group(1))
        if kind.endswith(b".delta") if kind else _DELTA in data:
            exchange.output_tokens += 1
            if not exchange.has_text and _SOME_TEXT.search(data):
                exchange.has_text = True
        elif kind in TERMINAL if kind else _TERMINAL.search(data) is not None:
            self.done = True
            self._ended(data)

    def _ended(self, whole: bytes) -> None:
        """Account the answer's end: `whole` is the response object (a whole answer) or the
        last event's data (the object under `response`)."""
        exchange = self.exchange
        if not exchange.has_text and _SOME_TEXT.search(whole):
            exchange.has_text = True
        exchange.finish_reason = "length" if _INCOMPLETE.search(whole) else "stop"
        usage = None
        for usage in _OUTPUT_TOKENS.finditer(whole):  # noqa: B007 (the last one counts)
            pass
        if usage is not None:
            exchange.output_tokens = int(usage.group(1))
        if self.keep:
            found = _object(whole)
            if found is not None and self.events is not None:
                found = found.get("response")
            self.response = found if isinstance(found, dict) else None


def _object(body: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(body)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


RESPONSES = Dialect("responses", ResponsesAnswer)
