"""The relay's edges, in llmd's proxy before a fake engine: an exception inside llmd is a 500
with the request id, counted and logged once; a stream's last byte arriving alone still ends
it cleanly."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from llmd.proxy.relay import Relay
from tests.support.fake_engine import ProxyStack
from tests.support.log_capture import Captured
from tests.support.waiting import wait_for
from tests.validation.conftest import STRING_TEMPLATE, make_tokenizer_dir

CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyStack]:
    model = make_tokenizer_dir(tmp_path_factory.mktemp("model"), STRING_TEMPLATE)
    with ProxyStack.run(model, Path(tmp_path_factory.mktemp("run")), 64) as running:
        yield running


def server_lines(captured: Captured) -> list[dict[str, Any]]:
    """The log lines of the server side (the test's own httpx client logs its requests)."""
    return [line for line in captured.lines() if line.get("logger") != "httpx"]


def requests_with_status(stack: ProxyStack, status: str) -> float:
    registry = stack.ctx.observer.metrics.registry
    labels = {"tenant": "anonymous", "class": "normal", "status": status, "model": "tiny",
              "endpoint": "chat", "outcome": "error", "code": "internal_error"}  # fmt: skip
    return registry.get_sample_value("llmd_requests_total", labels) or 0.0


def test_an_exception_in_a_stage_is_a_500_with_the_id_counted_and_logged_once(
    stack: ProxyStack, captured_logs: Captured, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug that raises before the response starts: 500 internal_error carrying
    x-request-id (and x-llmd-queue-ms), counted under status 500 and as an error, and one
    log line with the id and the traceback; uvicorn logs nothing."""

    async def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("a bug")

    monkeypatch.setattr(stack.ctx.validators.for_model("tiny"), "check", broken)
    errors = sum(stack.ctx.observer.tallies.errors.values())
    counted = requests_with_status(stack, "500")
    answer = httpx.post(
        stack.base_url + "/v1/chat/completions", json=CHAT, headers={"x-request-id": "bug-1"}
    )
    assert answer.status_code == 500 and answer.headers["x-request-id"] == "bug-1"
    error = answer.json()["error"]
    assert error["code"] == "internal_error" and "bug-1" in error["message"]
    assert answer.headers["x-llmd-queue-ms"] == "0"
    # Accounted once the answer has been sent: wait for it, bounded.
    assert wait_for(lambda: sum(stack.ctx.observer.tallies.errors.values()) == errors + 1, 10)
    assert requests_with_status(stack, "500") == counted + 1
    lines = server_lines(captured_logs)
    assert [line["event"] for line in lines] == ["unexpected_error"]
    assert lines[0]["request_id"] == "bug-1" and "RuntimeError: a bug" in lines[0]["exception"]


def test_an_exception_escaping_the_relay_is_a_500_with_the_id(
    stack: ProxyStack, captured_logs: Captured, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug outside the relay's stages (it raises out of the endpoint, which takes the short
    way past Starlette's stack) is still a 500 internal_error with the request id, logged
    once by llmd and never by uvicorn."""

    async def broken(*args: Any) -> Any:
        raise RuntimeError("a bug in run")

    monkeypatch.setattr(Relay, "run", broken)
    answer = httpx.post(
        stack.base_url + "/v1/chat/completions", json=CHAT, headers={"x-request-id": "bug-3"}
    )
    assert answer.status_code == 500 and answer.headers["x-request-id"] == "bug-3"
    assert answer.json()["error"]["code"] == "internal_error"
    lines = server_lines(captured_logs)
    assert [(line["event"], line["request_id"]) for line in lines] == [
        ("unexpected_error", "bug-3")
    ]


def test_an_exception_in_another_route_is_a_500_with_the_id(
    stack: ProxyStack, captured_logs: Captured, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Outside the relay too (here /ready), an exception is a 500 with the request id, logged
    once by llmd and never by uvicorn."""

    def broken() -> None:
        raise KeyError("state")

    monkeypatch.setattr(stack.ctx, "unavailable", broken)
    answer = httpx.get(stack.base_url + "/ready", headers={"x-request-id": "bug-2"})
    assert answer.status_code == 500 and answer.headers["x-request-id"] == "bug-2"
    assert answer.json()["error"]["code"] == "internal_error"
    lines = server_lines(captured_logs)
    assert [(line["event"], line["request_id"]) for line in lines] == [
        ("unexpected_error", "bug-2")
    ]


def test_a_last_newline_read_on_its_own_ends_the_stream_cleanly(stack: ProxyStack) -> None:
    """The engine sends a stream less its final `\\n`, and that byte only once the client has
    everything before it (so llmd reads it alone): the stream ends as the engine sent it, no
    error event, one [DONE]."""
    body = {**CHAT, "stream": True, "hold_tail": True}
    with httpx.stream("POST", stack.base_url + "/v1/chat/completions", json=body) as answer:
        received = b""
        chunks = answer.iter_raw()
        while not received.endswith(b"data: [DONE]\n"):
            received += next(chunks)
        stack.release_tail()
        received += b"".join(chunks)
    assert received == b'data: {"choices": []}\n\ndata: [DONE]\n\n'


def test_a_connection_lost_after_done_is_no_error(stack: ProxyStack) -> None:
    """The engine's connection is reset after its stream's `[DONE]`, before the body's end:
    the client has its whole answer, nothing is appended, and it counts as answered."""
    # The test before's request may still be ending (its engine lingers before its end).
    assert wait_for(lambda: len(stack.ctx.inflight) == 0, 10)
    answered = stack.ctx.observer.tallies.answered
    body = {**CHAT, "stream": True, "cut_after_done": True}
    received = httpx.post(stack.base_url + "/v1/chat/completions", json=body).content
    assert received == b'data: {"choices": []}\n\ndata: [DONE]\n\n'
    assert wait_for(lambda: stack.ctx.observer.tallies.answered == answered + 1, 10)
