"""The scheduler core, by properties: limits hold, cancelled entries never run, batch work is
not starved past the stated bound, weights are respected, the engine is never left idle."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmd.admission.capacity import CapacityGate, EngineLoad
from llmd.admission.classes import Priority
from llmd.admission.entries import ClassPolicy, Decisions, Entry, Reason, State
from llmd.admission.scheduler import QUANTUM_TOKENS, Scheduler
from llmd.admission.tenants import Tenant

POLICIES = {
    Priority.INTERACTIVE: ClassPolicy(queue_size=8, queue_timeout_s=5.0, aging_s=0.0),
    Priority.NORMAL: ClassPolicy(queue_size=8, queue_timeout_s=20.0, aging_s=2.0),
    Priority.BATCH: ClassPolicy(queue_size=8, queue_timeout_s=60.0, aging_s=4.0),
}
TENANTS = [
    Tenant("a", max_concurrency=2, max_queued=5, weight=1.0),
    Tenant("b", max_concurrency=0, max_queued=0, weight=3.0),
    Tenant("c", max_concurrency=1, max_queued=2, weight=0.5),
]


def aged_policies(aging: float) -> dict[Priority, ClassPolicy]:
    """Unbounded queues without timeouts; normal and batch age after `aging` seconds."""
    return {
        Priority.INTERACTIVE: ClassPolicy(100_000, 1e9, 0.0),
        Priority.NORMAL: ClassPolicy(100_000, 1e9, aging),
        Priority.BATCH: ClassPolicy(100_000, 1e9, aging),
    }


@dataclasses.dataclass
class SlotGate:
    """A gate with `slots` engine slots; admits anything when nothing is in flight."""

    slots: int
    in_flight: int = 0

    def admits(self, entry: Entry, overdue: bool) -> str | None:
        return "engine" if self.in_flight == 0 or self.in_flight < self.slots else None

    def on_release(self, entry: Entry, backend: str) -> None:
        self.in_flight += 1

    def on_finish(self, entry: Entry) -> None:
        self.in_flight -= 1


@dataclasses.dataclass
class PoolGates:
    """One gate per pool (`entry.model`): a pool's refusal holds only its own entries."""

    gates: dict[str, SlotGate]

    def admits(self, entry: Entry, overdue: bool) -> str | None:
        return entry.model if self.gates[entry.model].admits(entry, overdue) else None

    def on_release(self, entry: Entry, backend: str) -> None:
        assert backend == entry.model
        self.gates[backend].on_release(entry, backend)

    def on_finish(self, entry: Entry) -> None:
        self.gates[entry.model].on_finish(entry)


def pool_slots(slots: dict[str, int]) -> PoolGates:
    """A SlotGate of `slots[pool]` slots per pool."""
    return PoolGates({pool: SlotGate(n) for pool, n in slots.items()})


