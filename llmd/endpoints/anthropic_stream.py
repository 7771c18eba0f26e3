"""Anthropic's answers and errors as llmd reads and writes them: the typed events of a Messages
stream (`message_start`, `content_block_*`, `message_delta` with usage, `message_stop`, `ping`)
read as they pass (any layout the WHATWG grammar allows, llmd/endpoints/events.py), a whole
message's usage and stop reason, and every error in Anthropic's shape
`{"type": "error", "error": {"type", "message"}}` (docs.anthropic.com, "Errors").
"""

from __future__ import annotations

import json
import re
import time

from llmd.endpoints.events import Event, EventStream, split_run
from llmd.errors import ApiError
from llmd.inflight import Exchange

# Anthropic's error type for each HTTP status llmd answers (its API's documented pairs; 503,
# which Anthropic writes as 529 overloaded_error, keeps llmd's status and Retry-After).
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    408: "timeout_error",
    409: "invalid_request_error",
    413: "request_too_large",
    415: "invalid_request_error",
    429: "rate_limit_error",
    431: "request_too_large",
    503: "overloaded_error",
    529: "overloaded_error",
}
# Anthropic's stop reasons as the finish reasons llmd records (OpenAI's words).
FINISH = {
    b"max_tokens": "length",
    b"end_turn": "stop",
    b"stop_sequence": "stop",
    b"tool_use": "tool_calls",
}
_TYPE = re.compile(rb'"type"\s*:\s*"([a-z_]+)"')
_STOP_REASON = re.compile(rb'"stop_reason"\s*:\s*"([a-z_]+)"')
_OUTPUT_TOKENS = re.compile(rb'"output_tokens"\s*:\s*(\d{1,12})')
# Events that tell llmd nothing (vLLM 0.32 sends them between the text deltas).
_QUIET = (b"ping", b"content_block_stop")
_SOME_TEXT = re.compile(
    rb'"(?:text|thinking)"\s*:\s*"[^"]|"type"\s*:\s*"tool_use"|"partial_json"\s*:\s*"[^"]'
)


def error_type(status: int) -> str:
    """Anthropic's error type for HTTP `status` (`api_error` for any other 5xx)."""
    return ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")


def error_body(error: ApiError) -> bytes:
    """`error` in Anthropic's shape: `{"type": "error", "error": {"type", "message"}}`, the
    type by its status (`error_type`)."""
    shaped = {
        "type": "error",
        "error": {"type": error_type(error.status), "message": error.message},
    }
    return json.dumps(shaped).encode()


def stream_error(error: ApiError) -> bytes:
    """The in-band form for a stream that already started: an `error` event (a Messages
    stream has no `[DONE]`; the anthropic SDK raises on it)."""
    return b"event: error\ndata: " + error_body(error) + b"\n\n"


class AnthropicAnswer:
    """An Anthropic Messages answer as it passes (vLLM 0.32's
    entrypoints/anthropic/serving.py writes it): a stream's events, one output token per
    `content_block_delta` (vLLM sends about one token each) until `message_delta`'s usage
    gives the engine's own count, the stop reason from `message_delta`, its end at
    `message_stop`; or a whole message's `usage.output_tokens` and `stop_reason`."""

    __slots__ = ("_usage_seen", "done", "events", "exchange")

    def __init__(self, exchange: Exchange) -> None:
        self.exchange = exchange
        self.events = EventStream() if exchange.stream else None
        self._usage_seen = False
        self.done = False

    @property
    def between_events(self) -> bool:
        return self.events is None or self.events.between_events

    def feed(self, chunk: bytes) -> None:
        exchange = self.exchange
        if exchange.first_byte_at is None:
            exchange.first_byte_at = time.monotonic()
        events = self.events
        if events is None:
            self._read(chunk, usage=True)
            return
        run = events.typed_run(chunk)
        if not run:
            self._events(events.feed(chunk))
        elif not self._run_read(chunk, run):
            self._events(split_run(chunk))

    def _run_read(self, chunk: bytes, events: int) -> bool:
        """Account a run of `events` whole events in vLLM's layout (`EventStream.typed_run`)
        at once, as `_events` would one by one: when each is a text delta, a `ping` or a
        `content_block_stop` (nothing else vLLM sends mid-answer), after the first text and
        with no stop reason in it. Whether it did. A few scans in C per chunk."""
        exchange = self.exchange
        if not exchange.has_text or b'"stop_reason"' in chunk:
            return False
        deltas = chunk.count(b"\nevent: content_block_delta\n")
        if chunk.startswith(b"event: content_block_delta\n"):
            deltas += 1
        if deltas != events:
            quiet = sum(
                chunk.count(b"\nevent: " + name + b"\n")
                + chunk.startswith(b"event: " + name + b"\n")
                for name in _QUIET
            )  # (a line `event: NAME` ends the name: the layout was checked)
            if deltas + quiet != events:
                return False
        if not self._usage_seen:
            exchange.output_tokens += deltas
        return True

    def _events(self, events: list[Event]) -> None:
        """Account each of `events`, in order."""
        exchange = self.exchange
        for name, data in events:
            if not name:  # no `event:` field: the data's own type names it
                match = _TYPE.search(data)
                name = match.group(1) if match else b""
            if name == b"content_block_delta":
                self._read(data, usage=False)
                if not self._usage_seen:
                    exchange.output_tokens += 1
            elif name == b"message_delta":
                self._read(data, usage=True)
            elif name == b"content_block_start":
                self._read(data, usage=False)
            elif name == b"message_stop":
                self.done = True

    def _read(self, data: bytes, *, usage: bool) -> None:
        """Text, stop reason and (when `usage`) the output count in `data`."""
        exchange = self.exchange
        if not exchange.has_text and _SOME_TEXT.search(data):
            exchange.has_text = True
        if b'"stop_reason"' in data:
            match = _STOP_REASON.search(data)
            if match is not None:
                reason = match.group(1)
                exchange.finish_reason = FINISH.get(reason, reason.decode())
        if usage and b'"output_tokens"' in data:
            counts = _OUTPUT_TOKENS.findall(data)
            if counts:
                exchange.output_tokens = int(counts[-1])
                self._usage_seen = True
