"""Retry-After from the measured release rate of the scope a request waits on."""

from __future__ import annotations

import tracemalloc

import pytest

from llmd.admission.classes import Priority
from llmd.admission.rates import ReleaseRates

NORMAL, BATCH = Priority.NORMAL, Priority.BATCH


def test_each_scope_has_its_own_rate() -> None:
    """A tenant releasing every 5 s waits on its own rate, not on the busy class's: with one
    request ahead, 2 x 5 s; its class (20 releases a second) 1 s."""
    rates = ReleaseRates()
    for i in range(4):
        rates.record("slow", NORMAL, 5.0 * i)
    for i in range(300):
        rates.record("fast", NORMAL, 5.0 + i * 0.05)
    now = 20.0
    assert rates.wait_s(("slow", None), 1, now) == pytest.approx(2 * 20.0 / 4)
    assert rates.wait_s((None, NORMAL), 1, now) == 1.0
    assert rates.wait_s(("slow", BATCH), 0, now) == 1.0  # never released: 1 s per position


def test_a_scope_that_stopped_releasing_waits_longer_as_time_passes() -> None:
    """Past the 30 s window, the rate is one release since the last one: a slot busy for
    40 s reads as one release per 40 s. Capped at 10 minutes."""
    rates = ReleaseRates()
    rates.record("t", NORMAL, 0.0)
    assert rates.wait_s(("t", None), 0, 14.0) == pytest.approx(14.0)
    assert rates.wait_s(("t", None), 1, 40.0) == pytest.approx(80.0)
    assert rates.wait_s(("t", None), 100, 40.0) == 600.0


def test_a_release_counts_while_any_of_its_second_is_in_the_window() -> None:
    """Releases are counted by the second: ones at 0.2 and 0.9 s still count at 30.5 s (their
    second overlaps the 30 s window), over the time since the first of them; at 31 s their
    second has left the window and only the later release counts."""
    rates = ReleaseRates()
    for at in (0.2, 0.9, 20.0):
        rates.record("t", NORMAL, at)
    assert rates.per_s(("t", None), 30.5) == pytest.approx(3 / 30.3)
    assert rates.per_s(("t", None), 31.0) == pytest.approx(1 / 11.0)


def test_memory_does_not_grow_with_the_release_rate() -> None:
    """200,000 releases over 20 s (10,000 a second) are held in a few kilobytes, where a time
    kept per release in each of four scopes took tens of megabytes; the rate is still read."""
    tracemalloc.start()
    try:
        rates = ReleaseRates()
        before = tracemalloc.get_traced_memory()[0]
        for i in range(200_000):
            rates.record("t", NORMAL, i * 0.0001)
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held < 64 * 1024, held
    assert rates.per_s((None, None), 20.0) == pytest.approx(10_000, rel=0.01)