POOLS = ["small", "big"]
submit = st.tuples(
    st.just("submit"),
    st.sampled_from(TENANTS),
    st.sampled_from(list(Priority)),
    st.integers(1, 3000),
    st.one_of(st.none(), st.floats(0.1, 30.0)),
    st.sampled_from(POOLS),
)
action = st.one_of(
    submit,
    st.tuples(st.just("cancel"), st.integers(0, 1000)),
    st.tuples(st.just("finish"), st.integers(0, 1000)),
    st.tuples(st.just("tick"), st.floats(0.0, 5.0)),
)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 4), st.integers(1, 3), st.lists(action, max_size=120))
def test_limits_hold_and_cancelled_entries_never_run(
    slots: int,
    big_slots: int,
    actions: list[tuple],  # type: ignore[type-arg]
) -> None:
    """Under any sequence of submits (to two pools), cancels, finishes and time: tenant
    concurrency and queue limits, class queue sizes and each pool's slots hold; cancelled or
    rejected entries are never released; nothing queued outlives its timeout; work never waits
    on an idle pool, whatever the other pool holds (but for a tenant at its concurrency)."""
    scheduler = Scheduler(POLICIES)
    gate = pool_slots({"small": slots, "big": big_slots})
    now = 0.0
    entries: list[Entry] = []
    released: list[Entry] = []
    for act in actions:
        if act[0] == "submit":
            _, tenant, cls, cost, deadline, pool = act
            deadline = None if deadline is None else now + deadline
            entry = Entry(tenant, cls, cost, deadline=deadline, model=pool)
            rejection = scheduler.submit(entry, now)
            if rejection is not None:
                assert rejection.reason in (Reason.RATE_LIMITED, Reason.QUEUE_FULL)
                assert rejection.retry_after_s >= 1
            entries.append(entry)
        elif act[0] == "cancel" and entries:
            entry = entries[act[1] % len(entries)]
            was_queued = entry.state is State.QUEUED
            assert scheduler.cancel(entry) == was_queued
        elif act[0] == "finish":
            running = [e for e in released if e.state is State.RELEASED]
            if running:
                entry = running[act[1] % len(running)]
                scheduler.finish(entry)
                gate.on_finish(entry)
        elif act[0] == "tick":
            now += act[1]
        decisions = scheduler.decide(now, gate)
        for entry in decisions.released:
            assert entry.state is State.RELEASED
            released.append(entry)
        for rejection in decisions.rejected:
            assert rejection.reason in (Reason.QUEUE_TIMEOUT, Reason.DEADLINE)
            assert rejection.entry.state is State.REJECTED
        running = [e for e in released if e.state is State.RELEASED]
        for pool, pool_gate in gate.gates.items():
            on_pool = [e for e in running if e.model == pool]
            assert all(e.backend == pool for e in on_pool)
            assert pool_gate.in_flight == len(on_pool) <= pool_gate.slots
        for tenant in TENANTS:
            mine = [e for e in running if e.tenant is tenant]
            assert not tenant.max_concurrency or len(mine) <= tenant.max_concurrency
            queued = [e for e in scheduler.entries() if e.tenant is tenant]
            assert not tenant.max_queued or len(queued) <= tenant.max_queued
        for cls in Priority:
            assert scheduler.queued(cls) <= POLICIES[cls].queue_size
        for entry in scheduler.entries():
            assert entry.state is State.QUEUED
            assert now - entry.enqueued_at < POLICIES[entry.cls].queue_timeout_s
            assert entry.deadline is None or entry.deadline > now
        for pool, pool_gate in gate.gates.items():
            waiting = [e for e in scheduler.entries() if e.model == pool]
            if any(scheduler.in_flight[e.tenant.name] < (e.tenant.max_concurrency or 10**9)
                   for e in waiting):  # fmt: skip
                assert pool_gate.in_flight > 0, f"work waits while pool {pool} is idle"
    assert len({id(e) for e in released}) == len(released)
    assert all(e.state in (State.RELEASED, State.FINISHED) for e in released)


def release_bound(aging: float, dt: float) -> float:
    """The scheduler docstring's wait per batch release under interactive load, with one
    release opportunity every `dt` s: aging_s + one opportunity while opportunities come more
    often than every aging_s (else interactive, passed by batch at one opportunity, has gone
    2 x dt, its hold time, at the next), else the hold time (2 x aging_s) + one opportunity per
    class held (interactive, then batch itself). The j-th batch request waits (j + 1) times
    that."""
    hold = 2 * aging
    return aging + dt if dt < aging else hold + 2 * dt


@settings(max_examples=200, deadline=None)
@given(
    aging=st.floats(0.5, 10.0),
    dt=st.floats(0.05, 3.0),
    batch_count=st.integers(1, 5),
    interactive_per_step=st.integers(2, 5),
    slots=st.integers(1, 3),
)
def test_batch_gets_a_release_every_aging_interval_under_interactive_load(
    aging: float, dt: float, batch_count: int, interactive_per_step: int, slots: int
) -> None:
    """Under continuous interactive load (more than the engine takes), the j-th batch request
    is released within the docstring's bound (`release_bound`)."""
    bound = release_bound(aging, dt)
    scheduler = Scheduler(aged_policies(aging))
    gate = SlotGate(slots)
    user, batcher = Tenant("user"), Tenant("batcher")
    batch = [Entry(batcher, Priority.BATCH, 500) for _ in range(batch_count)]
    for entry in batch:
        scheduler.submit(entry, 0.0)
    now = 0.0
    running: list[Entry] = []
    for _ in range(int((batch_count + 1) * (aging / dt + 2)) + 10):
        for _ in range(interactive_per_step):
            scheduler.submit(Entry(user, Priority.INTERACTIVE, 50), now)
        if running:  # one request ends per step: one release opportunity
            done = running.pop(0)
            scheduler.finish(done)
            gate.on_finish(done)
        running.extend(scheduler.decide(now, gate).released)
        for j, entry in enumerate(batch):
            if entry.state is State.QUEUED:
                assert now < (j + 1) * bound + 1e-9, (j, now)
        now += dt
    assert all(e.state is not State.QUEUED for e in batch)


