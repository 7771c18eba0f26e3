"""The comparison rule, property-tested: identical figures never roll back; one figure past
its threshold with enough samples always rolls back; too few samples never promote."""

from __future__ import annotations

import dataclasses

from hypothesis import given
from hypothesis import strategies as st

from llmd.config.release import ReleaseConfig
from llmd.releases.compare import Decision, compare, ks_distance
from llmd.releases.figures import Figures, LatencyBucket

RULES = ReleaseConfig()
BUCKETS = ("<=512", "<=2048", ">8192")


@st.composite
def figures(draw: st.DrawFn, least: int = 0) -> Figures:
    """Consistent figures: errors within answered, empty answers within successes, the
    output-length histogram summing to the successes."""
    answered = draw(st.integers(least, 400))
    errors = draw(st.integers(0, answered // 10))
    successes = answered - errors
    lengths: dict[int, int] = {}
    left = successes
    for bucket in (0, 8, 16, 64, 256):
        count = left if bucket == 256 else draw(st.integers(0, left))
        if count:
            lengths[bucket] = lengths.get(bucket, 0) + count
        left -= count
    ttft = {
        label: LatencyBucket(draw(st.integers(0, 200)), draw(st.floats(0.01, 5.0)))
        for label in draw(st.sets(st.sampled_from(BUCKETS)))
    }
    return Figures(
        answered=answered,
        errors=errors,
        rejected=draw(st.integers(0, 100)),
        empty=draw(st.integers(0, successes // 10)),
        cut_off=draw(st.integers(0, successes // 10)),
        ttft=ttft,
        output_tokens=lengths,
    )


def healthy(n: int = 200) -> Figures:
    """Figures with enough samples for every check, no errors, TTFT in one bucket."""
    return Figures(
        answered=n,
        errors=0,
        rejected=0,
        empty=0,
        cut_off=0,
        ttft={"<=512": LatencyBucket(n, 0.2)},
        output_tokens={16: n // 2, 64: n - n // 2},
    )


@given(figures())
def test_identical_figures_never_roll_back(seen: Figures) -> None:
    """Property: a release compared with itself is never rolled back."""
    assert compare(seen, seen, RULES).decision is not Decision.ROLL_BACK


@given(figures(least=RULES.min_requests), st.data())
def test_one_figure_past_its_threshold_with_enough_samples_always_rolls_back(
    base: Figures, data: st.DataObject
) -> None:
    """Property: from any figures with enough samples, break one figure past its threshold
    (the rest unchanged): the verdict rolls back and its reason names that figure."""
    figure = data.draw(
        st.sampled_from(["error", "rejection", "ttft", "output", "empty", "cut_off"])
    )
    old = dataclasses.replace(base, ttft={"<=512": LatencyBucket(100, 0.3)})
    if figure == "error":
        new = dataclasses.replace(old, errors=old.answered)
        name = "error_rate"
    elif figure == "rejection":
        new = dataclasses.replace(old, rejected=old.rejected + old.answered + 1000)
        name = "rejection_rate"
    elif figure == "ttft":
        slow = 0.3 * RULES.max_ttft_p95_ratio + RULES.ttft_slack_s + 0.001
        new = dataclasses.replace(old, ttft={"<=512": LatencyBucket(100, slow)})
        name = "ttft_p95[<=512]"
    elif figure == "output":
        new = dataclasses.replace(old, output_tokens={10**6: old.successes})
        old = dataclasses.replace(old, output_tokens={1: old.successes})
        name = "output_length"
    elif figure == "empty":
        new = dataclasses.replace(old, empty=old.successes)
        old = dataclasses.replace(old, empty=0)
        name = "empty_rate"
    else:
        new = dataclasses.replace(old, cut_off=old.successes)
        old = dataclasses.replace(old, cut_off=0)
        name = "cut_off_rate"
    if figure in ("output", "empty", "cut_off") and old.successes < RULES.min_requests:
        return  # errors left too few successes for this figure to be judged
    verdict = compare(old, new, RULES)
    assert verdict.decision is Decision.ROLL_BACK
    assert name in verdict.reason


@given(figures(), figures(), st.integers(0, RULES.min_requests - 1))
def test_below_the_minimum_samples_never_promotes(old: Figures, new: Figures, few: int) -> None:
    """Property: either side with fewer than min_requests answered is never promoted."""
    short = dataclasses.replace(new, answered=few, errors=min(new.errors, few))
    assert compare(old, short, RULES).decision is not Decision.PROMOTE
    assert compare(short, old, RULES).decision is not Decision.PROMOTE


@given(figures(), figures())
def test_a_promotion_judged_every_figure(old: Figures, new: Figures) -> None:
    """Property: promote only with every rate and the lengths judged ok and TTFT in a bucket."""
    verdict = compare(old, new, RULES)
    if verdict.decision is Decision.PROMOTE:
        by_name = {c.figure: c.status for c in verdict.checks}
        for name in (
            "error_rate",
            "rejection_rate",
            "output_length",
            "empty_rate",
            "cut_off_rate",
        ):
            assert by_name[name] == "ok"
        assert any(s == "ok" for n, s in by_name.items() if n.startswith("ttft_p95"))


def test_the_reason_gives_the_figure_its_values_and_the_threshold() -> None:
    """A 4% error rate against 0% with +1% allowed."""
    old, new = healthy(), dataclasses.replace(healthy(), errors=8)
    verdict = compare(old, new, RULES)
    assert verdict.decision is Decision.ROLL_BACK
    assert verdict.reason == (
        "error_rate 0.040 on the new release vs 0.000 on the old (8/200 vs 0/200): "
        "+0.040 > +0.01 allowed"
    )


def test_slower_within_the_slack_holds() -> None:
    """Twice as slow but only 40 ms more: under the slack, not a regression."""
    old = dataclasses.replace(healthy(), ttft={"<=512": LatencyBucket(200, 0.04)})
    new = dataclasses.replace(healthy(), ttft={"<=512": LatencyBucket(200, 0.08)})
    assert compare(old, new, RULES).decision is Decision.PROMOTE


def test_too_few_samples_holds_and_says_how_many() -> None:
    """12 answered on the new release: hold, naming the count and the minimum."""
    verdict = compare(healthy(), healthy(12), RULES)
    assert verdict.decision is Decision.HOLD
    assert "old has 200, new 12 answered requests; 50 needed on each" in verdict.reason


def test_ttft_is_judged_only_in_buckets_both_releases_fill() -> None:
    """A bucket with 5 requests on one side is insufficient; another judged bucket suffices."""
    old = dataclasses.replace(
        healthy(), ttft={"<=512": LatencyBucket(200, 0.2), ">8192": LatencyBucket(5, 9.0)}
    )
    new = dataclasses.replace(
        healthy(), ttft={"<=512": LatencyBucket(200, 0.2), ">8192": LatencyBucket(50, 1.0)}
    )
    verdict = compare(old, new, RULES)
    statuses = {c.figure: c.status for c in verdict.checks}
    assert statuses["ttft_p95[>8192]"] == "insufficient" and verdict.decision is Decision.PROMOTE
    no_common = dataclasses.replace(new, ttft={"<=2048": LatencyBucket(200, 0.2)})
    held = compare(old, no_common, RULES)
    assert held.decision is Decision.HOLD and "no input-length bucket" in held.reason


def test_ks_distance_of_histograms() -> None:
    """0 for the same shape at any scale, 1 for disjoint, the largest CDF gap between."""
    assert ks_distance({1: 5, 2: 5}, {1: 50, 2: 50}) == 0
    assert ks_distance({1: 10}, {100: 10}) == 1
    assert ks_distance({1: 5, 2: 5}, {1: 2, 2: 8}) == 0.3


def test_cut_off_answers_have_their_own_looser_threshold() -> None:
    """4% more cut-off answers is within the default +5%; 6% more breaks `cut_off_rate`
    (not `empty_rate`); a 4% rise in empty answers breaks `empty_rate` (+2%)."""
    old = healthy()
    assert compare(old, dataclasses.replace(old, cut_off=8), RULES).decision is Decision.PROMOTE
    verdict = compare(old, dataclasses.replace(old, cut_off=12), RULES)
    assert verdict.decision is Decision.ROLL_BACK and verdict.reason.startswith("cut_off_rate")
    verdict = compare(old, dataclasses.replace(old, empty=8), RULES)
    assert verdict.decision is Decision.ROLL_BACK and verdict.reason.startswith("empty_rate")


def test_rejections_count_against_the_requests_a_release_was_given() -> None:
    """5 of 205 requests refused on the new release, none on the old: +2.4% > +2% breaks."""
    old = healthy()
    verdict = compare(old, dataclasses.replace(old, rejected=5), RULES)
    assert verdict.decision is Decision.ROLL_BACK
    assert "rejection_rate 0.024 on the new release vs 0.000 on the old (5/205" in verdict.reason
