"""Inter-token latency as a streaming client sees it: the gaps between the body chunks llmd
relays to it (each carries one output step: a token, or a few when the engine or the socket
coalesced them). A stream that stalls after its first token shows here, where TTFT cannot see
it.

`TokenGaps` records one stream's gaps (8 bytes each); the Prometheus histogram of every gap by
class and model (`ProxyMetrics.gaps`, llmd/telemetry/metrics.py) takes them once per request,
sorted (a bisect per bucket), so the relay's per-chunk cost is one subtraction and an append.
"""

from __future__ import annotations

import array

# Seconds: from a GPU's decode step (a few ms) to a stall a client gives up on.
GAP_BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0,
    2.5, 5.0, 10.0, 30.0, 60.0,
)  # fmt: skip
# Gaps kept per request: 64 KiB of them. Past that the max still counts, the p50 reads the
# first ones.
MAX_GAPS = 8192


class TokenGaps:
    """The gaps (s) between one stream's chunks: `chunk(now)` at each chunk sent (monotonic
    s); `p50_s` and `max_s` once it ends (None before a second chunk)."""

    __slots__ = ("_gaps", "_last", "max_s")

    def __init__(self) -> None:
        self._gaps = array.array("d")
        self._last: float | None = None
        self.max_s: float | None = None

    def chunk(self, now: float) -> None:
        last, self._last = self._last, now
        if last is None:
            return
        gap = now - last
        if len(self._gaps) < MAX_GAPS:
            self._gaps.append(gap)
        if self.max_s is None or gap > self.max_s:
            self.max_s = gap

    def sorted(self) -> list[float]:
        """The gaps kept, ascending."""
        return sorted(self._gaps)

    @property
    def p50_s(self) -> float | None:
        """The median gap (the lower middle one of an even count)."""
        gaps = self.sorted()
        return gaps[(len(gaps) - 1) // 2] if gaps else None
