"""A backend's 4xx for the client's input reaches the client as llmd's own errors do (string
code, `invalid_request_error`, vLLM's message and param kept, llmd's headers) and is counted
as a rejection, not an error: the translation, and through a real `llmd serve` on the
simulator."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import httpx
import pytest

from llmd.errors import BackendRefused, EngineError, RateLimited
from llmd.proxy.refusals import backend_refusal
from tests.support.accounting import Tally, assert_counted_as_rejection
from tests.support.llmd_process import LlmdProcess
from tests.support.model import ensure_tiny_model
from tests.support.sim_process import sim_config

CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 5}


def vllm_error(message: str, param: str | None = None, status: int = 400) -> bytes:
    """A body as vLLM 0.32 answers a refused request (error_response.py)."""
    kind = {400: "BadRequestError", 404: "NotFoundError"}[status]
    error = {"message": message, "type": kind, "param": param, "code": status}
    return json.dumps({"error": error}).encode()


def test_a_vllm_400_becomes_llmds_shape_with_message_and_param() -> None:
    """vLLM's integer code and BadRequestError type become `invalid_request` and
    `invalid_request_error`; message and param are vLLM's."""
    message = "temperature must be non-negative, got -1.0. (parameter=temperature, value=-1.0)"
    error = backend_refusal(400, vllm_error(message, "temperature"))
    assert isinstance(error, BackendRefused) and error.status == 400
    assert json.loads(error.body()) == {
        "error": {
            "message": message,
            "type": "invalid_request_error",
            "param": "temperature",
            "code": "invalid_request",
        }
    }


def test_each_refusal_gets_the_fitting_code() -> None:
    """Context length, unknown model, other 404, 413, FastAPI's `detail` shape and plain text:
    each with the llmd code that fits and the backend's status."""
    context = "This model's maximum context length is 1024 tokens. However, ..."
    cases = {
        (400, vllm_error(context, "input_tokens")): (400, "context_length_exceeded"),
        (404, vllm_error("The model `x` does not exist.", "model", 404)): (404, "model_not_found"),
        (404, b'{"detail": "Not Found"}'): (404, "not_found"),
        (413, b"too big"): (413, "body_too_large"),
        (422, b'{"detail": [{"msg": "bad"}]}'): (422, "invalid_request"),
    }
    found = {}
    for (status, body), _ in cases.items():
        error = backend_refusal(status, body)
        found[(status, body)] = (error.status, error.reason)
    assert found == cases
    assert backend_refusal(404, b'{"detail": "Not Found"}').message == "Not Found"


def test_credentials_refused_are_llmds_failure_and_429_keeps_retry_after() -> None:
    """An upstream refusing llmd's key is an engine error (502), not the client's; its 429 is
    a rate_limited rejection with its Retry-After (bounded, 1 s when unreadable)."""
    assert isinstance(backend_refusal(401, b'{"error": "Unauthorized"}'), EngineError)
    limited = backend_refusal(429, b"slow down", "7")
    assert isinstance(limited, RateLimited) and (b"retry-after", b"7") in limited.headers()
    assert backend_refusal(429, b"", "inf").retry_after_s == 1.0
    assert backend_refusal(429, b"", "Wed, 21 Oct 2015 07:28:00 GMT").retry_after_s == 1.0


@pytest.fixture(scope="module")
def llmd() -> Iterator[LlmdProcess]:
    with LlmdProcess.running(sim_config(ensure_tiny_model()), "llmd-refusal-", 30) as process:
        yield process


def test_an_engine_400_reaches_the_client_as_llmds_error_and_counts_as_rejection(
    llmd: LlmdProcess,
) -> None:
    """`temperature: -1` (the engine's 400): the client gets llmd's shape with the engine's
    message and param and the headers llmd's own 400 carries; counted as a rejection."""
    url = llmd.base_url + "/v1/chat/completions"
    own = httpx.post(url, content=b"{nope", headers={"content-type": "application/json"})
    request_id = uuid.uuid4().hex
    before = Tally.take(llmd)
    refused = httpx.post(
        url, json={**CHAT, "temperature": -1}, headers={"x-request-id": request_id}
    )
    assert refused.status_code == 400 and own.status_code == 400
    error = refused.json()["error"]
    assert (error["code"], error["type"], error["param"]) == (
        "invalid_request",
        "invalid_request_error",
        "temperature",
    )
    assert error["message"].startswith("temperature must be non-negative, got -1")
    assert set(refused.headers) == set(own.headers)
    assert refused.headers["x-request-id"] == request_id
    assert refused.headers["content-type"] == "application/json"
    assert_counted_as_rejection(llmd, before, request_id, "invalid_request", 400)