@settings(max_examples=100, deadline=None)
@given(
    weights=st.lists(st.sampled_from([0.5, 1.0, 2.0, 4.0]), min_size=2, max_size=4),
    costs=st.lists(st.integers(1, 4000), min_size=50, max_size=50),
)
def test_backlogged_tenants_get_tokens_in_proportion_to_weights(
    weights: list[float], costs: list[int]
) -> None:
    """Tenants that always have work in one class get tokens proportional to their weights,
    within DRR's bound (one quantum plus one largest request per tenant)."""
    tenants = [Tenant(f"t{i}", weight=w) for i, w in enumerate(weights)]
    policies = {cls: ClassPolicy(100_000, 1e9, 0.0) for cls in Priority}
    scheduler = Scheduler(policies)
    gate = SlotGate(1)
    served = {t.name: 0 for t in tenants}
    next_cost = {t.name: 0 for t in tenants}
    queued = {t.name: 0 for t in tenants}  # each tenant's entries in the scheduler

    def refill(tenant: Tenant) -> None:
        while queued[tenant.name] < 3:
            cost = costs[next_cost[tenant.name] % len(costs)]
            next_cost[tenant.name] += 1
            scheduler.submit(Entry(tenant, Priority.NORMAL, cost), 0.0)
            queued[tenant.name] += 1

    for _ in range(2000):
        for tenant in tenants:
            refill(tenant)
        (entry,) = scheduler.decide(0.0, gate).released
        queued[entry.tenant.name] -= 1
        served[entry.tenant.name] += entry.cost
        scheduler.finish(entry)
        gate.on_finish(entry)
    normalised = {t.name: served[t.name] / t.weight for t in tenants}
    slack = {t.name: (QUANTUM_TOKENS * t.weight + 4000) / t.weight for t in tenants}
    for a in tenants:
        for b in tenants:
            gap = abs(normalised[a.name] - normalised[b.name])
            assert gap <= slack[a.name] + slack[b.name], (served, weights)


def test_tenant_at_its_concurrency_does_not_block_others() -> None:
    """A tenant at max_concurrency keeps its entries queued while other tenants' run."""
    scheduler = Scheduler(POLICIES)
    gate = SlotGate(10)
    limited, other = Tenant("limited", max_concurrency=1), Tenant("other")
    for tenant in (limited, limited, other):
        scheduler.submit(Entry(tenant, Priority.INTERACTIVE, 10), 0.0)
    released = scheduler.decide(0.0, gate).released
    assert sorted(e.tenant.name for e in released) == ["limited", "other"]
    assert scheduler.queued() == 1


def test_a_grace_lengthens_the_class_timeout_but_not_a_deadline() -> None:
    """An entry with `grace_s` (the predicted wake of the asleep engine it came for) expires its
    class's timeout plus the grace after it was queued; its own deadline still holds."""
    scheduler = Scheduler(POLICIES)
    gate = SlotGate(1)
    scheduler.submit(Entry(Tenant("x"), Priority.INTERACTIVE, 10), 0.0)
    scheduler.decide(0.0, gate)
    waking = Entry(Tenant("x"), Priority.INTERACTIVE, 10, grace_s=3.0)
    scheduler.submit(waking, 0.0)
    assert scheduler.next_expiry() == 8.0
    assert not scheduler.decide(7.9, gate).rejected
    (late,) = scheduler.decide(8.0, gate).rejected
    assert late.entry is waking and late.reason is Reason.QUEUE_TIMEOUT
    hurried = Entry(Tenant("x"), Priority.INTERACTIVE, 10, deadline=10.0, grace_s=30.0)
    scheduler.submit(hurried, 8.0)
    assert scheduler.next_expiry() == 10.0


