"""The device hold: engines sharing a device form groups; batch is kept off an engine while an
interactive request waits for its first token on another engine of its group, never across
groups, never past the bound, and never at the cost of an interactive or normal release; and
while interactive work is present in a group, batch runs at most `batch_seats` at a time on
its other engines, never fewer, and never once that work has been gone LINGER_S."""

from __future__ import annotations

import copy
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmd.admission.capacity import CapacityGate
from llmd.admission.classes import Priority
from llmd.admission.entries import ClassPolicy, Entry, State
from llmd.admission.holds import DeviceHolds
from llmd.admission.pools import PoolCapacity, PoolGate
from llmd.admission.scheduler import Scheduler
from llmd.admission.sharing import LINGER_S, DeviceHold, HoldGate, device_groups
from llmd.admission.tenants import Tenant
from llmd.config import AdmissionConfig, ClassConfig, Config, EngineConfig
from llmd.routing.backend import BackendKind

ENGINES = ("a", "b", "c", "d", "e")
KEYS = ("gpu:0", "gpu:1", "device:cpu")
POLICIES = {
    Priority.INTERACTIVE: ClassPolicy(queue_size=1000, queue_timeout_s=600.0, aging_s=0.0),
    Priority.NORMAL: ClassPolicy(queue_size=1000, queue_timeout_s=600.0, aging_s=5.0),
    Priority.BATCH: ClassPolicy(queue_size=1000, queue_timeout_s=600.0, aging_s=15.0),
}
# Pools (model -> engines): `mix` spans a group and an engine outside it.
POOLS = {"chat": ("a",), "embed": ("b",), "mix": ("c", "d"), "solo": ("e",)}
TENANTS = (Tenant("t1"), Tenant("t2"))

devices_st = st.dictionaries(
    st.sampled_from(ENGINES), st.frozensets(st.sampled_from(KEYS), max_size=2), min_size=1
)


@settings(max_examples=300, deadline=None)
@given(devices_st)
def test_groups_are_the_engines_linked_by_a_shared_device(
    devices: dict[str, frozenset[str]],
) -> None:
    """Two engines with a device in common are in one group; a group is connected by shared
    devices; an engine sharing with none is in none; groups partition their engines."""
    groups = device_groups(devices)
    for one, other in itertools.permutations(devices, 2):
        if devices[one] & devices[other]:
            assert groups[one] == groups[other] and {one, other} <= groups[one]
    for name, group in groups.items():
        assert name in group and len(group) > 1
        assert all(groups[member] == group for member in group)
        reached, frontier = {name}, [name]
        while frontier:
            here = frontier.pop()
            for other in group - reached:
                if devices[here] & devices[other]:
                    reached.add(other)
                    frontier.append(other)
        assert reached == group
    for name in set(devices) - set(groups):
        assert not any(devices[name] & devices[o] for o in devices if o != name)


@settings(max_examples=300, deadline=None)
@given(devices_st, st.lists(st.sampled_from(ENGINES), max_size=6), st.floats(0.0, 2.0))
def test_only_the_other_engines_of_a_waiting_engines_group_are_held(
    devices: dict[str, frozenset[str]], waiting: list[str], bound_s: float
) -> None:
    """An engine is held exactly when an interactive request waits on another engine of its
    group (and the bound is above 0); the engine named as the reason is such a one."""
    hold = DeviceHold(device_groups(devices), bound_s)
    held = hold.held(waiting)
    for name in ENGINES:
        group = hold.groups.get(name, frozenset())
        cause = {w for w in waiting if w != name and w in group}
        assert (name in held) == (bool(cause) and bound_s > 0)
        if name in held:
            assert held[name] in cause


@given(st.sampled_from(Priority), st.booleans(), st.floats(0.0, 5.0), st.floats(0.0, 2.0))
def test_only_young_batch_picks_released_without_aging_are_kept_off(
    cls: Priority, overdue: bool, wait_s: float, bound_s: float
) -> None:
    """The hold applies to batch picks only, never to one released by aging, and never once
    its pool's oldest batch request has waited the bound."""
    hold = DeviceHold({"a": frozenset("ab"), "b": frozenset("ab")}, bound_s)
    expected = cls is Priority.BATCH and not overdue and wait_s < bound_s
    assert hold.applies(cls, overdue, wait_s) == expected


def fleet(seats: int) -> PoolCapacity:
    capacity = PoolCapacity()
    for model, names in POOLS.items():
        for name in names:
            capacity.add(name, BackendKind.ENGINE, [model], CapacityGate(max_in_flight=seats))
    return capacity


