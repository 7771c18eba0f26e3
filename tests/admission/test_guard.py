"""The SLO guard's level machine: order, dwell, hysteresis, overrides; interactive never shed."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmd.admission.classes import Priority
from llmd.admission.guard import (
    ClassReading,
    GuardPolicy,
    GuardState,
    Level,
    effective_level,
    holds_release,
    max_tokens_cap,
    next_state,
    overridden,
    retry_after_s,
    sheds,
)

POLICY = GuardPolicy(
    budgets_s={Priority.INTERACTIVE: 1.5, Priority.NORMAL: 6.0},
    min_samples=20,
    dwell_s=10.0,
    recover_ratio=0.8,
    max_tokens_cap=256,
)
OVER = {Priority.INTERACTIVE: ClassReading(p95_s=3.0, samples=50)}
CALM = {Priority.INTERACTIVE: ClassReading(p95_s=0.2, samples=50)}

readings = st.dictionaries(
    st.sampled_from(list(Priority)),
    st.builds(
        ClassReading,
        p95_s=st.none() | st.floats(0, 20, allow_nan=False),
        samples=st.integers(0, 100),
        predicted_s=st.none() | st.floats(0, 20, allow_nan=False),
    ),
)
steps = st.lists(st.tuples(st.floats(0, 30, allow_nan=False), readings), max_size=60)


Reads = dict[Priority, ClassReading]
Trace = list[tuple[float, Reads]]


def run(start: GuardState, trace: Trace) -> Iterator[tuple[GuardState, GuardState, float, Reads]]:
    """Feed `trace` (time advance, readings) to the guard; yield (before, after, now, readings)."""
    state, now = start, 0.0
    for advance, seen in trace:
        now += advance
        after = next_state(state, seen, POLICY, now)
        yield state, after, now, seen
        state = after


def over_budget(seen: Reads) -> bool:
    for cls, budget in POLICY.budgets_s.items():
        r = seen.get(cls, ClassReading())
        if r.samples >= POLICY.min_samples and (r.p95_s or 0) > budget:
            return True
        if r.predicted_s is not None and r.predicted_s > budget:
            return True
    return False


def under_recovery_line(seen: Reads) -> bool:
    for cls, budget in POLICY.budgets_s.items():
        r = seen.get(cls, ClassReading())
        line = budget * POLICY.recover_ratio
        if r.samples >= POLICY.min_samples and (r.p95_s or 0) > line:
            return False
        if r.predicted_s is not None and r.predicted_s > line:
            return False
    return True


@settings(max_examples=300)
@given(steps)
def test_one_step_at_a_time_and_a_dwell_apart(trace: Trace) -> None:
    """The level moves by at most one per change, changes are at least a dwell apart, it rises
    only over budget and falls only under the recovery line."""
    last_change = float("-inf")
    for before, after, now, seen in run(GuardState(), trace):
        if after.level == before.level:
            continue
        assert abs(after.level - before.level) == 1
        assert now - last_change >= POLICY.dwell_s
        last_change = now
        if after.level > before.level:
            assert over_budget(seen)
        else:
            assert not over_budget(seen) and under_recovery_line(seen)


@settings(max_examples=300)
@given(steps, st.sampled_from(["on", "off", "level 0", "level 2", "level 4"]))
def test_interactive_is_never_held_capped_or_shed(trace: Trace, mode: str) -> None:
    """At any level reached, and under any override, interactive keeps every right."""
    for _, after, _now, _ in run(overridden(GuardState(), mode, 0.0), trace):
        assert not sheds(after, Priority.INTERACTIVE)
        assert not holds_release(after, Priority.INTERACTIVE)
        assert max_tokens_cap(after, Priority.INTERACTIVE, POLICY) is None


def test_levels_are_taken_in_the_stated_order_and_kept() -> None:
    """Each level adds its measure and keeps those below: hold batch, cap, shed batch, shed
    normal."""
    measures = []
    for level in Level:
        state = GuardState(level=level)
        measures.append(
            (
                holds_release(state, Priority.BATCH),
                max_tokens_cap(state, Priority.NORMAL, POLICY) is not None,
                max_tokens_cap(state, Priority.BATCH, POLICY) is not None,
                sheds(state, Priority.BATCH),
                sheds(state, Priority.NORMAL),
            )
        )
    assert measures == [
        (False, False, False, False, False),
        (True, False, False, False, False),
        (True, True, True, False, False),
        (True, True, True, True, False),
        (True, True, True, True, True),
    ]
    assert not holds_release(GuardState(level=Level.SHED_NORMAL), Priority.NORMAL)


def test_sustained_overload_climbs_a_dwell_per_level_and_recovers_the_same_way() -> None:
    """Over budget: 0 to 4 at one level per dwell; calm again: back to 0 the same way; in the
    hysteresis band it holds."""
    state, now, seen = GuardState(), 0.0, []
    for _ in range(60):
        state = next_state(state, OVER, POLICY, now)
        seen.append((now, state.level))
        now += 1.0
    climbs = [t for (t, level), (_, prev) in zip(seen[1:], seen[:-1], strict=True) if level > prev]
    assert seen[0][1] == Level.HOLD_BATCH and climbs == [10.0, 20.0, 30.0]
    assert state.level == Level.SHED_NORMAL and "interactive TTFT p95 3000 ms" in state.reason
    band = {Priority.INTERACTIVE: ClassReading(p95_s=1.4, samples=50)}  # under 1.5, over 1.2
    held = next_state(state, band, POLICY, now + 100)
    assert held == state
    for _ in range(60):
        state = next_state(state, CALM, POLICY, now)
        now += 1.0
    assert state.level == Level.NORMAL


def test_few_samples_do_not_trip_it_but_a_late_queued_request_does() -> None:
    """Three slow requests at night are no signal; a queued request predicted past the budget
    is."""
    quiet = {Priority.INTERACTIVE: ClassReading(p95_s=9.0, samples=3)}
    assert next_state(GuardState(), quiet, POLICY, 0.0).level == Level.NORMAL
    late = {Priority.NORMAL: ClassReading(predicted_s=7.0)}
    state = next_state(GuardState(), late, POLICY, 0.0)
    assert state.level == Level.HOLD_BATCH and "normal predicted TTFT 7000 ms" in state.reason


def test_operator_overrides() -> None:
    """off: nothing degraded whatever the readings; level N: pinned; on: automatic again."""
    off = overridden(GuardState(level=Level.SHED_NORMAL), "off", 0.0)
    assert effective_level(next_state(off, OVER, POLICY, 100.0)) == Level.NORMAL
    assert not sheds(off, Priority.BATCH)
    pinned = overridden(GuardState(), "level 3", 0.0)
    assert next_state(pinned, CALM, POLICY, 100.0) == pinned
    assert sheds(pinned, Priority.BATCH) and not sheds(pinned, Priority.NORMAL)
    assert retry_after_s(pinned, Priority.BATCH, POLICY, 5.0) == POLICY.dwell_s
    on = overridden(pinned, "on", 50.0)
    assert effective_level(on) == Level.NORMAL
    assert next_state(on, OVER, POLICY, 60.0).level == Level.HOLD_BATCH
    for mode in ("level 9", "level \u00b2", "level " + "9" * 5000):
        with pytest.raises(ValueError, match="guard mode must be off, on or 'level N'"):
            overridden(GuardState(), mode, 0.0)


def test_retry_after_counts_the_steps_down_to_admission() -> None:
    """A batch request shed at level 4, 4 s into the dwell: 6 s left of it plus one more step."""
    state = GuardState(level=Level.SHED_NORMAL, since=100.0)
    assert retry_after_s(state, Priority.BATCH, POLICY, 104.0) == 6.0 + 10.0
    assert retry_after_s(state, Priority.NORMAL, POLICY, 104.0) == 6.0
    assert retry_after_s(GuardState(), Priority.BATCH, POLICY, 0.0) == 1.0
