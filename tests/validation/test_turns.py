"""Turns at a shared resource: bounded holders, lowest rank first, cancelled waiters skipped."""

from __future__ import annotations

import asyncio

import pytest

from llmd.validation.turns import Turns


async def test_waiters_go_by_rank_then_arrival_and_a_cancelled_one_never_holds() -> None:
    """One slot held; waiters of rank 2, 2, 0 and a rank-0 one cancelled while waiting: they
    hold in order 0, 2 (first), 2 (second); the cancelled one never does."""
    turns = Turns(1)
    order: list[str] = []
    gate = asyncio.Event()

    async def hold(name: str, rank: int, wait: asyncio.Event | None = None) -> None:
        async with turns.turn(rank):
            order.append(name)
            if wait is not None:
                await wait.wait()

    first = asyncio.create_task(hold("holder", 1, gate))
    await asyncio.sleep(0)
    tasks = [asyncio.create_task(hold(n, r)) for n, r in (("b1", 2), ("b2", 2), ("i", 0))]
    gone = asyncio.create_task(hold("gone", 0))
    for _ in range(3):
        await asyncio.sleep(0)
    assert turns.waiting == 4
    gone.cancel()
    with pytest.raises(asyncio.CancelledError):
        await gone
    assert turns.waiting == 3
    gate.set()
    await asyncio.gather(first, *tasks)
    assert order == ["holder", "i", "b1", "b2"]
    assert turns.busy == 0


async def test_at_most_slots_hold_at_once_and_a_resize_lets_waiters_in() -> None:
    """Two slots, five holders: never more than two at once; a resize to 4 serves two waiters
    at once."""
    turns = Turns(2)
    release = asyncio.Event()
    holding: list[int] = []
    peak = 0

    async def hold() -> None:
        nonlocal peak
        async with turns.turn(0):
            holding.append(1)
            peak = max(peak, len(holding))
            await release.wait()
            holding.pop()

    tasks = [asyncio.create_task(hold()) for _ in range(5)]
    for _ in range(3):
        await asyncio.sleep(0)
    assert len(holding) == 2 and turns.waiting == 3
    turns.resize(4)
    for _ in range(3):
        await asyncio.sleep(0)
    assert len(holding) == 4 and turns.waiting == 1
    release.set()
    await asyncio.gather(*tasks)
    assert peak == 4 and turns.busy == 0
