"""The arrival-order swapper scripts/bench_swap.py measures llmd against (tests/support/
arrival_swapper.py), on three simulator engines: it swaps on each change of the requested
model, in arrival order, and never sends a request to a model that sleeps."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.support.arrival_swapper import ArrivalSwapper, SimBoots, start_engines
from tests.support.lazy_import import lazy_module
from tests.support.sim_process import SimProcess
from tests.support.waiting import until

if TYPE_CHECKING:
    import openai
else:  # its import costs about 0.7 s of CPU in every worker that collects this module
    openai = lazy_module("openai")

MODELS = ("chat", "coder", "small")


@pytest.fixture(scope="module")
def engines(tiny_model_dir: Path) -> Iterator[dict[str, SimProcess]]:
    """The three engines, chat awake and the others asleep, shared by the tests of sleep
    mode: each leaves chat resident again (and says so), as it found them."""
    started = start_engines(tiny_model_dir, MODELS, ["--sim-wake-s", "0.05"])
    try:
        yield started
    finally:
        for engine in started.values():
            engine.stop()


async def _chat(client: openai.AsyncOpenAI, model: str, max_tokens: int = 4) -> str | None:
    """A streamed chat; its finish reason (None: the answer was cut)."""
    stream = await client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "hi"}],
        max_tokens=max_tokens,
        stream=True,
    )
    finished = None
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].finish_reason:
            finished = chunk.choices[0].finish_reason
    return finished


async def test_a_b_a_swaps_twice(engines: dict[str, SimProcess]) -> None:
    """Calls for chat, coder, chat in turn: two swaps, each answer complete."""
    swapper = ArrivalSwapper({m: e.socket for m, e in engines.items()}, resident="chat")
    async with swapper.serving() as url:
        client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="x", max_retries=0)
        for model in ("chat", "coder", "chat"):
            assert await _chat(client, model) is not None
        await client.close()
    assert swapper.swaps == 2 and swapper.resident == "chat"


async def test_requests_wait_in_arrival_order(engines: dict[str, SimProcess]) -> None:
    """A coder call that comes while chat streams waits for it; a chat call after the coder call
    waits for coder's swap (no gathering of chat calls): three calls, two swaps, all complete."""
    swapper = ArrivalSwapper({m: e.socket for m, e in engines.items()}, resident="chat")
    async with swapper.serving() as url:
        client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="x", max_retries=0)
        long_chat = asyncio.create_task(_chat(client, "chat", max_tokens=64))
        assert await until(lambda: swapper._in_flight == 1, 10.0, every_s=0.01)
        coder = asyncio.create_task(_chat(client, "coder"))
        assert await until(swapper._lock.locked, 10.0, every_s=0.01)
        late_chat = asyncio.create_task(_chat(client, "chat"))
        finished = await asyncio.gather(long_chat, coder, late_chat)
        await client.close()
    assert None not in finished
    assert swapper.swaps == 2 and swapper.resident == "chat"


async def test_without_sleep_mode_it_stops_one_engine_and_boots_the_next(
    tiny_model_dir: Path,
) -> None:
    """With `Boots` (vLLM's CPU build has no sleep mode): chat, coder, chat in turn swap twice,
    each a stop of the resident engine and a boot of the next (one engine running at a time),
    and every answer is complete."""
    boots = SimBoots(tiny_model_dir, [])
    try:
        sockets = {m: tiny_model_dir / f"{m}-not-booted.sock" for m in MODELS}
        sockets["chat"] = boots.boot("chat")
        swapper = ArrivalSwapper(sockets, resident="chat", boots=boots)
        async with swapper.serving() as url:
            client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="x", max_retries=0)
            for model in ("chat", "coder", "chat"):
                assert await _chat(client, model) is not None
                assert list(boots.running) == [model]
            await client.close()
        assert swapper.swaps == 2 and swapper.resident == "chat"
    finally:
        for model in list(boots.running):
            boots.stop(model)
