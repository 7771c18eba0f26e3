"""Streams of several choices through a real `llmd serve` on the simulator: every output token
counted (the engine's usage, which llmd asked for), the client's bytes without the usage
event, each choice's finish event with the engine's fingerprint, as without llmd's ask."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from llmd.engine.sim.responses import SYSTEM_FINGERPRINT
from tests.proxy.test_messages_sim import finished
from tests.proxy.test_observability import samples, value
from tests.support.llmd_process import LlmdProcess
from tests.support.model import ensure_tiny_model
from tests.support.sim_process import sim_config

CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 40}
# Steps faster than the simulated API server streams them: it folds a choice's steps into one
# event now and then, as vLLM's does (measured there: 14 events for 15 tokens at n=2).
FOLDING = ("--step-base-ms", "0.2", "--stream-token-us", "300")


@pytest.fixture(scope="module")
def llmd() -> Iterator[LlmdProcess]:
    process = LlmdProcess.start(sim_config(ensure_tiny_model(), FOLDING))
    try:
        process.wait_ready(timeout_s=30)
        yield process
    finally:
        process.stop()


def chunks(text: str) -> list[dict[str, Any]]:
    blocks = text.removesuffix("\n\n").split("\n\n")
    assert blocks[-1] == "data: [DONE]"
    return [json.loads(b.removeprefix("data: ")) for b in blocks[:-1]]


def generated(llmd: LlmdProcess) -> float:
    return value(samples(llmd), "llmd_generation_tokens_total", tenant="anonymous") or 0.0


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
def test_every_token_of_three_choices_is_counted(llmd: LlmdProcess, path: str) -> None:
    """n=3 of 40 tokens streamed: the request log and llmd_generation_tokens_total count 120;
    the client sees no usage event and each choice's last event with the fingerprint."""
    body: dict[str, Any] = {**CHAT, "n": 3, "stream": True}
    if path == "/v1/completions":
        body = {"model": "tiny", "prompt": "Hi", "max_tokens": 40, "n": 3, "stream": True}
    before = generated(llmd)
    answer = httpx.post(llmd.base_url + path, json=body, timeout=30)
    assert answer.status_code == 200
    sent = chunks(answer.text)
    assert all(c["choices"] for c in sent) and all("usage" not in c for c in sent)
    ends = [c for c in sent if c["choices"][0]["finish_reason"] is not None]
    assert sorted(c["choices"][0]["index"] for c in ends) == [0, 1, 2]
    assert all(c["system_fingerprint"] == SYSTEM_FINGERPRINT for c in ends)
    assert all("system_fingerprint" not in c for c in sent if c not in ends)
    assert finished(llmd, answer.headers["x-request-id"])["output_tokens"] == 120
    assert generated(llmd) - before == 120


def test_a_client_that_asked_for_the_usage_gets_it(llmd: LlmdProcess) -> None:
    """include_usage sent by the client: its usage event comes through, the count the same."""
    body = {**CHAT, "n": 2, "stream": True, "stream_options": {"include_usage": True}}
    answer = httpx.post(llmd.base_url + "/v1/chat/completions", json=body, timeout=30)
    sent = chunks(answer.text)
    assert sent[-1]["choices"] == [] and sent[-1]["usage"]["completion_tokens"] == 80
    assert sent[-1]["system_fingerprint"] == SYSTEM_FINGERPRINT
    assert finished(llmd, answer.headers["x-request-id"])["output_tokens"] == 80
