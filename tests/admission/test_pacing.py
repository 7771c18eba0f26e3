"""Batch pacing: batch goes into an engine at the rate it takes sequences in, within a burst;
other classes are never held, and a paced request is let in at the time `ready_at` names."""

from __future__ import annotations

import itertools
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from llmd.admission.capacity import CapacityGate
from llmd.admission.classes import Priority
from llmd.admission.entries import ClassPolicy, Entry
from llmd.admission.pacing import IntakePace
from llmd.admission.pools import PoolCapacity, PoolGate
from llmd.admission.scheduler import Scheduler
from llmd.admission.tenants import Tenant
from llmd.routing.backend import BackendKind

INTERVAL = 0.002
POLICIES = {
    cls: ClassPolicy(queue_size=1000, queue_timeout_s=60.0, aging_s=0.0) for cls in Priority
}


def entry(cls: Priority = Priority.BATCH, seats: int = 1) -> Entry:
    return Entry(Tenant(), cls, cost=10, seats=seats)


# A run of attempts: (seconds since the one before, class, sequences).
attempts = st.lists(
    st.tuples(
        st.floats(0, 0.01, allow_nan=False),
        st.sampled_from(list(Priority)),
        st.integers(1, 4),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(attempts, st.integers(1, 4))
def test_batch_into_an_engine_never_outruns_its_intake(
    steps: list[tuple[float, Priority, int]], burst: int
) -> None:
    """Every request released is counted; batch is released only while the intake's backlog
    (what was released, less one interval per sequence since) leaves room for it within the
    burst, or is empty; interactive and normal are always released."""
    pace = IntakePace(interval_s=INTERVAL, burst=burst)
    now, backlog = 0.0, 0.0  # the model, kept here independently of the pace's own
    for gap, cls, seats in steps:
        backlog = max(0.0, backlog - gap)
        now += gap
        item = entry(cls, seats)
        admitted = pace.admits(item, now)
        if cls is not Priority.BATCH:
            assert admitted
        else:
            fits = backlog + seats * INTERVAL <= burst * INTERVAL + 1e-9
            assert admitted == (fits or backlog <= 1e-9)
        if admitted:
            pace.on_release(item, now)
            backlog += seats * INTERVAL
        assert math.isclose(pace.backlog_s(now), backlog, abs_tol=1e-9)


@settings(max_examples=300, deadline=None)
@given(attempts, st.integers(1, 4), st.integers(1, 4))
def test_a_paced_batch_request_is_let_in_when_ready_at_says(
    steps: list[tuple[float, Priority, int]], burst: int, seats: int
) -> None:
    """Whenever a batch request is refused, `ready_at` names a later time, and at the latest
    after following it twice the request is let in: the admission timer never misses it."""
    pace = IntakePace(interval_s=INTERVAL, burst=burst)
    now = 0.0
    for gap, cls, n in steps:
        now += gap
        if pace.admits(entry(cls, n), now):
            pace.on_release(entry(cls, n), now)
    waiting = entry(Priority.BATCH, seats)
    for _ in range(2):
        if pace.admits(waiting, now):
            return
        ready = pace.ready_at(now)
        assert ready is not None and ready > now
        now = ready
    assert pace.admits(waiting, now)


def test_a_wave_goes_in_at_the_engines_rate_after_its_burst() -> None:
    """Ten batch requests at once: `burst` go in at once, then one per interval."""
    pace = IntakePace(interval_s=INTERVAL, burst=2)
    released = [0.0, 0.0]
    for _ in range(2):
        pace.on_release(entry(), 0.0)
    now = 0.0
    while len(released) < 10:
        assert not pace.admits(entry(), now)
        ready = pace.ready_at(now)
        assert ready is not None
        now = ready
        assert pace.admits(entry(), now)
        pace.on_release(entry(), now)
        released.append(now)
    gaps = [b - a for a, b in itertools.pairwise(released[1:])]
    assert all(math.isclose(gap, INTERVAL) for gap in gaps)


def test_no_pacing_at_zero_interval() -> None:
    """interval_s 0 lets everything in and never asks for a timer."""
    pace = IntakePace()
    for _ in range(100):
        assert pace.admits(entry(seats=4), 0.0)
        pace.on_release(entry(seats=4), 0.0)
    assert pace.ready_at(0.0) is None


def test_an_interactive_request_passes_a_paced_wave_in_the_scheduler() -> None:
    """Batch waiting for the pace does not hold an interactive request that comes after it,
    which is released at once; its release counts in the intake, so batch waits one interval
    more; an overdue (aged) batch request is not paced."""
    capacity = PoolCapacity()
    capacity.add("main", BackendKind.ENGINE, ["m"], CapacityGate(max_in_flight=100))
    capacity.pace("main").interval_s = INTERVAL
    scheduler = Scheduler(POLICIES)
    wave = [entry() for _ in range(10)]
    for item in wave:
        item.model = "m"
        assert scheduler.submit(item, 0.0) is None
    assert scheduler.decide(0.0, PoolGate(capacity, 0.0)).released == wave[:2]
    chat = entry(Priority.INTERACTIVE)
    chat.model = "m"
    assert scheduler.submit(chat, 0.001) is None
    assert scheduler.decide(0.001, PoolGate(capacity, 0.001)).released == [chat]
    ready = capacity.paced_until(0.001)
    assert ready is not None and math.isclose(ready, 2 * INTERVAL)  # not 1: the chat
    assert scheduler.decide(ready, PoolGate(capacity, ready)).released == [wave[2]]
    gate = PoolGate(capacity, ready)
    assert gate.admits(wave[3], overdue=True) == "main"
    assert gate.admits(wave[3], overdue=False) is None


def test_pacing_holds_only_its_own_engine() -> None:
    """With one engine of a pool paced full, batch goes to the other."""
    capacity = PoolCapacity()
    for name in ("a", "b"):
        capacity.add(name, BackendKind.ENGINE, ["m"], CapacityGate(max_in_flight=100))
        capacity.pace(name).interval_s = INTERVAL
    placed = []
    for _ in range(4):
        item = entry()
        choice = capacity.admits(item, False, 0.0, "m", None)
        assert choice is not None
        capacity.on_release(item, choice.backend, 0.0, "m")
        placed.append(choice.backend)
    assert sorted(placed) == ["a", "a", "b", "b"]
    assert capacity.admits(entry(), False, 0.0, "m", None) is None
