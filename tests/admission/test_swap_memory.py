"""The swap core for a group fit by memory (no max_resident): an engine wakes only when its
awake footprint fits beside what the others hold, or alone; evictions for memory keep the
rules (never in flight, never pinned, not inside min_residence_s, lowest cost first)."""

from __future__ import annotations

import collections
import dataclasses

from hypothesis import example, given, settings
from hypothesis import strategies as st

from llmd.admission.swap import EngineView, GroupPolicy, Residency, SleepReason, SwapGroup
from tests.admission.test_swap import TRACES, decided_again, drawn_view
from tests.support.swap_steps import (
    StepEngine,
    advance,
    apply,
    arrivals,
    arrive,
    start_queued,
    views,
)

GIB = 1024**3
NAMES = ("a", "b", "c", "d")


def held(policy: GroupPolicy, view: EngineView) -> int:
    return view.awake_bytes if view.resident else view.asleep_bytes


@st.composite
def memory_groups(draw: st.DrawFn) -> tuple[GroupPolicy, list[EngineView], float]:
    """A device, engines of any footprint in any state whose holdings fit it, and a time."""
    policy = GroupPolicy(
        min_residence_s=draw(st.floats(0, 30)),
        max_wait_s=draw(st.floats(0, 5)),
        device_bytes=draw(st.integers(8, 80)) * GIB,
    )
    now, views, used = 1000.0, [], 0
    for name in NAMES[: draw(st.integers(1, 4))]:
        awake_bytes = draw(st.integers(1, 60)) * GIB
        asleep_bytes = draw(st.sampled_from([0, 2 * GIB]))
        residency = draw(st.sampled_from(list(Residency)))
        if residency is not Residency.ASLEEP and used + awake_bytes > policy.device_bytes:
            residency = Residency.ASLEEP
        used += awake_bytes if residency is not Residency.ASLEEP else asleep_bytes
        views.append(
            drawn_view(
                draw, name, residency, now, awake_bytes=awake_bytes, asleep_bytes=asleep_bytes
            )
        )
    return policy, views, now


def _found(views: list[EngineView]) -> tuple[GroupPolicy, list[EngineView], float]:
    """A case Hypothesis found: 8 GiB, no residence or wait, these engines, at 1000 s."""
    return GroupPolicy(min_residence_s=0.0, max_wait_s=0.0, device_bytes=8 * GIB), views, 1000.0


def _view(name: str, residency: Residency, **fields: object) -> EngineView:
    """An engine of 1 GiB awake, nothing asleep, a 1 s wake, with `fields` over that."""
    drawn: dict[str, object] = {"wake_s": 1.0, "awake_bytes": GIB, "asleep_bytes": 0}
    return EngineView(name, residency, **{**drawn, **fields})  # type: ignore[arg-type]


# An eviction that makes room once a cancelled wake (a pinned one's) gives its memory back.
CANCELLED_WAKE = _found(
    [
        _view("a", Residency.WAKING, pinned=True),
        _view("b", Residency.ASLEEP),
        _view("c", Residency.AWAKE, awake_since=1000.0),
        _view("d", Residency.ASLEEP, waiting=1, awake_bytes=8 * GIB),
    ]
)
# An eviction for the second engine waiting, once the first was woken.
SECOND_WAITING = _found(
    [
        _view("a", Residency.ASLEEP, waiting=1),
        _view("b", Residency.ASLEEP),
        _view("c", Residency.AWAKE, awake_since=1000.0),
        _view("d", Residency.ASLEEP, waiting=1, awake_bytes=7 * GIB),
    ]
)


