"""What a Responses answer tells llmd as it passes (`POST /v1/responses`): a whole response
object, or a stream of typed events (`event: TYPE` / `data: {...}`, vLLM 0.32
`responses/api_router.py`) that opens with `response.created` and ends with
`response.completed` (vLLM also ends an `incomplete` response so; OpenAI's spec has
`response.incomplete` and `response.failed` too), read from the bytes without decoding each
event; and the stream's own in-band error event (OpenAI's `ResponseErrorEvent`: `type`
`error`, `code`, `message`, `param`, `sequence_number`).

`ResponsesAnswer` reads one exchange's answer and, when asked, keeps its response object
for the store: the whole JSON, or the `response` of the stream's last event, captured from
that event's bytes alone (the other events pass without being kept).
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

from llmd.endpoints.dialects import Dialect
from llmd.errors import ApiError
from llmd.inflight import Exchange

# Each delta event (output text, reasoning, function call arguments, custom tool input) is about
# one token (vLLM 0.32 sends one per engine step); its data's `type` ends `.delta"`, which
# escaped JSON text cannot hold.
_DELTA = b'.delta"'
_SOME_TEXT = re.compile(rb'"(?:delta|text|arguments)":\s*"[^"]')
_OUTPUT_TOKENS = re.compile(rb'"output_tokens":\s*(\d{1,12})')
_SEQUENCE = re.compile(rb'"sequence_number"\s*:\s*(\d{1,12})')
# The events that end a stream: after one the client has its whole answer.
_TERMINAL = re.compile(rb'"type"\s*:\s*"response\.(?:completed|incomplete|failed)"')
_INCOMPLETE = re.compile(rb'"incomplete_details"\s*:\s*\{')
SSE_BOUNDARY = b"\n\n"


def read_responses_chunk(exchange: Exchange, chunk: bytes) -> None:
    """Account a body chunk of a Responses answer sent to the client into `exchange`:
    first-byte time, output tokens (the usage's `output_tokens` when the chunk has the
    response object's usage, else one per delta event of a stream), whether it carried text,
    the finish reason (`length` for an incomplete response: `max_output_tokens` reached,
    else `stop`), and whether a stream's last event went out (`answered`). Read from the
    bytes as vLLM 0.32 writes them (compact JSON, each event whole)."""
    _read_chunk(exchange, chunk)


def _read_chunk(exchange: Exchange, chunk: bytes) -> bool:
    """`read_responses_chunk`; True when the chunk ends the answer (a whole answer, or a
    stream's last event)."""
    if exchange.first_byte_at is None:
        exchange.first_byte_at = time.monotonic()
    if not exchange.has_text and _SOME_TEXT.search(chunk):
        exchange.has_text = True
    ended = not exchange.stream or _TERMINAL.search(chunk) is not None
    if exchange.stream:
        exchange.output_tokens += chunk.count(_DELTA)
    if not ended:
        return False
    exchange.finish_reason = "length" if _INCOMPLETE.search(chunk) else "stop"
    usage = None
    for usage in _OUTPUT_TOKENS.finditer(chunk):  # noqa: B007 (the last one counts)
        pass
    if usage is not None:
        exchange.output_tokens = int(usage.group(1))
    if exchange.stream:
        exchange.answered = True
    return True


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
    """One exchange's Responses answer as it passes: accounted into the exchange
    (`read_responses_chunk`), its last `sequence_number` followed (for an in-band error), and,
    when `keep`, its response object kept (`response`, once complete)."""

    __slots__ = ("_parts", "_pending", "ended", "exchange", "keep", "response", "sequence")

    def __init__(self, exchange: Exchange, *, keep: bool = False) -> None:
        self.exchange = exchange
        self.keep = keep
        self.response: dict[str, Any] | None = None
        self.sequence = -1  # the last event's sequence_number
        self.ended = False  # the answer's end went by (a stream's last event)
        self._parts: list[bytes] = []  # a whole answer's bytes so far (kept only when `keep`)
        self._pending: list[bytes] = []  # a stream's event in progress, when it may be the last

    def feed(self, chunk: bytes, *, last: bool = False) -> None:
        """Read `chunk`, the next bytes sent to the client (`last`: no more follow)."""
        if not chunk and not last:
            return
        exchange = self.exchange
        if chunk and _read_chunk(exchange, chunk):
            self.ended = True
        if exchange.stream:
            at = chunk.rfind(b'"sequence_number"')
            if at >= 0:
                found = _SEQUENCE.match(chunk, at)
                if found is not None:
                    self.sequence = int(found.group(1))
            if self.keep and self.response is None:
                self._keep_event(chunk)
        elif self.keep:
            self._parts.append(chunk)
            if last:
                self.response = _object(b"".join(self._parts))
                self._parts = []

    def error_event(self, error: ApiError) -> bytes:
        """The in-band error event that follows what was sent (`error_event`)."""
        return error_event(error, self.sequence + 1)

    def _keep_event(self, chunk: bytes) -> None:
        """Keep a stream's bytes after its last whole event until the event is whole; the
        response of an event that ends the stream. An event whole within one chunk (vLLM
        writes each whole) is read there, and only a chunk that has a last event's marker."""
        pending = self._pending
        if pending and not (
            SSE_BOUNDARY in chunk or (chunk[:1] == b"\n" and pending[-1].endswith(b"\n"))
        ):
            pending.append(chunk)  # the event goes on: joined once it is whole
            return
        if pending:
            chunk = b"".join((*pending, chunk))
            self._pending = []
        at = chunk.rfind(SSE_BOUNDARY)
        end = at + len(SSE_BOUNDARY) if at >= 0 else 0  # after the last whole event
        whole = chunk if end == len(chunk) else chunk[:end]
        if whole and _TERMINAL.search(whole):
            self._take_events(whole)
        if self.response is None and end != len(chunk):
            self._pending = [chunk[end:]]

    def _take_events(self, data: bytes) -> None:
        """The response of the last event in `data` (whole events) that ends the stream."""
        for event in data.split(SSE_BOUNDARY):
            if _TERMINAL.search(event):
                payload = _event_data(event)
                found = payload.get("response") if isinstance(payload, dict) else None
                if isinstance(found, dict):
                    self.response = found


def _event_data(event: bytes) -> Any:
    """An SSE event's data lines, joined, as JSON (None when they are not)."""
    lines = [
        line[5:].removeprefix(b" ") for line in event.split(b"\n") if line.startswith(b"data:")
    ]
    try:
        return json.loads(b"\n".join(lines))
    except ValueError:
        return None


def _object(body: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(body)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


# The table's dialect of `POST /v1/responses` (its relay reads each answer with a
# ResponsesAnswer of its own, llmd/proxy/responses.py).
RESPONSES = Dialect("responses", read_responses_chunk)
