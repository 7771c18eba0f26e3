"""Error shapes: OpenAI body (strict JSON whatever the client sent), Retry-After on 429/503,
in-band SSE form."""

from __future__ import annotations

import json

import pytest

from llmd.errors import (
    ApiError,
    ContextLengthExceeded,
    Draining,
    EngineError,
    EngineUnavailable,
    InvalidRequest,
    ModelNotFound,
    NotFound,
)


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


@pytest.mark.parametrize(
    "error",
    [
        InvalidRequest("key \udc00x holds a lone surrogate", param="\udc00x"),
        NotFound("no route GET /\ud83d"),
        ModelNotFound("\udfff", ["tiny"]),
    ],
)
def test_an_error_quoting_a_lone_surrogate_is_strict_json(error: ApiError) -> None:
    """Text no UTF-8 encoder takes (a lone surrogate a JSON escape made) in an error's message
    or param is written as its escape: the body and SSE event encode as UTF-8 once parsed."""
    for payload in (error.body(), error.sse_event().split(b"\n\n")[0].removeprefix(b"data: ")):
        parsed = json.loads(payload)["error"]
        json.dumps(parsed, ensure_ascii=False).encode("utf-8")  # raises on a lone surrogate
        assert "\\ud" in parsed["message"]
    error.message.encode("utf-8")  # what the log writes; raises on a lone surrogate
    (error.param or "").encode("utf-8")