def test_queue_timeout_and_deadline_reject_with_retry_after() -> None:
    """A queued entry past its class timeout or its deadline is rejected, with Retry-After."""
    scheduler = Scheduler(POLICIES)
    gate = SlotGate(1)
    busy = Entry(Tenant("x"), Priority.INTERACTIVE, 10)
    scheduler.submit(busy, 0.0)
    scheduler.decide(0.0, gate)
    late = Entry(Tenant("x"), Priority.INTERACTIVE, 10)
    hurried = Entry(Tenant("x"), Priority.BATCH, 10, deadline=1.0)
    scheduler.submit(late, 0.0)
    scheduler.submit(hurried, 0.0)
    assert scheduler.next_expiry() == 1.0
    (first,) = scheduler.decide(1.0, gate).rejected
    assert first.entry is hurried and first.reason is Reason.DEADLINE
    (second,) = scheduler.decide(5.0, gate).rejected
    assert second.entry is late and second.reason is Reason.QUEUE_TIMEOUT
    assert second.retry_after_s >= 1


def test_head_of_line_is_not_passed_when_the_gate_refuses() -> None:
    """When the gate refuses the next entry, nothing behind it is released instead."""

    class Tokens(SlotGate):
        def admits(self, entry: Entry, overdue: bool) -> str | None:
            return "engine" if self.in_flight == 0 or entry.cost <= 100 else None

    scheduler = Scheduler(POLICIES)
    gate = Tokens(10)
    tenant = Tenant("t")
    big, small = Entry(tenant, Priority.NORMAL, 1000), Entry(tenant, Priority.NORMAL, 10)
    running = Entry(tenant, Priority.INTERACTIVE, 10)
    for entry in (running, big, small):
        scheduler.submit(entry, 0.0)
    released = scheduler.decide(0.0, gate).released
    assert released == [running]
    scheduler.finish(running)
    gate.on_finish(running)
    assert scheduler.decide(0.0, gate).released == [big, small]


@settings(max_examples=150, deadline=None)
@given(
    aging=st.floats(0.5, 10.0),
    dt=st.floats(0.05, 3.0),
    batch_count=st.integers(1, 4),
    slots=st.integers(1, 3),
)
def test_the_aging_bound_holds_per_pool_while_another_pool_serves_the_class(
    aging: float, dt: float, batch_count: int, slots: int
) -> None:
    """Batch requests for a pool flooded by interactive work are released within the
    docstring's bound (`release_bound`), even while batch requests for another pool are
    released all the time (they do not reset its clock)."""
    bound = release_bound(aging, dt)
    policies = {
        Priority.INTERACTIVE: ClassPolicy(100_000, 1e9, 0.0),
        Priority.NORMAL: ClassPolicy(100_000, 1e9, aging),
        Priority.BATCH: ClassPolicy(100_000, 1e9, aging),
    }
    scheduler = Scheduler(policies)
    gate = pool_slots({"a": slots, "b": 10**6})
    user, batcher = Tenant("user"), Tenant("batcher")
    batch = [Entry(batcher, Priority.BATCH, 500, model="a") for _ in range(batch_count)]
    for entry in batch:
        scheduler.submit(entry, 0.0)
    now = 0.0
    running: list[Entry] = []
    for _ in range(int((batch_count + 1) * (aging / dt + 2)) + 10):
        for _ in range(3):
            scheduler.submit(Entry(user, Priority.INTERACTIVE, 50, model="a"), now)
        scheduler.submit(Entry(batcher, Priority.BATCH, 500, model="b"), now)
        on_a = [e for e in running if e.model == "a"]
        if on_a:  # one request of pool a ends per step: one release opportunity there
            scheduler.finish(on_a[0])
            gate.on_finish(on_a[0])
            running.remove(on_a[0])
        released = scheduler.decide(now, gate).released
        assert any(e.model == "b" for e in released)  # the batch class is served on b
        running.extend(e for e in released if e.model == "a")
        for j, entry in enumerate(batch):
            if entry.state is State.QUEUED:
                assert now < (j + 1) * bound + 1e-9, (j, now)
        now += dt
    assert all(e.state is not State.QUEUED for e in batch)


def test_a_full_pool_holds_only_its_own_entries_in_fifo_order() -> None:
    """A refusal for one pool lets the same tenant's later entries for another pool go; the
    held ones keep their order for when their pool has room."""
    scheduler = Scheduler(POLICIES)
    gate = pool_slots({"big": 1, "small": 10})
    tenant = Tenant("t")
    running = Entry(tenant, Priority.NORMAL, 10, model="big")
    big1, small1, big2, small2 = (
        Entry(tenant, Priority.NORMAL, 10, model=m) for m in ("big", "small", "big", "small")
    )
    for entry in (running, big1, small1, big2, small2):
        scheduler.submit(entry, 0.0)
    assert scheduler.decide(0.0, gate).released == [running, small1, small2]
    assert (small1.backend, big1.backend) == ("small", None)
    scheduler.finish(running)
    gate.on_finish(running)
    assert scheduler.decide(0.0, gate).released == [big1]


