"""The circuit breaker: opening on failures in a row or a failure ratio, cooldown growth,
one half-open probe, closing on success."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from llmd.routing.breaker import BreakerPolicy, BreakerState, CircuitBreaker

POLICY = BreakerPolicy(
    consecutive_failures=3, failure_ratio=0.5, min_calls=10, window_s=30.0,
    cooldown_s=5.0, cooldown_max_s=40.0, probe_timeout_s=20.0,
)  # fmt: skip


def opened(now: float = 0.0) -> CircuitBreaker:
    breaker = CircuitBreaker(POLICY)
    for _ in range(POLICY.consecutive_failures):
        breaker.record_failure(now)
    return breaker


def test_opens_after_failures_in_a_row_and_a_success_resets_the_count() -> None:
    """N failures in a row open the breaker; a success in between starts the count again."""
    breaker = CircuitBreaker(POLICY)
    breaker.record_failure(0.0)
    breaker.record_failure(0.0)
    breaker.record_success(0.0)
    breaker.record_failure(0.0)
    breaker.record_failure(0.0)
    assert breaker.state(0.0) is BreakerState.CLOSED and breaker.available(0.0)
    breaker.record_failure(0.0)
    assert breaker.state(0.0) is BreakerState.OPEN and not breaker.available(0.0)


def test_opens_on_failure_ratio_only_past_the_minimum_volume() -> None:
    """Half the calls failing opens it once min_calls were seen within the window."""
    breaker = CircuitBreaker(POLICY)
    for i in range(4):  # 8 calls, 4 failures, never 3 in a row: under the volume
        breaker.record_success(float(i))
        breaker.record_failure(float(i))
    assert breaker.state(4.0) is BreakerState.CLOSED
    breaker.record_success(4.0)
    breaker.record_failure(4.0)  # 10 calls, 5 failures
    assert breaker.state(4.0) is BreakerState.OPEN


def test_old_outcomes_leave_the_window() -> None:
    """Failures older than window_s no longer count toward the ratio."""
    breaker = CircuitBreaker(POLICY)
    for _ in range(4):
        breaker.record_failure(0.0)
        breaker.record_success(0.0)
    for i in range(9):
        breaker.record_success(31.0 + i)
    breaker.record_failure(40.0)  # 10 calls in the window, 1 failure
    assert breaker.state(40.0) is BreakerState.CLOSED


def test_a_trip_opens_at_once_from_any_state() -> None:
    """A stall trips the breaker: open now for the next cooldown, closed or half-open."""
    breaker = CircuitBreaker(POLICY)
    breaker.trip(1.0)
    assert breaker.state(1.0) is BreakerState.OPEN and breaker.retry_after_s(1.0) == 5.0
    assert breaker.state(6.0) is BreakerState.HALF_OPEN
    breaker.trip(6.0)
    assert breaker.state(6.0) is BreakerState.OPEN and breaker.retry_after_s(6.0) == 10.0


def test_cooldown_then_one_probe_then_close_on_success() -> None:
    """After the cooldown one probe passes, no second one; its success closes the breaker."""
    breaker = opened()
    assert breaker.retry_after_s(1.0) == 4.0
    assert not breaker.available(4.9)
    assert breaker.available(5.0) and breaker.state(5.0) is BreakerState.HALF_OPEN
    breaker.on_attempt(5.0)
    assert not breaker.available(5.1)
    assert breaker.retry_after_s(5.1) > 0
    breaker.record_success(6.0)
    assert breaker.state(6.0) is BreakerState.CLOSED and breaker.available(6.0)


def test_failed_probe_reopens_with_a_longer_cooldown_capped() -> None:
    """Each failed probe doubles the cooldown up to cooldown_max_s; a close resets it."""
    breaker = opened()
    now, cooldowns = 0.0, []
    for _ in range(6):
        cooldowns.append(breaker.retry_after_s(now))
        now += cooldowns[-1]
        assert breaker.available(now)
        breaker.on_attempt(now)
        breaker.record_failure(now)
    assert cooldowns == [5.0, 10.0, 20.0, 40.0, 40.0, 40.0]
    now += 40.0
    breaker.record_success(now)  # the probe of the last half-open state
    for _ in range(POLICY.consecutive_failures):
        breaker.record_failure(now)
    assert breaker.retry_after_s(now) == 5.0


def test_lost_probe_lets_another_through_after_the_probe_timeout() -> None:
    """A probe that never reports does not hold the upstream shut forever."""
    breaker = opened()
    breaker.on_attempt(5.0)
    assert not breaker.available(24.9)
    assert breaker.retry_after_s(10.0) == 15.0
    assert breaker.available(25.0)


def test_outcomes_while_open_are_ignored() -> None:
    """Late results of requests sent before the breaker opened change nothing."""
    breaker = opened()
    breaker.record_success(1.0)
    assert breaker.state(1.0) is BreakerState.OPEN
    breaker.record_failure(4.0)
    assert breaker.retry_after_s(4.0) == 1.0


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["ok", "fail", "attempt"]), st.floats(0, 50))))
def test_never_two_probes_at_once(events: list[tuple[str, float]]) -> None:
    """Whatever the outcomes and times, a half-open breaker passes one probe at a time."""
    breaker = CircuitBreaker(POLICY)
    now = 0.0
    for kind, step in events:
        now += step
        if kind == "ok":
            breaker.record_success(now)
        elif kind == "fail":
            breaker.record_failure(now)
        elif breaker.available(now):
            half_open = breaker.state(now) is BreakerState.HALF_OPEN
            breaker.on_attempt(now)
            if half_open:
                assert not breaker.available(now)
        assert breaker.retry_after_s(now) >= 0
        assert breaker.available(now) == (breaker.retry_after_s(now) == 0)
