"""Sliding latency and rate windows: percentiles within bucket precision, expiry, rates."""

from __future__ import annotations

import random

from llmd.telemetry.windows import LatencyWindow, RateWindow


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_percentiles_are_within_four_percent_above_the_true_value() -> None:
    """p50/p95/p99 of 10,000 values land within one bucket (4%) above the exact figure."""
    clock = Clock()
    window = LatencyWindow(clock)
    rng = random.Random(7)
    values = sorted(rng.lognormvariate(-2, 1) for _ in range(10_000))
    for value in values:
        window.add(value)
    result = window.percentiles(60)
    assert result.count == 10_000
    for q, got in ((0.50, result.p50), (0.95, result.p95), (0.99, result.p99)):
        exact = values[int(q * len(values)) - 1]
        assert got is not None and exact <= got <= exact * 1.041 + 1e-6


def test_values_leave_the_window_as_time_passes() -> None:
    """A value counts in the 1-minute window for 60 s and in the 5-minute one for 300 s."""
    clock = Clock()
    window = LatencyWindow(clock)
    window.add(2.0)
    clock.now += 61
    window.add(0.01)
    assert window.percentiles(60).count == 1
    assert window.percentiles(300).count == 2
    clock.now += 301
    assert window.percentiles(300).count == 0
    assert window.percentiles(300).p50 is None


def test_memory_is_bounded_by_seconds_not_requests() -> None:
    """A thousand values in one second occupy one slot."""
    clock = Clock()
    window = LatencyWindow(clock)
    for _ in range(1000):
        window.add(0.1)
    assert len(window._live[300]) == 1


def test_rates_are_per_second_over_the_window() -> None:
    """120 requests spread over 60 s read as 2 per second."""
    clock = Clock()
    rates = RateWindow(clock)
    for _ in range(60):
        rates.add(2, 200, 50)
        clock.now += 1
    assert rates.rates(60, 3) == (2.0, 200.0, 50.0)
