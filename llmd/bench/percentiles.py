"""The bench's percentiles: p50/p95/p99 of a list of seconds, given in milliseconds."""

from __future__ import annotations

from collections.abc import Sequence

from llmd.telemetry.windows import percentile


def ms_percentiles(values: Sequence[float]) -> dict[str, float | None]:
    """p50, p95 and p99 of `values` (seconds) in ms, two decimals; None for no values
    (linear interpolation between closest ranks: `percentile`)."""
    return {
        name: None if (v := percentile(values, q)) is None else round(v * 1000, 2)
        for name, q in (("p50", 50), ("p95", 95), ("p99", 99))
    }
