"""The `[release]` table: canary steps and dwell, the comparison thresholds and minimum samples,
and the smoke gate's golden prompts and bounds. Built and checked by llmd/config/tables.py's strict
table builder (`release_config`) until the table joins `Config`.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

from llmd.binding import bind_table
from llmd.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class ReleaseConfig:
    """The `[release]` table: canary steps, the canary comparison's thresholds, the smoke gate.
    Each key with its default and its note; the reasoning is in README "Releases and rollback".
    """

    # Canary.
    canary_steps: str = "5,25,50,100"  # percent of traffic per step, rising, ending at 100
    step_s: float = 300.0  # least dwell per step before it may pass
    # A step that still lacks samples this long after it began rolls back: a canary is never
    # promoted unjudged.
    max_step_s: float = 1800.0

    # Comparison: new release against old on the same traffic over the current step (an
    # increase is new minus old, in shares 0..1).
    # Answered requests each side needs before a rate or the output lengths are judged.
    min_requests: int = 50
    min_bucket_requests: int = 20  # the same per input-length bucket, for TTFT p95
    # Input-token upper bounds of the TTFT buckets; one more bucket takes the rest.
    ttft_buckets: str = "512,2048,8192"
    max_error_rate_increase: float = 0.01
    # Counts requests refused while they waited for a release.
    max_rejection_rate_increase: float = 0.02
    # p95 breaks when above old x ratio and more than the slack above old.
    max_ttft_p95_ratio: float = 1.5
    ttft_slack_s: float = 0.05
    # Kolmogorov-Smirnov distance of the output-token distributions.
    max_output_length_shift: float = 0.2
    max_empty_rate_increase: float = 0.02  # answers without text
    # Answers ended by max_tokens or the context (finish_reason `length`); looser, as a release
    # may answer longer within the same max_tokens.
    max_cut_off_rate_increase: float = 0.05

    # Smoke gate.
    golden_prompts: str = ""  # JSON-lines file of chat requests; "" = built-in
    golden_max_tokens: int = 16
    golden_latency_s: float = 30.0  # bound per golden request
    # An answer of at least 8 tokens whose most frequent token makes up more than this share is
    # degenerate.
    degenerate_share: float = 0.9

    def steps(self) -> tuple[int, ...]:
        """`canary_steps` as numbers (checked when the table is built)."""
        return parse_steps(self.canary_steps, "release.canary_steps")

    def buckets(self) -> tuple[int, ...]:
        """`ttft_buckets` as numbers (checked when the table is built)."""
        return _rising_ints(self.ttft_buckets, "release.ttft_buckets", upper=None)


def release_config(raw: Any) -> ReleaseConfig:
    """Build and check a `[release]` table. Raises ConfigError naming the key."""
    config: ReleaseConfig = bind_table(ReleaseConfig, raw, "release.")
    config.steps()
    config.buckets()
    if config.max_ttft_p95_ratio < 1:
        raise ConfigError(
            f"release.max_ttft_p95_ratio = {config.max_ttft_p95_ratio!r}: expected >= 1 "
            "(below 1 a canary as fast as the old release would break it)"
        )
    for key in ("max_output_length_shift", "degenerate_share"):
        if not 0 < getattr(config, key) <= 1:
            raise ConfigError(f"release.{key} = {getattr(config, key)!r}: expected (0, 1]")
    if config.max_step_s < config.step_s:
        raise ConfigError(
            f"release.max_step_s = {config.max_step_s!r}: expected >= step_s ({config.step_s})"
        )
    if config.min_requests < 1 or config.min_bucket_requests < 1:
        raise ConfigError("release.min_requests and min_bucket_requests: expected >= 1")
    return config


def parse_steps(text: str, key: str = "--canary") -> tuple[int, ...]:
    """Canary steps such as `5,25,50,100`: percents rising in 1..100, ending at 100, with at
    least one step below 100 (the last step is judged against the old release's figures of
    the step before). Raises ConfigError naming `key`."""
    steps = _rising_ints(text, key, upper=100)
    if steps[-1] != 100 or len(steps) < 2:
        raise ConfigError(
            f"{key} = {text!r}: expected rising percents ending at 100 with one below it, "
            "e.g. 5,25,50,100"
        )
    return steps


def _rising_ints(text: str, key: str, upper: int | None) -> tuple[int, ...]:
    try:
        values = tuple(int(part) for part in text.split(","))
    except ValueError:
        values = ()
    if (
        not values
        or values[0] < 1
        or any(b <= a for a, b in itertools.pairwise(values))
        or (upper is not None and values[-1] > upper)
    ):
        raise ConfigError(
            f"{key} = {text!r}: expected whole numbers >= 1, rising, comma-separated"
            + (f", at most {upper}" if upper is not None else "")
        )
    return values
