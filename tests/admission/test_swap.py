"""The swap core's guarantees: no eviction with requests in flight, the wait bound, no thrash
inside min_residence_s, eviction by cost and never of a pinned engine, unwanted wakes
cancelled."""

from __future__ import annotations

import collections
import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from llmd.admission.swap import (
    Demand,
    EngineView,
    GroupPolicy,
    Plan,
    Residency,
    SleepReason,
    SwapGroup,
    WakeTimes,
)
from tests.support.swap_steps import (
    StepEngine,
    advance,
    apply,
    arrivals,
    arrive,
    start_queued,
    views,
)

NAMES = ("a", "b", "c", "d")
# Traces of requests to three models: (model, gap before it, its duration), s.
TRACES = st.lists(
    st.tuples(st.sampled_from("abc"), st.floats(0, 0.5), st.floats(0.05, 1.0)),
    min_size=1,
    max_size=40,
)


@st.composite
def groups(draw: st.DrawFn) -> tuple[GroupPolicy, list[EngineView], float]:
    """A policy, a group of engines in any state it may be in, and a time."""
    max_resident = draw(st.integers(1, 3))
    policy = GroupPolicy(
        max_resident=max_resident,
        min_residence_s=draw(st.floats(0, 30)),
        max_wait_s=draw(st.floats(0, 5)),
    )
    now = 1000.0
    views = []
    resident = 0
    for name in NAMES[: draw(st.integers(1, 4))]:
        residency = draw(st.sampled_from(list(Residency)))
        if residency is not Residency.ASLEEP:
            if resident == max_resident:
                residency = Residency.ASLEEP
            resident += 1
        views.append(
            drawn_view(
                draw,
                name,
                residency,
                now,
                last_request_at=now - draw(st.floats(0, 60)),
                idle_sleep_s=draw(st.sampled_from([0.0, 5.0, 30.0])),
            )
        )
    return policy, views, now


def drawn_view(
    draw: st.DrawFn, name: str, residency: Residency, now: float, **fields: object
) -> EngineView:
    """An engine `residency` at `now` with drawn requests, pin, wake time and demand, and
    `fields` as given."""
    awake = residency is Residency.AWAKE
    return EngineView(
        name=name,
        residency=residency,
        in_flight=draw(st.integers(0, 3)) if awake else 0,
        waiting=draw(st.integers(0, 3)),
        pinned=draw(st.booleans()),
        awake_since=now - draw(st.floats(0, 60)) if awake else None,
        wake_s=draw(st.floats(0.1, 10)),
        demand=draw(st.floats(0, 100)),
        **fields,  # type: ignore[arg-type]
    )


def decided_again(policy: GroupPolicy, views: list[EngineView], now: float, at: float) -> Plan:
    """The plan of a group under `policy` that decided over `views` at `now` and decides
    again over the same views at `at` (its waits begun at `now`)."""
    swap = SwapGroup(policy)
    swap.decide(views, now)
    return swap.decide(views, at)


@settings(max_examples=400, deadline=None)
@given(groups(), st.floats(0, 10))
def test_every_plan_keeps_the_guarantees(
    case: tuple[GroupPolicy, list[EngineView], float], later: float
) -> None:
    """Over any group state (decided twice, `later` s apart): nothing in flight is put to
    sleep; evictions spare pinned engines and those inside min_residence_s that have not been
    idle for their predicted wake; wakes stay within
    max_resident and are only for waiting requests; an engine is closed only once requests
    waited max_wait_s for another; exactly the wakes nobody waits for are cancelled."""
    policy, views, now = case
    at = now + later
    plan = decided_again(policy, views, now, at)
    by_name = {v.name: v for v in views}
    for name, reason in plan.sleep:
        view = by_name[name]
        assert view.in_flight == 0 and view.residency is Residency.AWAKE
        if reason is SleepReason.EVICTED:
            assert not view.pinned
            assert view.awake_since is not None
            # Inside min_residence_s only once idle (seen idle since `now`) for its wake.
            idle_for = later if not view.waiting else -1.0
            # (its residence's end as the planner adds it: `at - awake_since` may round below
            # min_residence_s where `awake_since + min_residence_s` is not past `at`)
            resided = view.awake_since + policy.min_residence_s <= at
            assert resided or idle_for >= view.wake_s
        else:
            assert not view.waiting and not view.pinned
    resident = sum(1 for v in views if v.resident)
    assert resident + len(plan.wake) <= max(policy.max_resident, resident)
    for name in plan.wake:
        assert by_name[name].residency is Residency.ASLEEP and by_name[name].waiting
    if plan.closed:
        assert later >= policy.max_wait_s
        assert any(not v.resident and v.waiting for v in views)
    waking = {v.name for v in views if v.residency is Residency.WAKING and not v.waiting}
    assert set(plan.cancel) == waking
    assert plan.next_at is None or plan.next_at > at


