"""The alarm at the next deadline: it rings once at the instant last armed, arming the same
instant again keeps its timer, and arming None or closing it cancels the timer."""

from __future__ import annotations

import asyncio

from llmd.admission.alarm import Alarm


async def test_it_rings_once_at_the_last_instant_armed() -> None:
    """Moved from far off to near, it rings once, near; then it is unarmed."""
    rung = asyncio.Event()
    rings: list[float] = []
    loop = asyncio.get_running_loop()

    def ring() -> None:
        rings.append(loop.time())
        rung.set()

    alarm = Alarm(ring)
    now = loop.time()
    alarm.arm(now + 3600, now)
    alarm.arm(now + 0.01, now)
    await asyncio.wait_for(rung.wait(), timeout=10)
    assert len(rings) == 1 and rings[0] >= now + 0.01
    assert alarm.at is None


async def test_the_same_instant_again_keeps_its_timer() -> None:
    """Arming the instant it is set to leaves its timer as it is (no new call_later); closing
    cancels it."""
    loop = asyncio.get_running_loop()
    alarm = Alarm(lambda: None)
    now = loop.time()
    alarm.arm(now + 3600, now)
    handle = alarm._handle
    alarm.arm(now + 3600, now + 1)
    assert alarm._handle is handle and handle is not None and not handle.cancelled()
    alarm.close()
    assert handle.cancelled()


async def test_none_unarms_it() -> None:
    """Armed to None, its timer is cancelled and it is unarmed."""
    loop = asyncio.get_running_loop()
    alarm = Alarm(lambda: None)
    now = loop.time()
    alarm.arm(now + 3600, now)
    handle = alarm._handle
    alarm.arm(None, now)
    assert handle is not None and handle.cancelled() and alarm._handle is None
    assert alarm.at is None
