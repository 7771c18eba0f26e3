"""A release's live figures over one canary step, and the tally that builds them from finished
requests (pure: the daemon feeds it, the comparison rule reads it).

TTFT is kept per input-length bucket (`ttft_buckets` upper bounds in prompt tokens, plus one
bucket above the last), because a release is slower on long prompts than short ones and the two
releases' traffic mixes differ. Output lengths are kept as a histogram whose buckets are exact
up to 32 tokens and about 5% wide above, so memory is bounded whatever the step's traffic.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from collections import Counter
from collections.abc import Mapping, Sequence

from llmd.telemetry.windows import percentile

# Output-length bucket upper bounds (tokens): 1..32 exact, then 5% apart up to ~10^7.
OUTPUT_BOUNDS: tuple[int, ...] = tuple(
    sorted({*range(1, 33), *(math.ceil(32 * 1.05**k) for k in range(1, 250))})
)


@dataclasses.dataclass(frozen=True)
class LatencyBucket:
    """TTFT of one input-length bucket: how many requests and their p95 (seconds)."""

    count: int
    p95_s: float | None


@dataclasses.dataclass(frozen=True)
class Figures:
    """One release's figures since the current step began."""

    answered: int = 0  # requests the engine answered (successes and engine errors)
    errors: int = 0  # of those, the ones that failed (engine error before or after the first byte)
    # Requests assigned to this release that llmd refused (429, 503) while they waited for it.
    rejected: int = 0
    empty: int = 0  # of the successes, answers with no output text
    # Of the successes, answers ended by `max_tokens` or the context (finish_reason `length`).
    cut_off: int = 0
    # Input-length bucket label (`ttft_bucket`) -> LatencyBucket.
    ttft: Mapping[str, LatencyBucket] = dataclasses.field(default_factory=dict)
    # Output-length bucket upper bound (OUTPUT_BOUNDS) -> successes in it.
    output_tokens: Mapping[int, int] = dataclasses.field(default_factory=dict)

    @property
    def successes(self) -> int:
        return self.answered - self.errors

    def to_dict(self) -> dict[str, object]:
        """The JSON form written in the history."""
        return {
            "answered": self.answered,
            "errors": self.errors,
            "rejected": self.rejected,
            "empty": self.empty,
            "cut_off": self.cut_off,
            "ttft": {k: dataclasses.asdict(v) for k, v in self.ttft.items()},
            "output_tokens": {str(k): v for k, v in sorted(self.output_tokens.items())},
        }


def ttft_bucket(prompt_tokens: int, bounds: Sequence[int]) -> str:
    """The label of the input-length bucket of a prompt: `<=512`, ..., `>8192`."""
    index = bisect.bisect_left(bounds, prompt_tokens)
    return f"<={bounds[index]}" if index < len(bounds) else f">{bounds[-1]}"


def output_bucket(tokens: int) -> int:
    """The output-length bucket (its upper bound) of an answer of `tokens` tokens."""
    index = bisect.bisect_left(OUTPUT_BOUNDS, max(tokens, 0))
    return OUTPUT_BOUNDS[min(index, len(OUTPUT_BOUNDS) - 1)] if tokens > 0 else 0


class StepTally:
    """Counts one release's finished requests over a step; `figures()` summarises them.

    TTFT values are kept per bucket until the step ends (8 bytes a request) so the p95 is
    exact; output lengths only as bucket counts.
    """

    def __init__(self, bounds: Sequence[int]) -> None:
        self._bounds = tuple(bounds)
        self._ttft: dict[str, list[float]] = {}
        self._lengths: Counter[int] = Counter()
        self.answered = self.errors = self.rejected = self.empty = self.cut_off = 0

    def answer(
        self,
        prompt_tokens: int,
        ttft_s: float | None,
        output_tokens: int,
        finish_reason: str | None,
        *,
        error: bool = False,
        empty: bool = False,
    ) -> None:
        """One request the engine answered: its TTFT (None when no token came), its output
        tokens, its finish reason (`length`: cut off); `error` when it failed, `empty` when it
        had no text (so is an answer of 0 output tokens)."""
        self.answered += 1
        if error:
            self.errors += 1
            return
        if ttft_s is not None:
            self._ttft.setdefault(ttft_bucket(prompt_tokens, self._bounds), []).append(ttft_s)
        self._lengths[output_bucket(output_tokens)] += 1
        if empty or output_tokens == 0:
            self.empty += 1
        if finish_reason == "length":
            self.cut_off += 1

    def reject(self) -> None:
        """One request refused by llmd before the engine (429 or 503)."""
        self.rejected += 1

    def figures(self) -> Figures:
        return Figures(
            answered=self.answered,
            errors=self.errors,
            rejected=self.rejected,
            empty=self.empty,
            cut_off=self.cut_off,
            ttft={
                label: LatencyBucket(len(values), percentile(values, 95))
                for label, values in sorted(self._ttft.items())
            },
            output_tokens=dict(self._lengths),
        )