@settings(max_examples=300, deadline=None)
@given(
    st.floats(0, 30),
    st.floats(0, 5),
    st.tuples(st.integers(0, 2), st.integers(0, 2), st.booleans()),
    st.floats(0, 60),
    st.floats(0.1, 10),
    st.floats(0, 20),
)
def test_a_full_group_evicts_exactly_as_the_rules_say(
    min_residence: float,
    max_wait: float,
    load: tuple[int, int, bool],
    awake_for: float,
    wake_s: float,
    later: float,
) -> None:
    """One engine awake (with `load`: requests in flight, requests waiting, pinned) and one
    asleep that requests wait for, seen twice `later` s apart: the awake one is evicted exactly
    when it is unpinned, has nothing in flight, and is past min_residence_s (with nothing
    waiting for it, or once max_wait_s closed it) or has been idle for its predicted wake."""
    in_flight, waiting, pinned = load
    policy = GroupPolicy(max_resident=1, min_residence_s=min_residence, max_wait_s=max_wait)
    now = 1000.0
    awake = EngineView(
        "a",
        Residency.AWAKE,
        in_flight=in_flight,
        waiting=waiting,
        pinned=pinned,
        awake_since=now - awake_for,
        wake_s=wake_s,
    )
    views = [awake, EngineView("b", Residency.ASLEEP, waiting=1)]
    swap = SwapGroup(policy)
    swap.decide([dataclasses.replace(awake, in_flight=1), views[1]], now)  # it ran a request
    swap.decide(views, now)
    plan = swap.decide(views, now + later)
    at = now + later  # the times compared as the core compares them
    past = at >= awake.awake_since + min_residence  # type: ignore[operator]
    idle = not in_flight and not waiting and at >= now + wake_s
    drained = not in_flight and (not waiting or at - now >= max_wait)
    expected = not pinned and ((past and drained) or idle)
    assert (plan.sleep == (("a", SleepReason.EVICTED),)) is expected
    assert not plan.wake  # b waits until a is asleep


def test_the_lowest_cost_engine_is_evicted_never_a_pinned_one() -> None:
    """Of the awake engines past min_residence_s, the one with the lowest wake time x demand
    goes; a pinned one never does, however cheap."""
    policy = GroupPolicy(max_resident=3, min_residence_s=10.0, max_wait_s=0.0)
    awake = dict(residency=Residency.AWAKE, awake_since=0.0)
    views = [
        EngineView("cheap-pinned", pinned=True, wake_s=0.1, demand=1, **awake),  # type: ignore[arg-type]
        EngineView("busy", wake_s=1.0, demand=50, **awake),  # type: ignore[arg-type]
        EngineView("slow-rare", wake_s=8.0, demand=2, **awake),  # type: ignore[arg-type]
        EngineView("wanted", Residency.ASLEEP, waiting=1),
    ]
    plan = SwapGroup(policy).decide(views, 100.0)
    assert plan.sleep == (("slow-rare", SleepReason.EVICTED),) and not plan.wake


