"""A backend's 4xx answer, translated into llmd's error: the client's input refused (a
rejection, in llmd's OpenAI shape with vLLM's message kept), the backend's rate limit, or
llmd's own credentials refused by an upstream (a failure of llmd's, not the client's).
"""

from __future__ import annotations

import json
import math
from typing import Any

from llmd.errors import ApiError, BackendRefused, EngineError, RateLimited

# The longest backend message passed on, in characters.
MESSAGE_LIMIT = 2000
# Statuses that say the backend refused llmd's credentials (an upstream's api_key_env).
CREDENTIALS = frozenset({401, 403, 407})
# vLLM's words for a prompt or max_tokens over the context (0.31-0.32, vllm/renderers).
_CONTEXT_WORDS = ("maximum context length", "max_model_len")


def backend_refusal(status: int, body: bytes, retry_after: str | None = None) -> ApiError:
    """The error for a backend's 4xx answer `status` with `body` (vLLM's `{"error": {"message",
    "type", "param", "code"}}`, FastAPI's `{"detail": ...}`, or any text) and its
    `Retry-After` header value, if any. Never raises."""
    message, param = _read(body)
    if status in CREDENTIALS:
        return EngineError(f"the backend refused llmd's credentials (HTTP {status}): {message}")
    if status == 429:
        seconds = _seconds(retry_after)
        return RateLimited(f"the backend is rate limiting: {message}", retry_after_s=seconds)
    return BackendRefused(status, _code(status, message, param), message, param=param)


def _code(status: int, message: str, param: str | None) -> str:
    """The llmd code that fits a backend's refusal."""
    if status == 404:
        return "model_not_found" if param == "model" else "not_found"
    if status == 413:
        return "body_too_large"
    if any(words in message for words in _CONTEXT_WORDS):
        return "context_length_exceeded"
    return "invalid_request"


def _read(body: bytes) -> tuple[str, str | None]:
    """The message and param of an error body, whatever its shape."""
    text = body.decode(errors="replace")
    try:
        parsed: Any = json.loads(text)
    except ValueError:
        return (text.strip() or "the backend refused the request")[:MESSAGE_LIMIT], None
    error = parsed.get("error") if isinstance(parsed, dict) else None
    if isinstance(error, dict):
        param = error.get("param")
        message = error.get("message")
        return (
            str(message if message is not None else error)[:MESSAGE_LIMIT],
            param if isinstance(param, str) else None,
        )
    detail = parsed.get("detail") if isinstance(parsed, dict) else None
    return str(detail if detail is not None else parsed)[:MESSAGE_LIMIT], None


def _seconds(value: str | None) -> float:
    """Retry-After in seconds (its delta-seconds form, 1 to 3600; 1 when absent or a date)."""
    try:
        seconds = float(value) if value is not None else 1.0
    except ValueError:
        return 1.0
    return min(max(1.0, seconds), 3600.0) if math.isfinite(seconds) else 1.0
