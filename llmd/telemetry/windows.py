"""Sliding windows over the last minutes: latency percentiles and throughput, bounded in memory.

Each second has a slot; a latency slot counts values in log-spaced buckets (about 4% wide), and
each window keeps running totals per bucket, so recording costs a bisect and a few increments
whatever the request rate, and a percentile walks one array of about 470 buckets. Percentiles are
bucket upper bounds: within 4% above the true value (HdrHistogram's idea at a coarser precision).
"""

from __future__ import annotations

import bisect
import collections
import dataclasses
import math
import time
from collections.abc import Callable, Sequence

# Bucket upper bounds, seconds: 100 µs to about 3 hours, 4% apart.
_GROWTH = 1.04
BOUNDS: tuple[float, ...] = tuple(1e-4 * _GROWTH**i for i in range(int(math.log(1e8, _GROWTH)) + 2))
HORIZON_S = 300
# The windows percentiles are asked over: one and five minutes.
WINDOWS = (60, HORIZON_S)


@dataclasses.dataclass(frozen=True)
class Percentiles:
    """p50/p95/p99 in seconds over a window (None when it saw no value) and how many values."""

    p50: float | None
    p95: float | None
    p99: float | None
    count: int


def percentile(values: Sequence[float], q: float) -> float | None:
    """The `q`-th percentile (0..100) with linear interpolation between closest ranks (numpy's
    default method); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


class LatencyWindow:
    """Values in seconds over the last minute and the last five (`WINDOWS`), or over the
    `windows` given (seconds each).

    Each window keeps running bucket totals: a value is added to each, and a second's slot is
    subtracted when it leaves a window, so a percentile walks one array of buckets however many
    requests the window saw.
    """

    def __init__(
        self, clock: Callable[[], float] = time.monotonic, windows: tuple[int, ...] = WINDOWS
    ) -> None:
        self._clock = clock
        self._totals = {window: [0] * (len(BOUNDS) + 1) for window in windows}
        self._counts = dict.fromkeys(windows, 0)
        self._live: dict[int, collections.deque[tuple[int, collections.Counter[int]]]] = {
            window: collections.deque() for window in windows
        }
        self._current: tuple[int, collections.Counter[int]] | None = None

    def add(self, seconds: float) -> None:
        """Record one value (negative values count as 0)."""
        second = int(self._clock())
        if self._current is None or self._current[0] != second:
            self._current = (second, collections.Counter())
            for live in self._live.values():
                live.append(self._current)
            self._expire(second)
        bucket = bisect.bisect_left(BOUNDS, max(seconds, 0.0))
        self._current[1][bucket] += 1
        for window, totals in self._totals.items():
            totals[bucket] += 1
            self._counts[window] += 1

    def percentiles(self, window_s: int) -> Percentiles:
        """p50/p95/p99 of the values recorded in the last `window_s` seconds (one of
        its windows). Raises KeyError for another window."""
        self._expire(int(self._clock()))
        totals = self._totals[window_s]
        count = self._counts[window_s]
        if not count:
            return Percentiles(None, None, None, 0)
        ranks = [max(1, math.ceil(q * count)) for q in (0.50, 0.95, 0.99)]
        found: list[float] = []
        seen = 0
        for bucket, n in enumerate(totals):
            seen += n
            while len(found) < len(ranks) and seen >= ranks[len(found)]:
                found.append(round(BOUNDS[min(bucket, len(BOUNDS) - 1)], 6))
            if len(found) == len(ranks):
                break
        return Percentiles(found[0], found[1], found[2], count=count)

    def _expire(self, now: int) -> None:
        for window, live in self._live.items():
            totals = self._totals[window]
            while live and live[0][0] < now - window:
                _, counts = live.popleft()
                for bucket, n in counts.items():
                    totals[bucket] -= n
                    self._counts[window] -= n


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