@settings(max_examples=400, deadline=None)
@given(memory_groups(), st.floats(0, 10))
@example(CANCELLED_WAKE, 0.0)
@example(SECOND_WAITING, 0.0)
def test_a_wake_fits_beside_what_the_others_hold_or_comes_alone(
    case: tuple[GroupPolicy, list[EngineView], float], later: float
) -> None:
    """Over any group fit by memory (decided twice, `later` s apart): the engines woken fit in
    the device beside what every other engine holds (resident: awake footprint; asleep: what
    it keeps asleep), or one is woken while no other is resident; nothing in flight, pinned,
    or inside min_residence_s (unless idle for its wake) is evicted; no eviction while those
    falling asleep (or going to sleep idle, or whose wake is cancelled) will free enough, nor
    one that cannot make room beside pinned engines."""
    policy, views, now = case
    at = now + later
    plan = decided_again(policy, views, now, at)
    by_name = {v.name: v for v in views}
    used = sum(held(policy, v) for v in views)
    grown = sum(by_name[n].awake_bytes - by_name[n].asleep_bytes for n in plan.wake)
    alone = len(plan.wake) == 1 and not any(v.resident for v in views)
    assert not plan.wake or used + grown <= policy.device_bytes or alone
    for name in plan.wake:
        assert by_name[name].residency is Residency.ASLEEP and by_name[name].waiting
    evicted = [by_name[n] for n, reason in plan.sleep if reason is SleepReason.EVICTED]
    for view in evicted:
        assert view.in_flight == 0 and not view.pinned and view.awake_since is not None
        idle_for = later if not view.waiting else -1.0
        assert at - view.awake_since >= policy.min_residence_s or idle_for >= view.wake_s
    if evicted:
        # What gives its memory back without an eviction: those falling asleep, put to sleep
        # idle in this plan, or whose wake it cancels. The eviction is for the first engine
        # waiting (the views' order is the wait's: all drawn waiting since `now`) not woken.
        idled = {n for n, reason in plan.sleep if reason is SleepReason.IDLE}
        leaving = [
            v
            for v in views
            if v.residency is Residency.FALLING_ASLEEP or v.name in idled | set(plan.cancel)
        ]
        freed = sum(v.awake_bytes - v.asleep_bytes for v in leaving)
        first = next(v for v in views if v.waiting and not v.resident and v.name not in plan.wake)
        grow = first.awake_bytes - first.asleep_bytes
        assert used + grown - freed + grow > policy.device_bytes
        staying = [v for v in views if v is not first and v.resident and v not in leaving]
        if any(v.pinned for v in staying):  # evicting all unpinned ones would make room
            movable = sum(v.awake_bytes - v.asleep_bytes for v in staying if not v.pinned)
            assert used + grown - freed + grow - movable <= policy.device_bytes


def test_two_small_engines_share_the_device_and_a_large_one_evicts_the_cheapest() -> None:
    """On 24 GiB: two 10 GiB engines are awake together (no count limits them); a 20 GiB one
    evicts the cheaper of them (lowest wake x demand) first, then the other, since the first's
    room back is not enough; none more while both fall asleep; never a pinned engine."""
    policy = GroupPolicy(min_residence_s=0.0, max_wait_s=0.0, device_bytes=24 * GIB)
    small = dict(awake_bytes=10 * GIB, asleep_bytes=2 * GIB)
    a = EngineView("a", Residency.AWAKE, awake_since=0.0, wake_s=1.0, demand=10, **small)  # type: ignore[arg-type]
    b = EngineView("b", Residency.ASLEEP, waiting=1, **small)  # type: ignore[arg-type]
    big = EngineView("big", Residency.ASLEEP, awake_bytes=20 * GIB, asleep_bytes=2 * GIB)
    swap = SwapGroup(policy)
    assert swap.decide([a, b, big], 10.0).wake == ("b",)  # 10 + 10 + 2 asleep = 22 GiB
    b = dataclasses.replace(b, residency=Residency.AWAKE, awake_since=11.0, waiting=0, demand=1)
    big = dataclasses.replace(big, waiting=1)
    plan = swap.decide([a, b, big], 12.0)
    assert plan.sleep == (("b", SleepReason.EVICTED),) and not plan.wake  # b: cost 1 < 10
    b = dataclasses.replace(b, residency=Residency.FALLING_ASLEEP, awake_since=None)
    plan = swap.decide([a, b, big], 12.5)  # b's 8 GiB back will not be enough (10 + 2 + 20)
    assert plan.sleep == (("a", SleepReason.EVICTED),) and not plan.wake
    a = dataclasses.replace(a, residency=Residency.FALLING_ASLEEP, awake_since=None)
    assert not swap.decide([a, b, big], 12.6).sleep  # both on their way: enough, no more
    pinned = dataclasses.replace(a, residency=Residency.AWAKE, awake_since=0.0, pinned=True)
    assert not SwapGroup(policy).decide([pinned, b, big], 13.0).sleep
    a = dataclasses.replace(a, residency=Residency.ASLEEP)
    b = dataclasses.replace(b, residency=Residency.ASLEEP)
    assert swap.decide([a, b, big], 14.0).wake == ("big",)  # 2 + 2 + 20 = 24 GiB


