"""Validation inside admission's view: prompts are counted in turns by class (interactive
first), at most `validation.max_tokenize_calls` at once on the engine's /tokenize, never for a
client that has left, while the request is live for a drain; a deadline counts from arrival.
Against a fake engine whose /tokenize is slow."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.fake_engine import FakeEngine, ProxyStack
from tests.support.waiting import until
from tests.validation.conftest import STRING_TEMPLATE, make_tokenizer_dir


def chat(text: str) -> dict[str, Any]:
    return {"model": "tiny", "messages": [{"role": "user", "content": text}], "max_tokens": 5}


def texts(engine: FakeEngine) -> list[str]:
    """The user message of each /tokenize call, in the order the engine got them."""
    return [body["messages"][0]["content"] for body in engine.tokenized]


@contextlib.contextmanager
def counts_held(engine: FakeEngine) -> Iterator[threading.Event]:
    """The engine's /tokenize calls wait until the event yielded is set (at the latest when
    the block ends), so that a test lines requests up while a count runs, however slow the
    machine."""
    engine.tokenize_hold = hold = threading.Event()
    try:
        yield hold
    finally:
        hold.set()


@pytest.fixture
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tokenizer_dir(tmp_path_factory.mktemp("model"), STRING_TEMPLATE)


def stack(model: Path, tmp: Path, engine: FakeEngine, calls: int) -> Any:
    """The proxy counting through the engine's /tokenize, `calls` at a time."""
    return ProxyStack.run(
        model, tmp, 100_000, engine=engine, tokenizer="engine", max_tokenize_calls=calls
    )


@pytest.fixture
def slow_engine() -> Iterator[FakeEngine]:
    yield FakeEngine(tokenize_delay_s=0.4)


async def test_counts_take_turns_interactive_first(
    model: Path, tmp_path: Path, slow_engine: FakeEngine
) -> None:
    """One count at a time: three batch requests arrive, then an interactive one; the
    interactive one is counted as soon as the running count ends, before the two waiting
    batch requests."""
    with stack(model, tmp_path, slow_engine, calls=1) as running, counts_held(slow_engine) as hold:
        turns = running.ctx.validators.for_model("tiny").remote_turns
        async with httpx.AsyncClient(base_url=running.base_url, timeout=30) as client:

            async def send(text: str, cls: str, waiting: int) -> asyncio.Task[httpx.Response]:
                """Send one request; return once `waiting` requests wait for their turn."""
                headers = {"x-llmd-priority": cls}
                task = asyncio.create_task(
                    client.post("/v1/chat/completions", json=chat(text), headers=headers)
                )
                assert await until(lambda: turns.waiting == waiting, timeout_s=10)
                return task

            first = await send("batch 1", "batch", 0)
            assert await until(lambda: len(slow_engine.tokenized) == 1, timeout_s=10)
            later = [await send("batch 2", "batch", 1), await send("batch 3", "batch", 2)]
            urgent = await send("interactive", "interactive", 3)
            hold.set()
            answers = await asyncio.gather(first, *later, urgent)
    assert [a.status_code for a in answers] == [200] * 4
    assert texts(slow_engine) == ["batch 1", "interactive", "batch 2", "batch 3"]


async def test_engine_tokenize_calls_are_bounded(
    model: Path, tmp_path: Path, slow_engine: FakeEngine
) -> None:
    """Eight requests at once, max_tokenize_calls = 2: the engine never counts more than two
    prompts at a time, and every request is served."""
    with stack(model, tmp_path, slow_engine, calls=2) as running, counts_held(slow_engine) as hold:
        turns = running.ctx.validators.for_model("tiny").remote_turns
        async with httpx.AsyncClient(base_url=running.base_url, timeout=30) as client:
            sent = [
                asyncio.create_task(client.post("/v1/chat/completions", json=chat(f"r{i}")))
                for i in range(8)
            ]
            lined_up = lambda: slow_engine.tokenizing == 2 and turns.waiting == 6  # noqa: E731
            assert await until(lined_up, timeout_s=10)
            hold.set()
            answers = await asyncio.gather(*sent)
    assert [a.status_code for a in answers] == [200] * 8
    assert len(slow_engine.tokenized) == 8
    assert slow_engine.tokenizing_peak == 2


async def test_a_client_that_left_is_never_counted(
    model: Path, tmp_path: Path, slow_engine: FakeEngine
) -> None:
    """A request waiting for its turn whose client disconnects leaves the line: its prompt
    never reaches /tokenize, and llmd holds nothing of it afterwards."""
    with stack(model, tmp_path, slow_engine, calls=1) as running, counts_held(slow_engine) as hold:
        turns = running.ctx.validators.for_model("tiny").remote_turns
        async with (
            httpx.AsyncClient(base_url=running.base_url, timeout=30) as client,
            httpx.AsyncClient(base_url=running.base_url, timeout=30) as leaver,
        ):
            first = asyncio.create_task(client.post("/v1/chat/completions", json=chat("stays")))
            assert await until(lambda: len(slow_engine.tokenized) == 1, timeout_s=10)
            gone = asyncio.create_task(leaver.post("/v1/chat/completions", json=chat("leaves")))
            assert await until(lambda: turns.waiting == 1, timeout_s=10)
            gone.cancel()
            await asyncio.gather(gone, return_exceptions=True)
            await leaver.aclose()  # the connection closes: llmd sees the disconnect
            assert await until(lambda: turns.waiting == 0, timeout_s=10)
            hold.set()
            assert (await first).status_code == 200
        assert await until(lambda: not len(running.ctx.inflight), timeout_s=10)
        assert running.ctx.admission.bodies.held == 0
    assert texts(slow_engine) == ["stays"]


async def test_a_request_in_validation_is_live_for_a_drain(
    model: Path, tmp_path: Path, slow_engine: FakeEngine
) -> None:
    """While its prompt is being counted a request is in the in-flight registry (what a drain
    and a restart wait for) and counted as queued in the status."""
    with stack(model, tmp_path, slow_engine, calls=1) as running, counts_held(slow_engine) as hold:
        async with httpx.AsyncClient(base_url=running.base_url, timeout=30) as client:
            sent = asyncio.create_task(client.post("/v1/chat/completions", json=chat("x")))
            assert await until(lambda: len(slow_engine.tokenized) == 1, timeout_s=10)
            assert len(running.ctx.inflight) == 1
            assert running.ctx.snapshot().queued == 1
            hold.set()
            assert (await sent).status_code == 200
        assert await until(lambda: not len(running.ctx.inflight), timeout_s=5)


def test_a_deadline_counts_from_arrival(
    model: Path, tmp_path: Path, slow_engine: FakeEngine
) -> None:
    """x-llmd-deadline-ms 200 on a request whose count takes 400 ms: 503 queue_timeout when
    it reaches admission, though the engine is free (the deadline is from arrival)."""
    with (
        stack(model, tmp_path, slow_engine, calls=1) as running,
        httpx.Client(base_url=running.base_url, timeout=30) as client,
    ):
        answer = client.post(
            "/v1/chat/completions", json=chat("late"), headers={"x-llmd-deadline-ms": "200"}
        )
    assert answer.status_code == 503, answer.text
    assert answer.json()["error"]["code"] == "queue_timeout"
    assert int(answer.headers["retry-after"]) >= 1
    assert slow_engine.received == []