queued_st = st.lists(
    st.tuples(
        st.sampled_from(Priority),
        st.sampled_from(tuple(POOLS)),
        st.sampled_from(TENANTS),
        st.floats(0.0, 2.0),  # how long ago it was queued (s)
        st.integers(1, 400),  # cost
    ),
    max_size=14,
)
NOW = 100.0
TICK = 1e-6  # a timer fires a little after the time it is set for


def queue(scheduler: Scheduler, queued: list[tuple[Priority, str, Tenant, float, int]]) -> None:
    for cls, pool, tenant, ago, cost in sorted(queued, key=lambda q: -q[3]):
        entry = Entry(tenant, cls, cost, model=pool)
        assert scheduler.submit(entry, NOW - ago) is None


def one_pass(
    queued: list[tuple[Priority, str, Tenant, float, int]],
    seats: int,
    holds: DeviceHolds | None,
    awaiting: list[str],
    running: list[str] = [],  # noqa: B006 (read only)
) -> tuple[list[tuple[int, str | None]], HoldGate | None]:
    """One scheduler pass over `queued` with `awaiting` interactive requests sent and not
    answered yet, and a batch request running on each engine of `running` (each takes a seat
    of its gate too); the (seq, backend) released and the pass's hold gate."""
    scheduler, capacity = Scheduler(POLICIES), fleet(seats + len(running))
    queue(scheduler, queued)
    gate = inner = PoolGate(capacity, NOW)
    if holds is not None:
        holds = copy.deepcopy(holds)
        sent = [Entry(TENANTS[0], Priority.INTERACTIVE, 1, backend=b) for b in awaiting]
        sent += [Entry(TENANTS[1], Priority.BATCH, 1, backend=b) for b in running]
        holds.released(sent)
        gate = holds.gate(inner, scheduler, capacity, NOW)
    decisions = scheduler.decide(NOW, gate)
    found = gate if isinstance(gate, HoldGate) else None
    return [(e.seq, e.backend) for e in decisions.released], found


def pump_at(
    holds: DeviceHolds, scheduler: Scheduler, capacity: PoolCapacity, at: float
) -> list[Entry]:
    """One pump at `at`, as Admission.pump runs it: the hold's gate, a scheduler pass, the
    hold told what was released; the entries released."""
    gate = holds.gate(PoolGate(capacity, at), scheduler, capacity, at)
    released = scheduler.decide(at, gate).released
    holds.decided(released)
    return released


def holds_for(
    devices: dict[str, frozenset[str]], bound_s: float, batch_seats: int = 0
) -> DeviceHolds:
    holds = DeviceHolds()
    holds.hold = DeviceHold(device_groups(devices), bound_s, batch_seats)
    return holds


