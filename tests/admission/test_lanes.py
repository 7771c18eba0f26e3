"""The batch lane: batch requests a few per pass of the event loop, other classes at once."""

from __future__ import annotations

import asyncio
import itertools

from llmd.admission.classes import Priority
from llmd.admission.lanes import BatchLane


async def through(lane: BatchLane, name: str, cls: Priority, order: list[str]) -> None:
    """A request's stages: its turn in the lane, then its work (recorded in `order`)."""
    await lane.turn(cls)
    order.append(name)


async def test_interactive_and_normal_never_wait() -> None:
    """A request of another class goes on without yielding, even behind a waiting wave."""
    lane = BatchLane(per_pass=1)
    order: list[str] = []
    wave = [asyncio.create_task(through(lane, f"b{i}", Priority.BATCH, order)) for i in range(3)]
    await asyncio.sleep(0)  # the wave takes its turns: one through, two waiting
    assert lane.waiting == 2
    for cls in (Priority.INTERACTIVE, Priority.NORMAL):
        step = lane.turn(cls)
        try:
            step.send(None)
        except StopIteration:
            pass  # done without suspending
        else:
            raise AssertionError(f"{cls.label} waited in the batch lane")
    await asyncio.gather(*wave)


async def test_a_batch_request_alone_does_not_wait() -> None:
    """The first batch requests of a pass, with none waiting, go on without yielding."""
    lane = BatchLane(per_pass=2)
    for _ in range(2):
        step = lane.turn(Priority.BATCH)
        try:
            step.send(None)
        except StopIteration:
            continue
        raise AssertionError("a batch request waited with room in its pass")
    assert lane.waiting == 0


async def test_work_arriving_after_a_wave_overtakes_its_batch_requests() -> None:
    """An interactive request that arrives after a wave of batch requests runs its stages
    after at most one pass of them, not after the whole wave (arrival order, no lane: last)."""
    lane = BatchLane(per_pass=2)
    order: list[str] = []
    wave = [asyncio.create_task(through(lane, f"b{i}", Priority.BATCH, order)) for i in range(10)]
    chat = asyncio.create_task(through(lane, "chat", Priority.INTERACTIVE, order))
    await asyncio.gather(*wave, chat)
    assert order.index("chat") <= 2
    assert [n for n in order if n != "chat"] == [f"b{i}" for i in range(10)]  # oldest first


async def test_each_pass_lets_per_pass_batch_requests_through() -> None:
    """Between two passes the loop runs other ready work; each pass lets `per_pass` go on."""
    lane = BatchLane(per_pass=3)
    order: list[str] = []
    wave = [asyncio.create_task(through(lane, f"b{i}", Priority.BATCH, order)) for i in range(9)]
    passes: list[int] = []

    async def tick() -> None:  # a task that yields once per pass, counting what got through
        while len(order) < 9:
            passes.append(len(order))
            await asyncio.sleep(0)

    await asyncio.gather(tick(), *wave)
    steps = [b - a for a, b in itertools.pairwise(passes)]
    assert max(steps) <= 3 and len(passes) >= 3


async def test_a_cancelled_waiter_leaves_the_lane_and_takes_no_turn() -> None:
    """A batch request whose client left while it waited is skipped; the next ones go on."""
    lane = BatchLane(per_pass=1)
    order: list[str] = []
    first = asyncio.create_task(through(lane, "b0", Priority.BATCH, order))
    leaver = asyncio.create_task(through(lane, "gone", Priority.BATCH, order))
    last = asyncio.create_task(through(lane, "b2", Priority.BATCH, order))
    await asyncio.sleep(0)
    assert lane.waiting == 2
    leaver.cancel()
    await asyncio.gather(first, last)
    assert order == ["b0", "b2"] and leaver.cancelled() and lane.waiting == 0
