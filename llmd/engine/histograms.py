"""A Prometheus histogram as the engine exports it, and the arithmetic llmd does on two reads
of it: the difference over a window, its mean and a quantile (Prometheus's
`histogram_quantile`: linear within the bucket the rank falls in)."""

from __future__ import annotations

import dataclasses
import math


@dataclasses.dataclass(frozen=True)
class EngineHistogram:
    """Cumulative `buckets` as (upper bound, count) in ascending order, the last one `+Inf`;
    `sum` of the observed values (seconds for the engine's latency series) and their `count`.
    Counts are floats, as the text format gives them."""

    buckets: tuple[tuple[float, float], ...]
    sum: float
    count: float

    def since(self, earlier: EngineHistogram) -> EngineHistogram | None:
        """What was observed between `earlier` and this read; None when the two are not of one
        series (other bucket bounds) or the counts went back (the engine restarted)."""
        if [le for le, _ in self.buckets] != [le for le, _ in earlier.buckets]:
            return None
        if self.count < earlier.count:
            return None
        return EngineHistogram(
            tuple(
                (le, now - then)
                for (le, now), (_, then) in zip(self.buckets, earlier.buckets, strict=True)
            ),
            self.sum - earlier.sum,
            self.count - earlier.count,
        )

    @property
    def mean(self) -> float | None:
        """The mean observed value; None when nothing was observed."""
        return self.sum / self.count if self.count > 0 else None

    def quantile(self, q: float) -> float | None:
        """The `q` quantile (0..1) as Prometheus's `histogram_quantile` estimates it: linear
        interpolation inside the bucket the rank falls in (from 0 for the first bucket); a
        rank in the `+Inf` bucket gives the largest finite bound. None when nothing was
        observed."""
        total = self.buckets[-1][1] if self.buckets else 0.0
        if total <= 0:
            return None
        rank = q * total
        lower, below = 0.0, 0.0
        for le, count in self.buckets:
            if count >= rank:
                if math.isinf(le):
                    return lower
                if count == below:
                    return le
                return lower + (le - lower) * (rank - below) / (count - below)
            lower, below = le, count
        return lower


def histogram_of(
    buckets: dict[float, float], total: float | None, count: float | None
) -> EngineHistogram | None:
    """An EngineHistogram from bucket counts by upper bound (summed over label sets), or None
    when the text had no such histogram."""
    if not buckets or total is None or count is None:
        return None
    return EngineHistogram(tuple(sorted(buckets.items())), total, count)
