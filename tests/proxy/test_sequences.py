"""Seats and KV are counted in sequences through the proxy: a request takes one seat per prompt
and per `n`, and one that could not run even on an idle engine is refused at validation."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from llmd.admission.capacity import EngineLoad
from llmd.config import AdmissionConfig
from tests.support.fake_engine import FakeEngine, ProxyStack
from tests.support.waiting import until
from tests.validation.conftest import STRING_TEMPLATE, make_tokenizer_dir


def chat(n: int, max_tokens: int = 5) -> dict[str, Any]:
    return {"model": "tiny", "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": max_tokens, "n": n}  # fmt: skip


@pytest.fixture
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyStack]:
    """The proxy with 8 engine seats (no batch reserve) before an engine that holds every
    generation request until the test lets it go."""
    model = make_tokenizer_dir(tmp_path_factory.mktemp("model"), STRING_TEMPLATE)
    runtime = Path(tmp_path_factory.mktemp("run"))
    engine = FakeEngine(hold=threading.Event())
    admission = AdmissionConfig(max_in_flight=8, batch_reserve=0)
    with ProxyStack.run(model, runtime, 4096, engine=engine, admission=admission) as stack:
        try:
            yield stack
        finally:
            assert engine.hold is not None
            engine.hold.set()


async def test_a_request_takes_a_seat_per_sequence(running: ProxyStack) -> None:
    """Three chats with n = 4 and 8 seats: two reach the engine, the third waits in llmd
    until one of them ends."""
    hold = running.engine.hold
    assert hold is not None
    async with httpx.AsyncClient(base_url=running.base_url, timeout=30) as client:
        sent = [
            asyncio.create_task(client.post("/v1/chat/completions", json=chat(4))) for _ in range(3)
        ]
        # Released requests reach the engine a moment after they leave the queue: wait for both.
        scheduler, engine = running.ctx.admission.scheduler, running.engine
        assert await until(
            lambda: scheduler.queued() == 1 and len(engine.received) == 2, timeout_s=10
        )
        assert running.ctx.admission.capacity.gate("main").in_flight == 8
        hold.set()
        answers = await asyncio.gather(*sent)
    assert [a.status_code for a in answers] == [200] * 3
    assert len(running.engine.received) == 3


def test_more_sequences_than_the_engine_seats_is_refused(running: ProxyStack) -> None:
    """n = 9 with 8 seats could never start: 400 invalid_request saying why, the engine never
    sees it."""
    answer = httpx.post(running.base_url + "/v1/chat/completions", json=chat(9), timeout=30)
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["code"] == "invalid_request" and "9 sequences" in error["message"]
    assert running.engine.received == []


def test_more_kv_than_the_budget_is_refused(running: ProxyStack) -> None:
    """With 8,192 KV tokens (budget 0.9 x 8,192), n = 8 sequences of up to 1,000 output tokens
    could never fit: 400 invalid_request naming the tokens; n = 2 fits."""
    running.ctx.admission.capacity.gate("main").load = EngineLoad(kv_tokens=8192)
    url = running.base_url + "/v1/chat/completions"
    answer = httpx.post(url, json=chat(8, max_tokens=1000), timeout=30)
    assert answer.status_code == 400, answer.text
    message = answer.json()["error"]["message"]
    assert "KV cache" in message and "7,372" in message
    assert running.engine.received == []
    assert running.engine.hold is not None
    running.engine.hold.set()
    assert httpx.post(url, json=chat(2, max_tokens=1000), timeout=30).status_code == 200


def test_more_prompts_than_the_limit_is_refused(running: ProxyStack) -> None:
    """A completions request with 65 prompts (validation.max_prompts 64): 400 invalid_request
    naming `prompt`; 2 prompts with n = 4 (8 seats, as many as the engine has) reach it."""
    url = running.base_url + "/v1/completions"
    many = {"model": "tiny", "prompt": ["hi"] * 65, "max_tokens": 5}
    answer = httpx.post(url, json=many, timeout=30)
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["param"] == "prompt" and "64" in error["message"]
    assert running.engine.received == []
    assert running.engine.hold is not None
    running.engine.hold.set()
    two = {"model": "tiny", "prompt": ["hi", "ho"], "max_tokens": 5, "n": 4}
    assert httpx.post(url, json=two, timeout=30).status_code == 200
    assert len(running.engine.received) == 1
