"""The step tally: finished requests in, the figures the comparison reads out."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from llmd.releases.figures import OUTPUT_BOUNDS, StepTally, output_bucket, ttft_bucket


def test_the_tally_counts_answers_errors_rejections_empty_and_cut_off() -> None:
    """Errors count as answered but not as successes; answers without text (or tokens) count
    as empty, those with finish_reason `length` as cut off, each apart."""
    tally = StepTally((512, 2048))
    tally.answer(100, 0.10, 20, "stop")
    tally.answer(100, 0.30, 16, "length")
    tally.answer(3000, 0.90, 0, "stop")
    tally.answer(100, 0.20, 1, "stop", empty=True)
    tally.answer(100, None, 0, None, error=True)
    tally.reject()
    figures = tally.figures()
    assert (figures.answered, figures.errors, figures.rejected) == (5, 1, 1)
    assert figures.successes == 4 and (figures.empty, figures.cut_off) == (2, 1)
    assert figures.to_dict()["cut_off"] == 1
    assert figures.ttft["<=512"].count == 3 and figures.ttft[">2048"].count == 1
    assert abs((figures.ttft["<=512"].p95_s or 0) - 0.29) < 1e-9
    assert sum(figures.output_tokens.values()) == 4


def test_input_length_buckets_are_labelled_by_their_upper_bound() -> None:
    """At the bound is inside; past the last is `>last`."""
    bounds = (512, 2048, 8192)
    assert ttft_bucket(1, bounds) == "<=512" and ttft_bucket(512, bounds) == "<=512"
    assert ttft_bucket(513, bounds) == "<=2048" and ttft_bucket(9000, bounds) == ">8192"


@given(st.integers(0, 10**7), st.integers(0, 10**7))
def test_output_buckets_keep_order_and_stay_within_five_percent(a: int, b: int) -> None:
    """Property: a longer answer never lands in a lower bucket; a bucket's bound is at most
    5% (plus one token) above the length, exact up to 32 tokens."""
    if a <= b:
        assert output_bucket(a) <= output_bucket(b)
    bucket = output_bucket(a)
    if a == 0:
        assert bucket == 0
    elif a <= OUTPUT_BOUNDS[-1]:
        assert a <= bucket <= a * 1.05 + 1
        if a <= 32:
            assert bucket == a