def test_requests_for_the_resident_engine_join_within_max_wait_then_it_drains() -> None:
    """A B A A C: while B's request waits, A's new requests still go to A for max_wait_s; past
    it A is closed, put to sleep once drained, and B is woken, then C."""
    policy = GroupPolicy(max_resident=1, min_residence_s=0.0, max_wait_s=2.0)
    swap = SwapGroup(policy)
    a = EngineView("a", Residency.AWAKE, in_flight=1, awake_since=0.0)
    b = EngineView("b", Residency.ASLEEP, waiting=1)
    c = EngineView("c", Residency.ASLEEP)
    plan = swap.decide([a, b, c], 10.0)  # B arrives while A runs: A keeps taking requests
    assert not plan.closed and not plan.sleep and plan.next_at == 12.0
    a = dataclasses.replace(a, in_flight=3)  # A A joined
    c = dataclasses.replace(c, waiting=1)
    assert not swap.decide([a, b, c], 11.0).closed
    plan = swap.decide([a, b, c], 12.0)
    assert plan.closed == {"a"} and not plan.sleep  # A drains; a new A waits in the queue
    a = dataclasses.replace(a, in_flight=0, waiting=1)
    plan = swap.decide([a, b, c], 13.0)
    assert plan.sleep == (("a", SleepReason.EVICTED),) and not plan.wake
    a = dataclasses.replace(a, residency=Residency.ASLEEP, awake_since=None)
    plan = swap.decide([a, b, c], 13.5)
    assert plan.wake == ("b",)  # B waited longest; then C (before the A that came later)
    b = dataclasses.replace(b, residency=Residency.AWAKE, awake_since=14.0, waiting=0)
    plan = swap.decide([a, b, c], 14.0)
    assert plan.sleep == (("b", SleepReason.EVICTED),)  # nothing in flight: no need to wait


def test_no_eviction_of_a_busy_engine_inside_min_residence() -> None:
    """An engine woken less than min_residence_s ago that still runs requests stays, whoever
    waits; the plan says when to look again."""
    policy = GroupPolicy(max_resident=1, min_residence_s=20.0, max_wait_s=0.0)
    views = [
        EngineView("a", Residency.AWAKE, in_flight=1, awake_since=100.0),
        EngineView("b", Residency.ASLEEP, waiting=5),
    ]
    plan = SwapGroup(policy).decide(views, 110.0)
    assert not plan.sleep and not plan.wake and plan.next_at == 120.0
    plan = SwapGroup(policy).decide(views, 120.0)
    assert plan.closed == {"a"} and not plan.sleep


def test_an_idle_engine_inside_min_residence_goes_once_idle_for_its_wake() -> None:
    """Inside min_residence_s, an engine with nothing in flight or waiting is evicted once it
    has been idle for its predicted wake time, not before; a request for it starts the count
    again."""
    policy = GroupPolicy(max_resident=1, min_residence_s=20.0, max_wait_s=5.0)
    swap = SwapGroup(policy)
    a = EngineView("a", Residency.AWAKE, in_flight=1, awake_since=100.0, wake_s=0.5)
    b = EngineView("b", Residency.ASLEEP, waiting=1)
    assert not swap.decide([a, b], 101.0).sleep
    a = dataclasses.replace(a, in_flight=0)  # its request ended: idle from 102.0
    plan = swap.decide([a, b], 102.0)
    assert not plan.sleep and plan.next_at == 102.5
    a = dataclasses.replace(a, in_flight=1)  # a new request for it: busy again
    assert not swap.decide([a, b], 102.3).sleep
    a = dataclasses.replace(a, in_flight=0)  # idle again from 102.4
    assert not swap.decide([a, b], 102.4).sleep
    assert not swap.decide([a, b], 102.8).sleep
    assert swap.decide([a, b], 102.9).sleep == (("a", SleepReason.EVICTED),)