@settings(max_examples=300, deadline=None)
@given(
    devices_st,
    queued_st,
    st.lists(st.sampled_from(ENGINES), max_size=3),
    st.integers(1, 4),
    st.floats(0.0, 3.0),
    st.integers(0, 2),
    st.lists(st.sampled_from(ENGINES), max_size=3),
)
def test_a_pass_releases_the_same_interactive_and_normal_requests_with_or_without_the_hold(
    devices: dict[str, frozenset[str]],
    queued: list[tuple[Priority, str, Tenant, float, int]],
    awaiting: list[str],
    seats: int,
    bound_s: float,
    batch_seats: int,
    running: list[str],
) -> None:
    """Interactive and normal requests go as they would without the hold (same requests, same
    backends); a batch request the hold kept back was younger than the bound, on a pool with a
    held engine, or on a pool with an engine out of batch seats; and with neither in a batch
    pool, nothing changes at all."""
    plain, _ = one_pass(queued, seats, None, awaiting, running)
    holds = holds_for(devices, bound_s, batch_seats)
    held, gate = one_pass(queued, seats, holds, awaiting, running)
    kinds = {seq: cls for seq, (cls, *_) in enumerate(sorted(queued, key=lambda q: -q[3]), 1)}
    not_batch = [r for r in plain if kinds[r[0]] is not Priority.BATCH]
    assert not_batch == [r for r in held if kinds[r[0]] is not Priority.BATCH]
    if gate is None:
        assert held == plain
        return
    full = {name for name, left in gate.seats_left.items() if left <= 0}
    for entry in gate.refused:
        assert entry.cls is Priority.BATCH
        young_and_held = NOW - entry.enqueued_at < bound_s and set(POOLS[entry.model]) & gate.held
        assert young_and_held or set(POOLS[entry.model]) & full
    for seq, backend in held:
        if kinds[seq] is Priority.BATCH and backend in gate.held:
            entry_pool = next(m for m, names in POOLS.items() if backend in names)
            assert gate.waits[entry_pool] >= bound_s  # released there only past the bound
    batch_pools = {pool for cls, pool, *_ in queued if cls is Priority.BATCH}
    touched = gate.held | set(gate.seats_left)
    if not any(set(POOLS[pool]) & touched for pool in batch_pools):
        assert held == plain


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(st.floats(0.0, 3.0), st.sampled_from(("embed", "mix"))), max_size=12),
    st.floats(0.05, 1.0),
)
def test_no_batch_request_waits_on_the_hold_past_its_bound(
    arrivals: list[tuple[float, str]], bound_s: float
) -> None:
    """With an interactive request on `a` that never gets its first token and seats to spare,
    each batch request for `b` (a's device) or `mix` (c shares it, d does not) is released at
    most the bound after it was queued, pumping only on arrivals and at the hold's lapse."""
    devices = {"a": frozenset({"gpu:0"}), "b": frozenset({"gpu:0"}), "c": frozenset({"gpu:0"})}
    holds = holds_for(devices, bound_s)
    scheduler, capacity = Scheduler(POLICIES), fleet(seats=100)
    holds.released([Entry(TENANTS[0], Priority.INTERACTIVE, 1, backend="a")])
    entries = []
    events = sorted(arrivals)

    def pump(at: float) -> None:
        pump_at(holds, scheduler, capacity, at)

    for at, pool in events:
        while holds.lapse_at is not None and holds.lapse_at + TICK <= at:
            pump(holds.lapse_at + TICK)
        entry = Entry(TENANTS[0], Priority.BATCH, 10, model=pool)
        scheduler.submit(entry, at)
        entries.append(entry)
        pump(at)
    while holds.lapse_at is not None:
        pump(holds.lapse_at + TICK)
    for entry in entries:
        assert entry.state is State.RELEASED and entry.released_at is not None
        assert entry.released_at - entry.enqueued_at <= bound_s + 2 * TICK
        if entry.model == "embed" and entry.released_at > entry.enqueued_at:
            assert holds.holds > 0


def test_the_hold_follows_the_first_byte_and_counts_each_held_request_once() -> None:
    """An interactive request on `chat` holds a batch one for `embed` (same device) until its
    first byte; the held request counts once however many pumps pass; status says why."""
    engine = EngineConfig(kind="sim", model="m", device="gpu0")
    config = Config(
        engines={"chat": engine, "embed": engine, "other": EngineConfig(kind="sim", model="m")},
        admission=AdmissionConfig(
            device_hold_ratio=0.5,
            interactive=ClassConfig(aging_s=0.0, ttft_p95_budget_ms=2000.0),
        ),
    )
    holds = DeviceHolds()
    holds.configure(config)
    assert holds.hold.bound_s == 1.0 and set(holds.hold.groups) == {"chat", "embed"}
    scheduler, capacity = Scheduler(POLICIES), PoolCapacity()
    capacity.add("chat", BackendKind.ENGINE, ["tiny"], CapacityGate(max_in_flight=4))
    capacity.add("embed", BackendKind.ENGINE, ["tiny-embed"], CapacityGate(max_in_flight=4))
    chat = Entry(TENANTS[0], Priority.INTERACTIVE, 10, model="tiny")
    batch = Entry(TENANTS[0], Priority.BATCH, 10, model="tiny-embed")

    def pump(now: float) -> list[Entry]:
        return pump_at(holds, scheduler, capacity, now)

    scheduler.submit(chat, 0.0)
    scheduler.submit(batch, 0.0)
    assert pump(0.0) == [chat] and holds.held == {"embed": "chat"}
    assert pump(0.1) == [] and holds.holds == 1 and holds.lapse_at == 1.0
    status = holds.as_snapshot(0.1)
    assert (
        status is not None and status.held == ("embed",) and status.groups == (("chat", "embed"),)
    )
    assert "first token on chat" in status.reasons[0]
    assert holds.first_byte(chat) and not holds.first_byte(chat)
    assert pump(0.2) == [batch] and holds.held == {} and holds.holds == 1