def test_no_eviction_that_cannot_make_room_beside_a_pinned_engine() -> None:
    """A 20 GiB engine cannot fit beside a pinned 12 GiB one on 24 GiB: the unpinned 4 GiB
    engine is not evicted for it (it would free too little); a 10 GiB one evicts it."""
    policy = GroupPolicy(min_residence_s=0.0, max_wait_s=0.0, device_bytes=24 * GIB)
    pinned = EngineView("p", Residency.AWAKE, pinned=True, awake_since=0.0, awake_bytes=12 * GIB)
    small = EngineView("s", Residency.AWAKE, awake_since=0.0, awake_bytes=4 * GIB)
    big = EngineView("big", Residency.ASLEEP, waiting=1, awake_bytes=20 * GIB)
    assert not SwapGroup(policy).decide([pinned, small, big], 5.0).sleep
    mid = dataclasses.replace(big, awake_bytes=10 * GIB)
    assert SwapGroup(policy).decide([pinned, small, mid], 5.0).sleep == (
        ("s", SleepReason.EVICTED),
    )


def test_an_engine_too_large_for_the_device_still_wakes_alone() -> None:
    """An engine whose footprint (an estimate, perhaps) exceeds the device beside the sleepers
    wakes once no other engine is resident, so its requests never wait for good."""
    policy = GroupPolicy(min_residence_s=0.0, max_wait_s=0.0, device_bytes=24 * GIB)
    a = EngineView("a", Residency.ASLEEP, awake_bytes=10 * GIB, asleep_bytes=2 * GIB)
    huge = EngineView("huge", Residency.ASLEEP, waiting=1, awake_bytes=30 * GIB)
    assert SwapGroup(policy).decide([a, huge], 1.0).wake == ("huge",)


@settings(max_examples=60, deadline=None)
@given(
    TRACES,
    st.tuples(st.integers(2, 20), st.integers(2, 20), st.integers(2, 20)),
    st.floats(0, 3),
    st.floats(0, 1),
)
def test_driven_over_a_trace_memory_is_never_overcommitted(
    trace: list[tuple[str, float, float]],
    sizes: tuple[int, int, int],
    min_residence: float,
    max_wait: float,
) -> None:
    """Driving the core over a trace (model, gap before it, its duration) on a 24 GiB device
    with engines of `sizes` GiB awake, 2 GiB asleep and a 0.5 s wake: every request is served,
    no engine is put to sleep with requests running, and the engines held never exceed the
    device unless one engine is resident alone."""
    device = 24 * GIB
    policy = GroupPolicy(min_residence_s=min_residence, max_wait_s=max_wait, device_bytes=device)
    swap, wake_s, step, asleep = SwapGroup(policy), 0.5, 0.05, 2 * GIB
    engines = {name: StepEngine(size=size * GIB) for name, size in zip("abc", sizes, strict=True)}
    due = arrivals(trace)
    queued: list[tuple[float, str, float]] = []
    now = 0.0
    while (due or queued or any(e.running for e in engines.values())) and now < 300:
        arrive(due, queued, now)
        advance(engines, now)
        waiting = collections.Counter(q[1] for q in queued)
        plan = swap.decide(views(engines, waiting, wake_s, asleep), now)
        for name, _ in plan.sleep:
            assert not engines[name].running
        apply(engines, plan, now, wake_s)
        resident = [e for e in engines.values() if e.residency is not Residency.ASLEEP]
        used = sum(e.size if e in resident else asleep for e in engines.values())
        assert used <= device or len(resident) == 1
        start_queued(engines, queued, plan, now)
        now += step
    assert not due and not queued
