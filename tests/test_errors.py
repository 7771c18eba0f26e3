"""Error shapes: OpenAI body, Retry-After on 429/503, in-band SSE form."""

from __future__ import annotations

import json

from llmd.errors import ContextLengthExceeded, Draining, EngineError, EngineUnavailable


def test_body_is_openai_shaped() -> None:
    """Every error body is {"error": {"message", "type", "param", "code"}}."""
    error = ContextLengthExceeded("too long", param="max_tokens")
    assert json.loads(error.body()) == {
        "error": {
            "message": "too long",
            "type": "invalid_request_error",
            "param": "max_tokens",
            "code": "context_length_exceeded",
        }
    }
    assert error.status == 400


def test_503_always_carries_retry_after_rounded_up() -> None:
    """503s carry Retry-After in whole seconds, rounded up, at least 1."""
    assert (b"retry-after", b"3") in EngineUnavailable("x", retry_after_s=2.2).headers()
    assert (b"retry-after", b"1") in Draining("x").headers()
    assert not any(k == b"retry-after" for k, _ in EngineError("x").headers())


def test_sse_event_ends_the_stream() -> None:
    """The in-band form is one data event with the error, then [DONE]."""
    event = EngineError("lost").sse_event()
    first, done, tail = event.split(b"\n\n")
    assert json.loads(first.removeprefix(b"data: "))["error"]["code"] == "engine_error"
    assert done == b"data: [DONE]" and tail == b""