@settings(max_examples=300, deadline=None)
@given(
    devices_st,
    queued_st,
    st.lists(st.sampled_from(ENGINES), min_size=1, max_size=3),
    st.integers(1, 3),
    st.lists(st.sampled_from(ENGINES), max_size=4),
)
def test_the_seat_limit_keeps_batch_at_its_seats_beside_interactive_work_and_never_below(
    devices: dict[str, frozenset[str]],
    queued: list[tuple[Priority, str, Tenant, float, int]],
    awaiting: list[str],
    batch_seats: int,
    running: list[str],
) -> None:
    """With interactive requests sent to `awaiting` and batch running on `running`, a pass
    (no hold bound: the seat limit alone) starts batch without aging on an engine of a group
    with interactive work elsewhere only up to `batch_seats` running there; an engine limited
    with a seat free still takes the batch a plain pass would give it; engines of no such
    group are untouched (the first test)."""
    seats = 8
    holds = holds_for(devices, 0.0, batch_seats)
    queued_at = [name for cls, pool, *_ in queued if cls is Priority.INTERACTIVE
                 for name in POOLS[pool]]  # fmt: skip
    limited = holds.hold.limited([*awaiting, *queued_at])
    plain, _ = one_pass(queued, seats, None, awaiting, running)
    ours, gate = one_pass(queued, seats, holds, awaiting, running)
    kinds = {seq: cls for seq, (cls, *_) in enumerate(sorted(queued, key=lambda q: -q[3]), 1)}
    assert (gate is not None) == bool(limited)
    started = {name: running.count(name) for name in limited}
    for seq, backend in ours:
        if kinds[seq] is Priority.BATCH and backend in limited:
            started[backend] += 1
    for name, count in started.items():
        assert count <= max(batch_seats, running.count(name))
    plain_there = {name: [s for s, b in plain if b == name and kinds[s] is Priority.BATCH]
                   for name in limited}  # fmt: skip
    for name, seqs in plain_there.items():
        if seqs and running.count(name) < batch_seats:
            assert any(b == name and kinds[s] is Priority.BATCH for s, b in ours)


def test_the_seat_limit_lingers_after_the_last_interactive_request_then_lapses() -> None:
    """A chat on `a` ends at t=10: until 10 + LINGER_S, batch on `b` (a's device) runs one at a
    time; after it, the next pass starts the rest; the status says why while it limits."""
    holds = holds_for({"a": frozenset({"gpu:0"}), "b": frozenset({"gpu:0"})}, 0.0, 1)
    scheduler, capacity = Scheduler(POLICIES), fleet(seats=8)
    chat = Entry(TENANTS[0], Priority.INTERACTIVE, 1, model="chat")
    scheduler.submit(chat, 0.0)
    batch = [Entry(TENANTS[1], Priority.BATCH, 1, model="embed") for _ in range(3)]
    for entry in batch:
        scheduler.submit(entry, 0.0)

    def pump(at: float) -> list[Entry]:
        return pump_at(holds, scheduler, capacity, at)

    assert pump(0.0) == [chat, batch[0]] and holds.limited == {"b": "a"}
    assert holds.first_byte(chat) is False  # nothing held: the hold's bound is 0
    status = holds.as_snapshot(0.0)
    assert status is not None and status.limited == ("b",) and status.batch_seats == 1
    assert status.limit_reasons == ("interactive work on a",)
    for entry in (chat, batch[0]):
        scheduler.finish(entry)
        capacity.on_finish(entry)
    holds.finished(chat, 10.0)
    holds.finished(batch[0], 10.0)
    assert pump(10.0) == [batch[1]]
    assert pump(10.0 + LINGER_S / 2) == []
    assert pump(10.0 + LINGER_S + 0.01) == [batch[2]] and holds.limited == {}


def test_the_pause_rule_stops_held_batch_only_engines_for_at_most_the_bound() -> None:
    """`DeviceHold.paused`: a held engine running batch only is paused, from when it began;
    never one running interactive or normal work, never past the bound, never again in the
    same hold once it reached it, and nothing without `pause` or without a hold."""
    groups = device_groups({"chat": {"cpu"}, "embed": {"cpu"}, "other": {"cpu"}})
    hold = DeviceHold(groups, bound_s=0.3, pause=True)
    held = ["embed", "other"]
    assert hold.paused(held, set(), {}, set(), 1.0) == {"embed": 1.0, "other": 1.0}
    assert hold.paused(held, {"other"}, {"embed": 0.9}, set(), 1.0) == {"embed": 0.9}
    assert hold.paused(held, set(), {"embed": 0.7}, {"other"}, 1.0) == {}  # bound, spent
    assert DeviceHold(groups, 0.3).paused(held, set(), {}, set(), 1.0) == {}
    assert DeviceHold(groups, 0.0, pause=True).paused(held, set(), {}, set(), 1.0) == {}


