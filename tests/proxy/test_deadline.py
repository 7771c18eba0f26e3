"""A deadline kept as a number and checked by one timer (llmd/proxy/deadline.py), on a loop
whose clock and timers the test moves by hand."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, cast

import pytest

from llmd.proxy.deadline import Deadline


class _Timer:
    def __init__(self, when: float, callback: Callable[[], None]) -> None:
        self._when, self.callback, self.cancelled = when, callback, False

    def when(self) -> float:
        return self._when

    def cancel(self) -> None:
        self.cancelled = True


class _Loop:
    """`time()` and `call_at` over a clock that `advance` moves, firing timers due by then."""

    def __init__(self) -> None:
        self.now = 100.0
        self.timers: list[_Timer] = []
        self.armed = 0

    def time(self) -> float:
        return self.now

    def call_at(self, when: float, callback: Callable[[], None]) -> _Timer:
        timer = _Timer(when, callback)
        self.timers.append(timer)
        self.armed += 1
        return timer

    def pending(self) -> list[float]:
        return sorted(t.when() for t in self.timers if not t.cancelled)

    def advance(self, seconds: float) -> None:
        end = self.now + seconds
        while due := [t for t in self.timers if not t.cancelled and t.when() <= end]:
            timer = min(due, key=_Timer.when)
            self.timers.remove(timer)
            self.now = max(self.now, timer.when())
            timer.callback()
        self.now = end


def _deadline() -> tuple[Deadline, _Loop, list[float]]:
    loop, expired = _Loop(), []
    deadline = Deadline(
        "test", cast(asyncio.AbstractEventLoop, loop), lambda: expired.append(loop.now)
    )
    return deadline, loop, expired


def test_a_deadline_past_expires_once_and_clears() -> None:
    """Set 1 s ahead and left: `expired` is called at 1 s, once, with no deadline left."""
    deadline, loop, expired = _deadline()
    deadline.set_in(1.0)
    loop.advance(5.0)
    assert expired == [101.0] and deadline.due is None and loop.pending() == []
    assert loop.armed == 1


def test_setting_it_again_moves_the_one_timer_on() -> None:
    """Set at each of five requests 0.1 s apart: the timer is armed at the first and moved once,
    at its firing, to the last deadline set, where it expires (not at the first's)."""
    deadline, loop, expired = _deadline()
    for _ in range(5):
        deadline.set_in(1.0)
        loop.advance(0.1)
    loop.advance(5.0)
    assert expired == [pytest.approx(101.4)]
    assert loop.armed == 2


def test_a_cleared_deadline_stops_its_timer_at_its_firing() -> None:
    """Cleared: the timer stays until it fires, finds none, and arms no other; nothing
    expires."""
    deadline, loop, expired = _deadline()
    deadline.set_in(1.0)
    deadline.clear()
    assert loop.pending() == [101.0]
    loop.advance(5.0)
    assert expired == [] and loop.pending() == []


def test_a_sooner_deadline_replaces_a_later_timer() -> None:
    """A shorter timeout (a reload) than the timer armed: the deadline expires on time."""
    deadline, loop, expired = _deadline()
    deadline.set_in(10.0)
    deadline.set_in(1.0)
    assert loop.pending() == [101.0]
    loop.advance(2.0)
    assert expired == [101.0]


def test_stop_cancels_its_timer() -> None:
    """Stopped (the connection gone): its timer is cancelled at once and nothing expires."""
    deadline, loop, expired = _deadline()
    deadline.set_in(1.0)
    deadline.stop()
    assert loop.pending() == []
    loop.advance(5.0)
    assert expired == [] and loop.pending() == []


def test_expired_runs_with_no_deadline_set() -> None:
    """`expired` sees `due` cleared, so it may set a new deadline itself."""
    seen: list[Any] = []
    loop = _Loop()
    deadline = Deadline(
        "test", cast(asyncio.AbstractEventLoop, loop), lambda: seen.append(deadline.due)
    )
    deadline.set_in(1.0)
    loop.advance(2.0)
    assert seen == [None]