def test_an_oversized_batch_request_does_not_stall_interactive_ones() -> None:
    """The issue's case: KV 65,536 tokens, one 1,000-token request running, a batch request
    with n = 16, prompt 2,000 and max_tokens 2,048 queued at t = 1. Once it is overdue and
    refused, interactive requests arriving at t = 20 are still released; it is held from
    t = 31 (2 x aging_s), and goes as soon as the engine is idle."""
    policies = {
        Priority.INTERACTIVE: ClassPolicy(256, 1e9, 0.0),
        Priority.NORMAL: ClassPolicy(1024, 1e9, 5.0),
        Priority.BATCH: ClassPolicy(4096, 1e9, 15.0),
    }
    scheduler = Scheduler(policies)
    gate = OneEngine(CapacityGate(max_in_flight=128, load=EngineLoad(kv_tokens=65_536)))
    user, jobs = Tenant("user"), Tenant("jobs")
    running = Entry(user, Priority.INTERACTIVE, 1_000)
    scheduler.submit(running, 0.0)
    assert scheduler.decide(0.0, gate).released == [running]
    big = Entry(jobs, Priority.BATCH, (2_000 + 2_048) * 16, seats=16)
    scheduler.submit(big, 1.0)
    assert scheduler.decide(16.0, gate).refused == [big]  # does not fit beside `running`
    late = [Entry(user, Priority.INTERACTIVE, 500) for _ in range(3)]
    for entry in late:
        scheduler.submit(entry, 20.0)
    decisions = scheduler.decide(20.0, gate)
    assert decisions.refused == [big] and decisions.held == []  # overdue, refused, passed
    assert decisions.released == late
    blocked = Entry(user, Priority.INTERACTIVE, 10)
    scheduler.submit(blocked, 31.0)
    held = scheduler.decide(31.0, gate)
    assert held.held == [big] and held.released == []  # 2 x aging_s: nothing passes it now
    for entry in [running, *late]:
        scheduler.finish(entry)
        gate.gate.on_finish(entry)
    assert scheduler.decide(32.0, gate).released == [big]  # the idle engine takes it first
    assert blocked.state is State.QUEUED


@dataclasses.dataclass
class SizedGate(SlotGate):
    """A gate with `slots` seats that refuses an entry costing more than `room` unless the
    engine is idle (a request too big to fit beside others), and counts seats per entry."""

    room: int = 1000

    def admits(self, entry: Entry, overdue: bool) -> str | None:
        if self.in_flight == 0:
            return "engine"
        fits = self.in_flight + entry.seats <= self.slots and entry.cost <= self.room
        return "engine" if fits else None

    def on_release(self, entry: Entry, backend: str) -> None:
        self.in_flight += entry.seats

    def on_finish(self, entry: Entry) -> None:
        self.in_flight -= entry.seats


