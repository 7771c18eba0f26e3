"""Sliding windows over the last minutes: latency percentiles and throughput, bounded in memory.

Each second has a slot; a latency slot counts values in log-spaced buckets (about 4% wide), so
recording costs a bisect and an increment whatever the request rate, and a percentile over five
minutes merges at most 300 small slots. Percentiles are bucket upper bounds: within 4% above the
true value (HdrHistogram's idea at a coarser precision).
"""

from __future__ import annotations

import bisect
import collections
import dataclasses
import math
import time
from collections.abc import Callable, Iterable

# Bucket upper bounds, seconds: 100 µs to about 3 hours, 4% apart.
_GROWTH = 1.04
BOUNDS: tuple[float, ...] = tuple(1e-4 * _GROWTH**i for i in range(int(math.log(1e8, _GROWTH)) + 2))
HORIZON_S = 300


@dataclasses.dataclass(frozen=True)
class Percentiles:
    """p50/p95/p99 in seconds over a window (None when it saw no value) and how many values."""

    p50: float | None
    p95: float | None
    p99: float | None
    count: int


class LatencyWindow:
    """Values in seconds, kept one slot per second for `HORIZON_S` seconds."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._slots: collections.deque[tuple[int, collections.Counter[int]]] = collections.deque()

    def add(self, seconds: float) -> None:
        """Record one value (negative values count as 0)."""
        second = int(self._clock())
        if not self._slots or self._slots[-1][0] != second:
            self._slots.append((second, collections.Counter()))
            self._expire(second)
        self._slots[-1][1][bisect.bisect_left(BOUNDS, max(seconds, 0.0))] += 1

    def percentiles(self, window_s: int) -> Percentiles:
        """p50/p95/p99 of the values recorded in the last `window_s` seconds."""
        merged: collections.Counter[int] = collections.Counter()
        for counts in self._recent(window_s):
            merged.update(counts)
        total = sum(merged.values())
        if not total:
            return Percentiles(None, None, None, 0)
        ordered = sorted(merged.items())
        p50, p95, p99 = (_quantile(ordered, total, q) for q in (0.50, 0.95, 0.99))
        return Percentiles(p50, p95, p99, count=total)

    def _recent(self, window_s: int) -> Iterable[collections.Counter[int]]:
        oldest = int(self._clock()) - window_s
        return (counts for second, counts in self._slots if second >= oldest)

    def _expire(self, now: int) -> None:
        while self._slots and self._slots[0][0] <= now - HORIZON_S:
            self._slots.popleft()


def _quantile(ordered: list[tuple[int, int]], total: int, q: float) -> float:
    rank = max(1, math.ceil(q * total))
    seen = 0
    for bucket, count in ordered:
        seen += count
        if seen >= rank:
            return round(BOUNDS[min(bucket, len(BOUNDS) - 1)], 6)
    return BOUNDS[-1]


class RateWindow:
    """Sums per second of several quantities (requests, tokens) for rates over a window."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._slots: collections.deque[list[float]] = collections.deque()
        self._started = clock()

    def add(self, *amounts: float) -> None:
        """Add `amounts` (always the same number of them) to the current second."""
        second = int(self._clock())
        if not self._slots or self._slots[-1][0] != second:
            self._slots.append([second, *(0.0 for _ in amounts)])
            while self._slots and self._slots[0][0] <= second - HORIZON_S:
                self._slots.popleft()
        slot = self._slots[-1]
        for i, amount in enumerate(amounts, start=1):
            slot[i] += amount

    def rates(self, window_s: int, width: int) -> tuple[float, ...]:
        """Per-second rates of the `width` quantities over the last `window_s` seconds (or since
        the window was made, when that is shorter)."""
        now = self._clock()
        oldest = int(now) - window_s
        totals = [0.0] * width
        for slot in self._slots:
            if slot[0] >= oldest:
                for i in range(width):
                    totals[i] += slot[i + 1]
        span = max(1.0, min(float(window_s), now - self._started))
        return tuple(total / span for total in totals)
