"""The token bucket's arithmetic, by properties (the guarantees in its docstring): it never
admits past its budget over any window, refunds and settles exactly, and refills at its rate."""

from __future__ import annotations

import copy
import math

from hypothesis import example, given, settings
from hypothesis import strategies as st

from llmd.admission.buckets import EPSILON, TokenBucket

sizes = st.integers(1, 100_000)
steps = st.lists(st.tuples(st.floats(0.0, 120.0), st.integers(0, 40_000)), max_size=80)


ops = st.lists(
    st.tuples(
        st.sampled_from(["take", "settle", "refund"]),
        st.floats(0.0, 120.0),
        st.integers(0, 40_000),
        st.floats(0.0, 1.0),
    ),
    max_size=80,
)


@settings(max_examples=400, deadline=None)
@given(sizes, st.floats(0.01, 5000.0), ops)
@example(  # a refund must not add to what refilled meanwhile: a reservation keeps its room
    100,
    1.0,
    [
        ("take", 0.0, 100, 0.0),
        ("take", 100.0, 100, 0.0),
        ("refund", 0.0, 0, 0.0),
        ("take", 0.0, 100, 0.0),
        ("settle", 0.0, 0, 1.0),
        ("settle", 0.0, 0, 1.0),
    ],
)
def test_what_requests_use_never_passes_the_budget_over_any_window(
    capacity: int, rate: float, actions: list[tuple[str, float, int, float]]
) -> None:
    """Whatever is reserved when, and settled (a fraction used) or refunded when, a take never
    leaves the bucket below 0, and the tokens settled between any two settlements sum to at
    most capacity + rate x the time between them."""
    bucket = TokenBucket(capacity, rate)
    now, out, spent = 0.0, [], []
    for what, gap, tokens, fraction in actions:
        now += gap
        if what == "take":
            if bucket.take(tokens, now):
                out.append(tokens)
            assert bucket.level_at(now) >= -EPSILON * (len(out) + 1)
        elif out:
            reserved = out.pop(tokens % len(out))
            used = math.floor(reserved * fraction) if what == "settle" else 0
            bucket.settle(reserved, used, now)
            spent.append((now, used))
        assert bucket.reserved == sum(out)
    for i, (start, _) in enumerate(spent):
        total = 0
        for end, used in spent[i:]:
            total += used
            assert total <= capacity + rate * (end - start) + EPSILON * (len(spent) + 1)


@settings(max_examples=400, deadline=None)
@given(sizes, st.floats(0.01, 5000.0), st.integers(0, 100_000), st.integers(0, 100_000), steps)
def test_refund_and_settle_leave_the_bucket_where_a_twin_stands(
    capacity: int, rate: float, reserved: int, used: int, others: list[tuple[float, int]]
) -> None:
    """A reservation refunded later (other requests reserved and settled, and time, between)
    leaves the bucket where a twin that never saw it stands; settled, what it used below."""
    bucket, twin = TokenBucket(capacity, rate), TokenBucket(capacity, rate)
    used = min(used, reserved)
    if not bucket.take(reserved, 0.0):
        return
    settled = copy.deepcopy(bucket)
    now = 0.0
    for gap, tokens in others:  # the same requests reach all three (those each admits)
        now += gap
        if bucket.fits(tokens, now) and settled.fits(tokens, now):
            for one in (bucket, twin, settled):
                assert one.take(tokens, now)
                one.settle(tokens, tokens // 2, now + gap / 2)
        now += gap / 2
    now += 1.0
    bucket.refund(reserved, now)
    settled.settle(reserved, used, now)
    assert math.isclose(bucket.level_at(now), twin.level_at(now), abs_tol=1e-6)
    assert math.isclose(settled.level_at(now), twin.level_at(now) - used, abs_tol=1e-6)
    assert bucket.reserved == settled.reserved == 0


@settings(max_examples=300, deadline=None)
@given(sizes, st.floats(0.01, 5000.0), st.floats(0.0, 1000.0), st.integers(1, 100_000))
def test_an_empty_bucket_refills_at_its_rate(
    capacity: int, rate: float, elapsed: float, tokens: int
) -> None:
    """Emptied at 0, a bucket holds min(capacity, rate x t) at t; a take of n fails just
    before wait_s(n) and succeeds at it (never, for more than the capacity)."""
    bucket = TokenBucket(capacity, rate)
    assert bucket.take(capacity, 0.0)
    bucket.settle(capacity, capacity, 0.0)
    assert math.isclose(bucket.level_at(elapsed), min(capacity, rate * elapsed), abs_tol=1e-6)
    wait = bucket.wait_s(tokens, 0.0)
    if tokens > capacity:
        assert math.isinf(wait) and not bucket.fits(tokens, 1e12)
        return
    assert math.isclose(wait, tokens / rate, rel_tol=1e-9)
    if wait > 1e-3:
        assert not copy.deepcopy(bucket).take(tokens, wait * (1 - 1e-6) - 1e-4)
    assert bucket.take(tokens, wait)
    bucket.settle(tokens, tokens, wait)
    assert math.isclose(bucket.reset_s(wait), capacity / rate, rel_tol=1e-6)


def test_a_settle_past_the_reservation_is_owed_by_the_next_takes() -> None:
    """A request that used more than it reserved (its output was not known in advance) takes
    the rest: the level goes below 0 and the next take waits for the refill."""
    bucket = TokenBucket(100, 10.0)
    assert bucket.take(0, 0.0)
    bucket.settle(0, 150, 0.0)
    assert bucket.reserved == 0
    assert bucket.level_at(0.0) == -50
    assert not bucket.fits(1, 5.0) and bucket.fits(1, 5.1)


def test_a_resize_keeps_the_level_within_the_new_size() -> None:
    """A reload that shrinks a budget keeps what was spent; one that grows it adds nothing."""
    bucket = TokenBucket(1000, 10.0)
    bucket.take(300, 0.0)
    bucket.settle(300, 300, 0.0)
    bucket.resize(500, 5.0, 0.0)
    assert bucket.level_at(0.0) == 500
    bucket.take(100, 0.0)
    bucket.resize(2000, 20.0, 0.0)
    assert bucket.level_at(0.0) == 400 and bucket.level_at(10.0) == 600
    bucket.refund(100, 10.0)
    assert bucket.level_at(10.0) == 700 and bucket.reserved == 0
