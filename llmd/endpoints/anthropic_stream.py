"""Anthropic's answers and errors as llmd reads and writes them: the typed events of a Messages
stream (`message_start`, `content_block_*`, `message_delta` with usage, `message_stop`, `ping`)
read from the bytes as they pass, and every error in Anthropic's shape
`{"type": "error", "error": {"type", "message"}}` (docs.anthropic.com, "Errors").
"""

from __future__ import annotations

import json
import re
import time

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
# A stream's last event: after it, the client has its whole answer.
STOP_EVENT = b'"type":"message_stop"'
# Anthropic's stop reasons as the finish reasons llmd records (OpenAI's words).
FINISH = {b"max_tokens": "length", b"end_turn": "stop", b"stop_sequence": "stop"}
FINISH[b"tool_use"] = "tool_calls"
_STOP_REASON = re.compile(rb'"stop_reason":\s*"([a-z_]+)"')
_OUTPUT_TOKENS = re.compile(rb'"output_tokens":\s*(\d{1,12})')
_SOME_TEXT = re.compile(
    rb'"(?:text|thinking)":\s*"[^"]|"type":\s*"tool_use"|"partial_json":\s*"[^"]'
)


def error_type(status: int) -> str:
    """Anthropic's error type for HTTP `status` (`api_error` for any other 5xx)."""
    return ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")


def error_body(error: ApiError) -> bytes:
    """`error` in Anthropic's shape: `{"type": "error", "error": {"type", "message"}}`."""
    shaped = {
        "type": "error",
        "error": {"type": error_type(error.status), "message": error.message},
    }
    return json.dumps(shaped).encode()


def stream_error(error: ApiError) -> bytes:
    """The in-band form for a stream that already started: an `error` event (a Messages
    stream has no `[DONE]`)."""
    return b"event: error\ndata: " + error_body(error) + b"\n\n"


def read_anthropic_chunk(exchange: Exchange, chunk: bytes) -> None:
    """Account a body chunk of an Anthropic answer sent to the client into `exchange`:
    first-byte time, output tokens (the usage's `output_tokens` when a chunk carries it,
    else one per `content_block_delta` event of a stream), whether it carried text or a tool
    call, and the stop reason (as OpenAI's finish reason). Read from the bytes as vLLM 0.32
    writes them (each event whole, compact JSON)."""
    if exchange.first_byte_at is None:
        exchange.first_byte_at = time.monotonic()
    if not exchange.has_text and _SOME_TEXT.search(chunk):
        exchange.has_text = True
    for match in _STOP_REASON.finditer(chunk):
        exchange.finish_reason = FINISH.get(match.group(1), match.group(1).decode())
    usage = None
    for usage in _OUTPUT_TOKENS.finditer(chunk):  # noqa: B007 (the last one counts)
        pass
    if usage is not None and (not exchange.stream or b"message_delta" in chunk):
        exchange.output_tokens = int(usage.group(1))
    elif exchange.stream:
        exchange.output_tokens += chunk.count(b'"type":"content_block_delta"')
