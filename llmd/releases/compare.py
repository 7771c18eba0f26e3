"""The canary comparison rule (pure): two releases' figures on the same live traffic, judged
against the `[release]` thresholds, give a verdict (hold, promote, roll back) and its reason.

- Each figure is judged only when both sides have its minimum samples; a judged figure past its
  threshold rolls back; promotion needs every figure judged (TTFT in at least one input-length
  bucket) and none broken; anything else holds.
- Rates compare by absolute increase (new minus old), so a baseline of 0 errors does not make
  one canary error an infinite ratio; TTFT p95 compares by ratio with an absolute slack, so
  noise on millisecond TTFTs does not break it.

Guarantees (tests/releases/test_compare.py, property-tested): identical figures never roll back;
any one figure past its threshold with enough samples always rolls back; a side below the
minimum samples never promotes.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping

from llmd.config.release import ReleaseConfig
from llmd.releases.figures import Figures


class Decision(enum.StrEnum):
    HOLD = "hold"
    PROMOTE = "promote"
    ROLL_BACK = "roll_back"


@dataclasses.dataclass(frozen=True)
class Check:
    """One figure's judgement: `status` is `ok`, `broken` or `insufficient`; `old`/`new` the
    values (None when not computable; `output_length` gives the KS distance as `new`),
    `threshold` the allowed bound in words, `detail` the sentence for the operator."""

    figure: str
    status: str
    old: float | None
    new: float | None
    threshold: str
    detail: str


@dataclasses.dataclass(frozen=True)
class Verdict:
    """The decision, its reason (which figure, its values and the threshold), every check."""

    decision: Decision
    reason: str
    checks: tuple[Check, ...]

    def to_dict(self) -> dict[str, object]:
        return {
            "decision": str(self.decision),
            "reason": self.reason,
            "checks": [dataclasses.asdict(c) for c in self.checks],
        }


def compare(old: Figures, new: Figures, config: ReleaseConfig) -> Verdict:
    """Judge `new` against `old` (both over the same step's traffic) with `config`'s
    thresholds and minimum samples."""
    checks = [
        _rate(
            "error_rate",
            old.errors,
            old.answered,
            new.errors,
            new.answered,
            config.max_error_rate_increase,
            config.min_requests,
            "answered requests",
        ),
        _rate(
            "rejection_rate",
            old.rejected,
            old.answered + old.rejected,
            new.rejected,
            new.answered + new.rejected,
            config.max_rejection_rate_increase,
            config.min_requests,
            "requests",
        ),
        *_ttft(old, new, config),
        _lengths(old, new, config),
        _rate(
            "empty_rate",
            old.empty,
            old.successes,
            new.empty,
            new.successes,
            config.max_empty_rate_increase,
            config.min_requests,
            "successful answers",
        ),
        _rate(
            "cut_off_rate",
            old.cut_off,
            old.successes,
            new.cut_off,
            new.successes,
            config.max_cut_off_rate_increase,
            config.min_requests,
            "successful answers",
        ),
    ]
    broken = [c for c in checks if c.status == "broken"]
    if broken:
        return Verdict(Decision.ROLL_BACK, "; ".join(c.detail for c in broken), tuple(checks))
    ttft_judged = any(c.status == "ok" for c in checks if c.figure.startswith("ttft_p95"))
    missing = [
        c for c in checks if c.status == "insufficient" and not c.figure.startswith("ttft_p95")
    ]
    if not ttft_judged:
        missing.append(
            Check(
                "ttft_p95",
                "insufficient",
                None,
                None,
                "",
                f"ttft_p95: no input-length bucket has {config.min_bucket_requests} "
                "requests on both releases",
            )
        )
    if missing:
        reason = "not enough samples yet: " + "; ".join(c.detail for c in missing)
        return Verdict(Decision.HOLD, reason, tuple(checks))
    judged = sum(c.status == "ok" for c in checks)
    return Verdict(
        Decision.PROMOTE, f"all {judged} judged figures within their thresholds", tuple(checks)
    )


def _rate(
    figure: str,
    old_count: int,
    old_total: int,
    new_count: int,
    new_total: int,
    allowed: float,
    minimum: int,
    unit: str,
) -> Check:
    threshold = f"+{allowed:g}"
    if old_total < minimum or new_total < minimum:
        return Check(
            figure,
            "insufficient",
            None,
            None,
            threshold,
            f"{figure}: old has {old_total}, new {new_total} {unit}; {minimum} needed on each",
        )
    old_rate, new_rate = old_count / old_total, new_count / new_total
    broken = new_rate - old_rate > allowed
    return Check(
        figure,
        "broken" if broken else "ok",
        old_rate,
        new_rate,
        threshold,
        f"{figure} {new_rate:.3f} on the new release vs {old_rate:.3f} on the old "
        f"({new_count}/{new_total} vs {old_count}/{old_total}): "
        f"{new_rate - old_rate:+.3f} {'>' if broken else '<='} {threshold} allowed",
    )


def _ttft(old: Figures, new: Figures, config: ReleaseConfig) -> list[Check]:
    checks = []
    ratio, slack = config.max_ttft_p95_ratio, config.ttft_slack_s
    threshold = f"x{ratio:g} and +{slack:g} s"
    for label in sorted(set(old.ttft) | set(new.ttft), key=_bucket_order):
        figure = f"ttft_p95[{label}]"
        a, b = old.ttft.get(label), new.ttft.get(label)
        a_count, b_count = (a.count if a else 0), (b.count if b else 0)
        if (
            a is None
            or b is None
            or a.p95_s is None
            or b.p95_s is None
            or min(a_count, b_count) < config.min_bucket_requests
        ):
            checks.append(
                Check(
                    figure,
                    "insufficient",
                    None,
                    None,
                    threshold,
                    f"{figure}: old has {a_count}, new {b_count} requests; "
                    f"{config.min_bucket_requests} needed on each",
                )
            )
            continue
        broken = b.p95_s > a.p95_s * ratio and b.p95_s - a.p95_s > slack
        checks.append(
            Check(
                figure,
                "broken" if broken else "ok",
                a.p95_s,
                b.p95_s,
                threshold,
                f"{figure} {b.p95_s * 1000:.0f} ms on the new release vs "
                f"{a.p95_s * 1000:.0f} ms on the old: "
                f"{'over' if broken else 'within'} x{ratio:g} (+{slack * 1000:.0f} ms slack)",
            )
        )
    return checks


def _lengths(old: Figures, new: Figures, config: ReleaseConfig) -> Check:
    allowed = config.max_output_length_shift
    threshold = f"KS {allowed:g}"
    old_n, new_n = sum(old.output_tokens.values()), sum(new.output_tokens.values())
    if old_n < config.min_requests or new_n < config.min_requests:
        return Check(
            "output_length",
            "insufficient",
            None,
            None,
            threshold,
            f"output_length: old has {old_n}, new {new_n} successful answers; "
            f"{config.min_requests} needed on each",
        )
    distance = ks_distance(old.output_tokens, new.output_tokens)
    broken = distance > allowed
    return Check(
        "output_length",
        "broken" if broken else "ok",
        None,  # one figure for both sides: the distance between them
        distance,
        threshold,
        f"output_length distributions differ by KS distance {distance:.3f} "
        f"({'>' if broken else '<='} {allowed:g} allowed; median {median_bucket(old.output_tokens)}"
        f" vs {median_bucket(new.output_tokens)} tokens)",
    )


def ks_distance(a: Mapping[int, int], b: Mapping[int, int]) -> float:
    """The two-sample Kolmogorov-Smirnov statistic of two histograms over the same bucket
    bounds: the largest gap between their cumulative shares (0 same, 1 disjoint)."""
    a_total, b_total = sum(a.values()), sum(b.values())
    if not a_total or not b_total:
        return 0.0
    a_seen = b_seen = 0
    distance = 0.0
    for bucket in sorted(set(a) | set(b)):
        a_seen += a.get(bucket, 0)
        b_seen += b.get(bucket, 0)
        distance = max(distance, abs(a_seen / a_total - b_seen / b_total))
    return distance


def median_bucket(histogram: Mapping[int, int]) -> int | None:
    """The bucket holding the median answer (its upper bound, tokens), or None when empty."""
    total, seen = sum(histogram.values()), 0
    for bucket in sorted(histogram):
        seen += histogram[bucket]
        if seen * 2 >= total:
            return bucket
    return None


def _bucket_order(label: str) -> tuple[int, int]:
    return (1 if label.startswith(">") else 0, int(label.lstrip("<=>")))
