"""Validation in the proxy's request path, against a fake engine that records what it gets."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.fake_engine import ProxyStack
from tests.validation.conftest import STRING_TEMPLATE, make_tokenizer_dir

MAX_MODEL_LEN = 64
USER = [{"role": "user", "content": "hi"}]
JSON = {"content-type": "application/json"}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyStack]:
    """llmd's proxy (policy reject) before a fake engine with max_model_len 64."""
    model = make_tokenizer_dir(tmp_path_factory.mktemp("model"), STRING_TEMPLATE)
    runtime = Path(tmp_path_factory.mktemp("run"))
    with ProxyStack.run(model, runtime, MAX_MODEL_LEN) as running:
        yield running


@pytest.fixture
def client(stack: ProxyStack) -> Iterator[httpx.Client]:
    stack.engine.received.clear()
    with httpx.Client(base_url=stack.base_url, timeout=30) as http:
        yield http


def test_fitting_request_is_relayed_byte_for_byte(stack: ProxyStack, client: httpx.Client) -> None:
    """A request that fits reaches the engine unchanged, unknown fields included."""
    body = {"model": "tiny", "messages": USER, "max_tokens": 5, "x_custom": {"a": [1, "é"]}}
    answer = client.post("/v1/chat/completions", json=body)
    assert answer.status_code == 200
    assert stack.engine.received == [("/v1/chat/completions", body)]
    assert "x-llmd-max-tokens-clamped" not in answer.headers


def test_over_context_is_400_and_never_reaches_the_engine(
    stack: ProxyStack, client: httpx.Client
) -> None:
    """prompt + max_tokens over the context: 400 context_length_exceeded, engine untouched."""
    answer = client.post("/v1/chat/completions", json={"messages": USER, "max_tokens": 64})
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["code"] == "context_length_exceeded" and error["param"] == "max_tokens"
    assert "64" in error["message"] and "at most" in error["message"]
    assert stack.engine.received == []


def test_exact_fit_passes_and_one_more_fails(stack: ProxyStack, client: httpx.Client) -> None:
    """A request sized to fit exactly passes; one token more is llmd's 400."""
    first = client.post("/v1/chat/completions", json={"messages": USER, "max_tokens": 64})
    fits = int(first.json()["error"]["message"].split("at most ")[1].split(",")[0])
    ok = client.post("/v1/chat/completions", json={"messages": USER, "max_tokens": fits})
    assert ok.status_code == 200
    over = client.post("/v1/chat/completions", json={"messages": USER, "max_tokens": fits + 1})
    assert over.status_code == 400


def test_clamp_by_header_rewrites_max_tokens_and_says_so(
    stack: ProxyStack, client: httpx.Client
) -> None:
    """x-llmd-context-policy: clamp lowers max_tokens and adds x-llmd-max-tokens-clamped."""
    body = {"messages": USER, "max_tokens": 500, "stream": True, "keep": "me"}
    answer = client.post(
        "/v1/chat/completions", json=body, headers={"x-llmd-context-policy": "clamp"}
    )
    assert answer.status_code == 200
    assert answer.text.endswith("data: [DONE]\n\n")
    ((_, received),) = stack.engine.received
    assert received["max_tokens"] < 500 and received["keep"] == "me"
    assert answer.headers["x-llmd-max-tokens-clamped"] == f"500->{received['max_tokens']}"


def test_bad_policy_header_is_400(client: httpx.Client) -> None:
    """An unknown x-llmd-context-policy value is a 400, not a silent default."""
    answer = client.post(
        "/v1/chat/completions", json={"messages": USER}, headers={"x-llmd-context-policy": "x"}
    )
    assert answer.status_code == 400 and answer.json()["error"]["code"] == "invalid_request"


def test_prompt_alone_too_long_is_400_even_with_clamp(
    stack: ProxyStack, client: httpx.Client
) -> None:
    """A prompt that fills the context on its own is refused under clamp as well."""
    body = {"prompt": "fox " * 200}
    answer = client.post("/v1/completions", json=body, headers={"x-llmd-context-policy": "clamp"})
    assert answer.status_code == 400
    assert answer.json()["error"]["param"] == "prompt"
    assert stack.engine.received == []


def test_unknown_model_is_404_model_not_found(client: httpx.Client) -> None:
    """An unknown model: 404 `model_not_found` in llmd's shape, with vLLM 0.32's message."""
    answer = client.post("/v1/chat/completions", json={"model": "gpt-9", "messages": USER})
    assert answer.status_code == 404
    assert answer.json() == {
        "error": {
            "message": "The model `gpt-9` does not exist. Valid aliases: tiny.",
            "type": "invalid_request_error",
            "param": "model",
            "code": "model_not_found",
        }
    }


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/v1/chat/completions", {"messages": []}, "messages"),
        ("/v1/chat/completions", {"messages": USER, "n": "2"}, "n"),
        ("/v1/chat/completions", {"messages": USER, "stream": "yes"}, "stream"),
        ("/v1/completions", {}, "prompt"),
        ("/v1/completions", {"prompt": [1, 5000]}, "prompt"),
    ],
)
def test_hygiene_errors_name_the_field(
    stack: ProxyStack, client: httpx.Client, path: str, body: dict[str, Any], param: str
) -> None:
    """Wrong types and empty prompts are 400 invalid_request with `param`, engine untouched."""
    answer = client.post(path, json=body)
    assert answer.status_code == 400
    assert answer.json()["error"]["param"] == param
    assert stack.engine.received == []


def test_malformed_and_non_object_json_are_400(client: httpx.Client) -> None:
    """Bodies that are not JSON objects are 400 invalid_request."""
    for raw in (b"{", b"[1]", b"\xff"):
        answer = client.post("/v1/completions", content=raw, headers=JSON)
        assert answer.status_code == 400 and answer.json()["error"]["code"] == "invalid_request"


def test_body_over_limit_is_413(client: httpx.Client) -> None:
    """A body over server.max_body_bytes is 413 body_too_large."""
    answer = client.post("/v1/completions", content=b"x" * (1024 * 1024 + 1), headers=JSON)
    assert answer.status_code == 413


def test_default_max_tokens_is_written_once(tmp_path_factory: pytest.TempPathFactory) -> None:
    """With default_max_tokens set, an omitted max_tokens reaches the engine filled in."""
    model = make_tokenizer_dir(tmp_path_factory.mktemp("model2"), STRING_TEMPLATE)
    runtime = Path(tmp_path_factory.mktemp("run2"))
    with (
        ProxyStack.run(model, runtime, MAX_MODEL_LEN, default_max_tokens=8) as stack,
        httpx.Client(base_url=stack.base_url) as http,
    ):
        assert http.post("/v1/chat/completions", json={"messages": USER}).status_code == 200
        assert (
            http.post("/v1/completions", json={"prompt": "a", "max_tokens": None}).status_code
            == 200
        )
    assert [body["max_tokens"] for _, body in stack.engine.received] == [8, 8]
    assert json.dumps(stack.engine.received[0][1])  # re-serialised as valid JSON
