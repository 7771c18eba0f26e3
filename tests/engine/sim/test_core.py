"""The engine core and its API server: hand-over of requests, delivery of tokens."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from llmd.engine.sim.core import SimEngine
from llmd.engine.sim.faults import RequestFault
from llmd.engine.sim.metrics import SimMetrics
from llmd.engine.sim.requests import GenerationRequest
from llmd.engine.sim.timing import TimingModel
from llmd.engine.sim.tokenizer import SimTokenizer


def request(max_tokens: int = 4, stream: bool = False) -> GenerationRequest:
    return GenerationRequest(
        kind="completion", model="tiny", prompt_ids=(1, 2, 3), max_tokens=max_tokens, stream=stream
    )


@pytest.fixture
async def make_engine(tiny_model: Path) -> AsyncIterator[Callable[[TimingModel], SimEngine]]:
    """`make_engine(timing)`: a started engine with 8 seats; closed after the test."""
    engines: list[SimEngine] = []

    def factory(timing: TimingModel) -> SimEngine:
        engine = SimEngine.build(
            tokenizer=SimTokenizer(tiny_model),
            metrics=SimMetrics("tiny", block_size=128, num_gpu_blocks=64, max_model_len=1024),
            timing=timing,
            max_num_seqs=8,
            max_num_batched_tokens=2048,
            block_size=128,
            num_gpu_blocks=64,
        )
        engine.start()
        engines.append(engine)
        return engine

    yield factory
    for engine in engines:
        await engine.close()


EngineFactory = Callable[[TimingModel], SimEngine]


async def test_abort_while_the_api_server_holds_the_request(make_engine: EngineFactory) -> None:
    """A request aborted before the API server handed it over never reaches the scheduler."""
    engine = make_engine(dataclasses.replace(TimingModel.zero(), request_overhead_s=3600.0))
    state = engine.submit(request(), RequestFault())
    assert engine.num_waiting == 0 and engine.num_running == 0
    engine.abort(state)
    assert state.finish_reason == "abort"
    assert not engine.scheduler.has_work and engine.frontend.free_at > 0


async def test_engine_core_runs_ahead_of_the_api_server(make_engine: EngineFactory) -> None:
    """The engine frees a finished sequence's seat at once; its tokens reach the request only
    when the API server gets to them."""
    engine = make_engine(dataclasses.replace(TimingModel.zero(), output_token_s=3600.0))
    state = engine.submit(request(max_tokens=1), RequestFault())
    for _ in range(1000):
        if not engine.scheduler.has_work:
            break
        await asyncio.sleep(0.001)
    assert not engine.scheduler.has_work  # the one step ran and the sequence ended
    assert state.token_ids == [] and state.finish_reason is None  # not delivered yet


async def test_only_streamed_tokens_wait_for_their_chunks(make_engine: EngineFactory) -> None:
    """The API server's per-streamed-token cost delays a streaming request's tokens, not those
    of a request answered in one piece."""
    engine = make_engine(dataclasses.replace(TimingModel.zero(), stream_token_s=3600.0))
    whole = engine.submit(request(max_tokens=1), RequestFault())
    for _ in range(1000):
        if whole.done:
            break
        await asyncio.sleep(0.001)
    assert whole.token_ids and whole.finish_reason == "length"
    streamed = engine.submit(request(max_tokens=1, stream=True), RequestFault())
    for _ in range(1000):
        if not engine.scheduler.has_work:
            break
        await asyncio.sleep(0.001)
    assert not engine.scheduler.has_work  # its one step ran
    assert streamed.token_ids == [] and streamed.finish_reason is None  # not delivered yet
