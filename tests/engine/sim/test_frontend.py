"""The simulated API server: one FIFO worker whose work items cost time."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from llmd.engine.sim.frontend import Frontend


@contextlib.asynccontextmanager
async def running(frontend: Frontend) -> AsyncIterator[Frontend]:
    task = asyncio.create_task(frontend.run())
    try:
        yield frontend
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def test_costs_add_up_one_item_at_a_time() -> None:
    """A burst of requests is handed over one after another: the n-th is done after n costs,
    and a step's outputs posted after them wait for all of them."""
    now = [10.0]
    frontend = Frontend(request_s=0.001, token_s=0.0001, clock=lambda: now[0])
    for _ in range(64):
        frontend.take_request(lambda: None)
    assert frontend.free_at == pytest.approx(10.064)
    frontend.take_outputs(8, lambda: None)
    assert frontend.free_at == pytest.approx(10.0648)


def test_each_steps_outputs_cost_a_fixed_part_and_a_part_per_token() -> None:
    """A step's outputs cost the per-step part once, whatever their number of tokens, plus
    the per-token part for each."""
    now = [0.0]
    frontend = Frontend(request_s=0.0, token_s=0.0001, step_s=0.002, clock=lambda: now[0])
    frontend.take_outputs(1, lambda: None)
    assert frontend.free_at == pytest.approx(0.0021)
    frontend.take_outputs(10, lambda: None)
    assert frontend.free_at == pytest.approx(0.0021 + 0.003)


def test_streamed_tokens_add_their_chunks_cost() -> None:
    """Of a step's tokens, those of streaming requests cost the per-chunk part on top."""
    now = [0.0]
    frontend = Frontend(
        request_s=0.0, token_s=0.0001, step_s=0.002, clock=lambda: now[0], stream_token_s=0.001
    )
    frontend.take_outputs(10, lambda: None, streamed=4)
    assert frontend.free_at == pytest.approx(0.002 + 0.001 + 0.004)


def test_an_idle_worker_starts_at_once() -> None:
    """Work posted after the worker went idle starts when it is posted, not when it went idle."""
    now = [0.0]
    frontend = Frontend(request_s=0.001, token_s=0.0, clock=lambda: now[0])
    frontend.take_request(lambda: None)
    now[0] = 5.0
    frontend.take_request(lambda: None)
    assert frontend.free_at == pytest.approx(5.001)


def test_free_work_with_nothing_queued_runs_synchronously() -> None:
    """With no costs (the zero-latency simulator) a callback runs inside the call."""
    done: list[str] = []
    frontend = Frontend(request_s=0.0, token_s=0.0)
    frontend.take_request(lambda: done.append("in"))
    frontend.take_outputs(3, lambda: done.append("out"))
    assert done == ["in", "out"]


async def test_callbacks_run_in_the_order_posted() -> None:
    """Outputs posted behind costly requests are delivered after them, in order, even when
    they cost nothing themselves."""
    done: list[str] = []
    all_done = asyncio.Event()
    frontend = Frontend(request_s=0.002, token_s=0.0)
    async with running(frontend):
        for name in ("a", "b", "c"):
            frontend.take_request(lambda name=name: done.append(name))
        frontend.take_outputs(1, lambda: (done.append("out"), all_done.set()))
        assert done == []
        await asyncio.wait_for(all_done.wait(), timeout=10)
    assert done == ["a", "b", "c", "out"]