def test_a_wake_nobody_waits_for_is_cancelled_and_idle_engines_sleep() -> None:
    """A waking engine whose requests all left is cancelled; an awake one without requests for
    its idle_sleep_s sleeps (`idle`), unless pinned."""
    policy = GroupPolicy(max_resident=3)
    views = [
        EngineView("w", Residency.WAKING),
        EngineView("idle", Residency.AWAKE, awake_since=0.0, last_request_at=0.0, idle_sleep_s=5),
        EngineView(
            "pinned",
            Residency.AWAKE,
            pinned=True,
            awake_since=0.0,
            last_request_at=0.0,
            idle_sleep_s=5,
        ),
    ]
    plan = SwapGroup(policy).decide(views, 10.0)
    assert plan.cancel == ("w",) and plan.sleep == (("idle", SleepReason.IDLE),)


@settings(max_examples=60, deadline=None)
@given(
    TRACES,
    st.floats(0, 5),
    st.floats(0, 2),
)
def test_every_request_is_served_within_the_bound(
    trace: list[tuple[str, float, float]], min_residence: float, max_wait: float
) -> None:
    """Driving the core over a trace (model, gap before it, its duration) with one engine awake
    at a time and a 0.5 s wake: every request is served, none waits longer than one turn of
    each model (min_residence_s + max_wait_s + the longest request + the wake, each); no
    engine is evicted with requests running, nor inside min_residence_s before it has been
    idle for its wake (so wakes are at least one wake plus the shorter of the two apart)."""
    policy = GroupPolicy(max_resident=1, min_residence_s=min_residence, max_wait_s=max_wait)
    swap, wake_s, step = SwapGroup(policy), 0.5, 0.05
    engines = {name: StepEngine() for name in "abc"}
    due = arrivals(trace)
    queued: list[tuple[float, str, float]] = []
    waits: list[float] = []
    woken_at: list[float] = []
    now = 0.0
    while (due or queued or any(e.running for e in engines.values())) and now < 200:
        arrive(due, queued, now)
        advance(engines, now)
        waiting = collections.Counter(q[1] for q in queued)
        for name, engine in engines.items():  # awake with nothing running or queued since
            if engine.residency is not Residency.AWAKE or engine.running or waiting[name]:
                engine.idle_since = None
            elif engine.idle_since is None:
                engine.idle_since = now
        plan = swap.decide(views(engines, waiting, wake_s), now)
        for name, _ in plan.sleep:
            engine = engines[name]
            assert not engine.running and engine.awake_since is not None
            if now - engine.awake_since < min_residence:
                assert engine.idle_since is not None and now - engine.idle_since >= wake_s - 1e-9
        for _ in plan.wake:
            if woken_at:
                assert now - woken_at[-1] >= wake_s + min(min_residence, wake_s) - step
            woken_at.append(now)
        apply(engines, plan, now, wake_s)
        awake = [n for n, e in engines.items() if e.residency is not Residency.ASLEEP]
        assert len(awake) <= 1
        waits += start_queued(engines, queued, plan, now)
        now += step
    assert not due and not queued
    turn = min_residence + max_wait + 1.0 + wake_s + 4 * step
    assert max(waits) <= 3 * turn


def test_the_predicted_wake_is_the_median_of_the_last_wakes() -> None:
    """No wake yet: the default; then the median of the last five."""
    assert WakeTimes().predicted_s() is None
    times = WakeTimes(default_s=3.0)
    assert times.predicted_s() == 3.0
    for seconds in (9.0, 1.0, 2.0, 1.5, 1.2, 1.1):
        times.record(seconds)
    assert times.predicted_s() == 1.2  # 9.0 has left the five kept


def test_demand_counts_the_last_minute() -> None:
    """Requests per minute over the last 60 s."""
    demand = Demand()
    for at in (0.0, 10.0, 50.0, 70.0):
        demand.record(at)
    assert demand.per_minute(75.0) == 2.0  # 50 and 70
    assert demand.per_minute(200.0) == 0.0