def test_a_pause_follows_the_first_byte_and_the_bound_and_spares_other_classes() -> None:
    """Through DeviceHolds: a batch request runs on `embed`; an interactive one sent to `chat`
    (same device) pauses `embed` until its first byte, with a pump due at the bound; a
    second wait pauses it again, and once the bound ends a pause it is not paused again in
    that wait; a normal request released to `embed` ends its pause."""
    engine = EngineConfig(kind="sim", model="m", device="cpu")
    config = Config(
        engines={"chat": engine, "embed": engine},
        admission=AdmissionConfig(
            device_hold_ratio=0.5,
            device_pause=True,
            interactive=ClassConfig(aging_s=0.0, ttft_p95_budget_ms=1000.0),
        ),
    )
    holds = DeviceHolds()
    holds.configure(config)
    scheduler, capacity = Scheduler(POLICIES), PoolCapacity()
    capacity.add("chat", BackendKind.ENGINE, ["tiny"], CapacityGate(max_in_flight=4))
    capacity.add("embed", BackendKind.ENGINE, ["tiny-embed"], CapacityGate(max_in_flight=4))

    def submit(cls: Priority, model: str, at: float) -> Entry:
        entry = Entry(TENANTS[0], cls, 10, model=model)
        scheduler.submit(entry, at)
        return entry

    batch = submit(Priority.BATCH, "tiny-embed", 0.0)
    assert pump_at(holds, scheduler, capacity, 0.0) == [batch] and holds.paused == {}
    chat = submit(Priority.INTERACTIVE, "tiny", 1.0)
    assert pump_at(holds, scheduler, capacity, 1.0) == [chat]
    assert holds.paused == {"embed": 1.0} and holds.lapse_at == 1.5
    assert holds.first_byte(chat)
    pump_at(holds, scheduler, capacity, 1.1)
    assert holds.paused == {}
    holds.finished(chat, 1.2)
    later = submit(Priority.INTERACTIVE, "tiny", 2.0)
    pump_at(holds, scheduler, capacity, 2.0)
    assert holds.paused == {"embed": 2.0}
    pump_at(holds, scheduler, capacity, 2.5)  # the bound: it goes on, and stays so
    assert holds.paused == {}
    pump_at(holds, scheduler, capacity, 2.6)
    assert holds.paused == {} and holds.held == {"embed": "chat"}
    assert holds.first_byte(later)  # Admission pumps then: the wait has ended
    pump_at(holds, scheduler, capacity, 2.7)
    holds.finished(later, 2.8)
    third = submit(Priority.INTERACTIVE, "tiny", 3.0)
    pump_at(holds, scheduler, capacity, 3.0)
    assert holds.paused == {"embed": 3.0}  # a new wait: paused again
    normal = submit(Priority.NORMAL, "tiny-embed", 3.1)
    assert pump_at(holds, scheduler, capacity, 3.1) == [normal] and holds.paused == {}
    assert holds.first_byte(third) is True


def test_pause_orders_are_changes_only_and_counted() -> None:
    """`DeviceHolds.orders`: an engine is told to stop once when its pause begins and to go on
    once when it ends; each stop counts one pause and the time between them counts as paused,
    the pauses under way included in the snapshot."""
    engine = EngineConfig(kind="sim", model="m", device="cpu")
    holds = DeviceHolds()
    holds.configure(Config(engines={"chat": engine, "embed": engine}))
    holds.paused = {"embed": 1.0}
    assert holds.orders(1.0) == ([], ["embed"])
    assert holds.orders(1.1) == ([], [])  # still wanted: no new order
    status = holds.as_snapshot(1.25)
    assert status is not None and status.paused == ("embed",) and status.pauses == 1
    assert status.paused_s == pytest.approx(0.25)
    holds.paused = {}
    assert holds.orders(1.4) == (["embed"], [])
    assert holds.orders(1.5) == ([], [])
    holds.paused = {"embed": 2.0}
    assert holds.orders(2.0) == ([], ["embed"])
    holds.paused = {}
    holds.orders(2.1)
    status = holds.as_snapshot(3.0)
    assert status is not None and status.paused == () and status.pauses == 2
    assert status.paused_s == pytest.approx(0.5)