@settings(max_examples=200, deadline=None)
@given(
    aging=st.floats(0.5, 5.0),
    dt=st.floats(0.05, 0.5),
    duration=st.integers(1, 6),
    slots=st.integers(2, 6),
    arrivals=st.lists(
        st.tuples(
            st.sampled_from(list(Priority)),
            st.booleans(),
            st.integers(1, 3),
            st.sampled_from(POOLS),
        ),
        min_size=1,
        max_size=200,
    ),
)
def test_a_refused_pick_holds_back_only_its_class_and_below_on_its_pool_for_a_bounded_time(
    aging: float,
    dt: float,
    duration: int,
    slots: int,
    arrivals: list[tuple[Priority, bool, int, str]],
) -> None:
    """Under any mix of small and big (fit only on an idle engine) requests for two pools,
    each running `duration` steps: after every decision, a class with work left on a pool is
    held back only by a refused pick of its own class or one above on that pool, or by a held
    pick on that pool; a pick is held only once its class has gone its hold time (2 x aging_s)
    on its pool without a release there; and every request is released within its hold time
    plus one drain (the longest request running) per class held before it, its own included,
    per request of its class and pool ahead of it and for itself."""
    scheduler = Scheduler(aged_policies(aging))
    gate = PoolGates({pool: SizedGate(slots) for pool in POOLS})
    tenant = Tenant("t")
    running: list[tuple[int, Entry]] = []  # (ends at step, entry)
    queued_at: dict[Entry, float] = {}
    ahead: dict[Entry, int] = {}
    step = 0
    pending = list(arrivals)
    while pending or scheduler.queued() or running:
        now = step * dt
        if pending:  # one arrival per step
            cls, big, seats, pool = pending.pop(0)
            entry = Entry(tenant, cls, 5000 if big else 10, seats=seats, model=pool)
            ahead[entry] = scheduler.classes[cls].pools[pool]
            scheduler.submit(entry, now)
            queued_at[entry] = now
        for ends, entry in [r for r in running if r[0] <= step]:
            running.remove((ends, entry))
            scheduler.finish(entry)
            gate.on_finish(entry)
        decisions = scheduler.decide(now, gate)
        for entry in decisions.released:
            running.append((step + duration, entry))
            # Per request ahead in its class, then its own turn: its hold time (2 x aging_s)
            # and one drain per class held before it (three at most), each drain being the
            # longest request then running, at this simulation's step granularity.
            drain = (duration + 1) * dt
            bound = (ahead[entry] + 1) * (2 * aging + 3 * drain + dt)
            wait = now - queued_at[entry]
            assert wait <= bound + 1e-9, (entry, wait, bound)
        for held in decisions.held:  # hold time: 2 x aging_s (the shortest, for the top)
            waited = now - scheduler.classes[held.cls].waiting_since[held.model]
            assert waited >= 2 * aging - 1e-9
        held_pools = {held.model for held in decisions.held}
        for cls in Priority:
            for pool in POOLS:
                if scheduler.classes[cls].pools[pool] and pool not in held_pools:
                    refusals = [r for r in decisions.refused if r.model == pool]
                    assert any(r.cls <= cls for r in refusals), (cls, pool, decisions)
        for entry in decisions.refused:
            assert entry.state is State.QUEUED
        step += 1
        assert step < 100_000


@dataclasses.dataclass
class OneEngine:
    """llmd/admission/capacity.py's gate as the scheduler's Gate of one backend, "engine"."""

    gate: CapacityGate

    def admits(self, entry: Entry, overdue: bool) -> str | None:
        return "engine" if self.gate.admits(entry, overdue) else None

    def on_release(self, entry: Entry, backend: str) -> None:
        self.gate.on_release(entry)


def test_a_held_pick_stops_only_its_own_pool() -> None:
    """A batch pick held on pool "big" (its hold time passed, it does not fit beside what
    runs) stops every release on "big", interactive included, while "small" serves on."""
    scheduler = Scheduler(aged_policies(1.0))
    gate = PoolGates({pool: SizedGate(4) for pool in POOLS})
    tenant = Tenant("t")
    running = Entry(tenant, Priority.INTERACTIVE, 10, model="big")
    scheduler.submit(running, 0.0)
    assert scheduler.decide(0.0, gate).released == [running]
    huge = Entry(tenant, Priority.BATCH, 5000, model="big")
    scheduler.submit(huge, 0.0)
    later = [Entry(tenant, Priority.INTERACTIVE, 10, model=m) for m in ("big", "small")]
    for entry in later:
        scheduler.submit(entry, 2.5)
    decisions = scheduler.decide(2.5, gate)
    assert decisions.held == [huge] and decisions.released == [later[1]]
    assert later[0].state is State.QUEUED


def test_a_pass_looks_for_no_pick_once_nothing_is_queued(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With no entry waiting (a request's finish, mostly) `decide` looks for no pick; with
    one waiting it looks once, releases it, and looks no further."""
    sched = Scheduler(POLICIES)
    looked: list[float] = []
    pick = sched._next

    def counted(now: float, blocked: Any) -> Any:
        looked.append(now)
        return pick(now, blocked)

    monkeypatch.setattr(sched, "_next", counted)
    gate = SlotGate(1)
    assert sched.decide(0.0, gate) == Decisions() and looked == []
    entry = Entry(TENANTS[0], Priority.NORMAL, cost=10)
    assert sched.submit(entry, 1.0) is None
    assert sched.decide(1.0, gate).released == [entry]
    assert looked == [1.0]
