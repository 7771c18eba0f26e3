"""Capacity per backend in pools: an entry starts on a backend of its own pool that is available
and admits it; down engines and open breakers are skipped; Retry-After comes from them."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmd.admission.capacity import CapacityGate, EngineLoad
from llmd.admission.classes import Priority
from llmd.admission.entries import ClassPolicy, Entry
from llmd.admission.pools import MAX_WAIT_S, PoolCapacity, PoolGate
from llmd.admission.scheduler import Scheduler
from llmd.admission.tenants import Tenant
from llmd.routing.backend import BackendKind
from llmd.routing.breaker import BreakerPolicy, BreakerState, CircuitBreaker
from llmd.routing.choice import Choice, rendezvous_order

ENGINE, UPSTREAM = BackendKind.ENGINE, BackendKind.UPSTREAM
BREAKER = BreakerPolicy(consecutive_failures=2, cooldown_s=5.0, probe_timeout_s=30.0)
POLICIES = {
    cls: ClassPolicy(queue_size=1000, queue_timeout_s=60.0, aging_s=0.0) for cls in Priority
}


def entry(cost: int = 10, cls: Priority = Priority.NORMAL) -> Entry:
    return Entry(Tenant(), cls, cost)


def fleet(seats: int = 2) -> PoolCapacity:
    """Pool "small" of two engines and an upstream; pool "big" of one engine; the upstream also
    serves "lab"."""
    capacity = PoolCapacity()
    capacity.add("big", ENGINE, ["big"], CapacityGate(max_in_flight=seats))
    capacity.add("small-a", ENGINE, ["small"], CapacityGate(max_in_flight=seats))
    capacity.add("small-b", ENGINE, ["small"], CapacityGate(max_in_flight=seats))
    capacity.add(
        "lab", UPSTREAM, ["lab", "small"], CapacityGate(max_in_flight=seats),
        CircuitBreaker(BREAKER),
    )  # fmt: skip
    return capacity


def release(capacity: PoolCapacity, model: str, now: float = 0.0, key: str | None = None) -> str:
    item = entry()
    choice = capacity.admits(item, False, now, model, key)
    assert choice is not None
    capacity.on_release(item, choice.backend, now, model)
    return choice.backend


def test_pools_and_unknown_models() -> None:
    """Each model name has its pool; a name no backend serves is unknown (None)."""
    capacity = fleet()
    assert capacity.pool("small") == ("small-a", "small-b", "lab")
    assert capacity.pool("lab") == ("lab",)
    assert capacity.pool("gpt-4") is None
    assert capacity.admits(entry(), False, 0.0, "gpt-4", None) is None
    assert set(capacity.models()) == {"big", "small", "lab"}


def test_a_full_pool_holds_only_its_own_requests() -> None:
    """With "big" full, requests for "small" still start: waiting is per pool."""
    capacity = fleet(seats=1)
    assert release(capacity, "big") == "big"
    assert capacity.admits(entry(), False, 0.0, "big", None) is None
    assert release(capacity, "small") in {"small-a", "small-b", "lab"}


def test_least_filled_first_then_full() -> None:
    """Without keys releases spread over the pool until every seat is taken."""
    capacity = fleet(seats=2)
    placed = [release(capacity, "small") for _ in range(6)]
    assert sorted(placed) == sorted(["small-a", "small-b", "lab"] * 2)
    assert capacity.admits(entry(), False, 0.0, "small", None) is None


def test_release_and_finish_count_in_the_chosen_gate() -> None:
    """The entry's reservation sits in its backend's gate until it finishes."""
    capacity = fleet()
    item = entry(cost=300)
    choice = capacity.admits(item, False, 0.0, "big", None)
    assert choice is not None and choice.backend == "big"
    capacity.on_release(item, "big", 0.0, "big")
    gate = capacity.gate("big")
    assert (gate.in_flight, gate.reserved_tokens) == (1, 300)
    assert capacity.backend_of(item) == "big"
    capacity.on_finish(item)
    assert (gate.in_flight, gate.reserved_tokens) == (0, 0)
    assert capacity.backend_of(item) is None
    capacity.on_finish(item)  # a second finish changes nothing
    assert gate.in_flight == 0


def test_engine_load_steers_the_choice() -> None:
    """An engine reporting a nearly full KV cache gets the next request last."""
    capacity = fleet(seats=8)
    capacity.gate("small-a").load = EngineLoad(running=1, kv_usage=0.7)
    capacity.gate("lab").load = EngineLoad(running=1, kv_usage=0.5)
    assert release(capacity, "small") == "small-b"


def test_down_engines_are_skipped_and_give_retry_after() -> None:
    """A pool whose engine is down is unavailable; Retry-After is when it should be back."""
    capacity = fleet()
    capacity.set_serving("big", False, back_at=42.0)
    assert not capacity.available("big", 10.0)
    assert capacity.admits(entry(), False, 10.0, "big", None) is None
    assert capacity.retry_after_s("big", 10.0) == 32.0
    assert capacity.backends(10.0, "big")[0].serving is False
    capacity.set_serving("big", True)
    assert capacity.available("big", 10.0) and release(capacity, "big", 10.0) == "big"


def test_gave_up_engines_give_the_longest_retry_after() -> None:
    """An engine not expected back (gave up) gives the cap, never a hang or 0."""
    capacity = fleet()
    capacity.set_serving("big", False, back_at=None)
    assert capacity.retry_after_s("big", 0.0) == MAX_WAIT_S


def test_open_breaker_skips_the_upstream_and_half_open_passes_one_probe() -> None:
    """Failures open the upstream's breaker: its pool serves on the engines; when the pool has
    nothing else, Retry-After is the cooldown; after it one probe request goes through."""
    capacity = fleet(seats=4)
    breaker = capacity.breaker("lab")
    assert breaker is not None and capacity.breaker("big") is None
    breaker.record_failure(0.0)
    breaker.record_failure(0.0)
    assert not capacity.available("lab", 1.0)
    assert capacity.retry_after_s("lab", 1.0) == 4.0
    assert capacity.backends(1.0, "lab")[0].breaker is BreakerState.OPEN
    assert {release(capacity, "small", 1.0) for _ in range(4)} == {"small-a", "small-b"}
    assert release(capacity, "lab", 5.0) == "lab"  # the probe
    assert capacity.admits(entry(), False, 5.0, "lab", None) is None
    breaker.record_success(6.0)
    assert release(capacity, "lab", 6.0) == "lab"


def test_whole_pool_unavailable_takes_the_soonest_back() -> None:
    """Retry-After for a pool is the soonest of its backends' expected returns."""
    capacity = fleet()
    capacity.set_serving("small-a", False, back_at=30.0)
    capacity.set_serving("small-b", False, back_at=12.0)
    breaker = capacity.breaker("lab")
    assert breaker is not None
    breaker.record_failure(0.0)
    breaker.record_failure(0.0)  # open until 5.0
    assert not capacity.available("small", 1.0)
    assert capacity.retry_after_s("small", 1.0) == 4.0
    assert capacity.retry_after_s("small", 4.5) == 1.0  # never under 1 s


def test_reroute_moves_the_entry_once_to_another_backend() -> None:
    """A failed entry moves to another available backend of its pool, its reservation with
    it; with none left there is no reroute."""
    capacity = fleet(seats=1)
    item = entry(cost=50)
    capacity.on_release(item, "small-a", 0.0, "small")
    capacity.set_serving("lab", False, back_at=10.0)
    moved = capacity.reroute(item, frozenset({"small-a"}), 0.0)
    assert moved == "small-b" and capacity.backend_of(item) == "small-b"
    assert capacity.gate("small-a").in_flight == 0
    assert capacity.gate("small-b").reserved_tokens == 50
    assert capacity.reroute(item, frozenset({"small-a", "small-b"}), 0.0) is None
    assert capacity.reroute(entry(), frozenset(), 0.0) is None  # never released


def test_affinity_keeps_a_prefix_on_one_backend() -> None:
    """Requests sharing a key go to its affinity backend while the pool stays balanced."""
    capacity = fleet(seats=64)
    key = "prefix-7"
    home = rendezvous_order(key, ["small-a", "small-b", "lab"])[0]
    for _ in range(3):
        assert release(capacity, "small", key=key) == home
        for name in ("small-a", "small-b", "lab"):  # others get unkeyed work meanwhile
            if name != home:
                capacity.on_release(entry(), name, 0.0, "small")


def test_a_scrape_taken_before_a_finish_does_not_push_a_prefix_away() -> None:
    """A backend's scrape still counts a request llmd has since seen end (for up to a scrape
    interval): the next request of the same prefix stays on its affinity backend, as it would
    after the next scrape; a scrape taken after the finish counts again."""
    capacity = PoolCapacity()
    for name in ("a", "b"):
        capacity.add(name, ENGINE, ["m"], CapacityGate(max_in_flight=8))
    key = "conversation-1"
    home, other = rendezvous_order(key, ["a", "b"])
    busy = EngineLoad(running=6, kv_usage=0.7, kv_tokens=10_000)
    items = [entry() for _ in range(6)]
    for item in items:
        capacity.on_release(item, home, 0.0, "m")
    capacity.gate(home).set_load(busy)
    capacity.gate(other).set_load(EngineLoad(kv_tokens=10_000))
    assert capacity.admits(entry(), False, 0.0, "m", key) == Choice(other, spilled=True)
    for item in items:
        capacity.on_finish(item)
    assert capacity.admits(entry(), False, 0.0, "m", key) == Choice(home, affinity=True)
    capacity.gate(home).set_load(busy)  # another client's load, scraped after the finish
    assert capacity.admits(entry(), False, 0.0, "m", key) == Choice(other, spilled=True)


def test_removed_backend_takes_no_new_work_and_its_running_entries_finish() -> None:
    """Reload takes an upstream out: new requests avoid it, running ones finish in its old
    gate, and the name may come back with a fresh gate."""
    capacity = fleet()
    item = entry(cost=70)
    capacity.on_release(item, "lab", 0.0, "lab")
    old_gate = capacity.gate("lab")
    capacity.remove("lab")
    assert capacity.pool("lab") is None and capacity.pool("small") == ("small-a", "small-b")
    assert capacity.backend_of(item) == "lab"
    capacity.add("lab", UPSTREAM, ["lab"], CapacityGate(max_in_flight=2), CircuitBreaker())
    assert capacity.gate("lab").in_flight == 0
    capacity.on_finish(item)
    assert (old_gate.in_flight, old_gate.reserved_tokens) == (0, 0)
    assert capacity.gate("lab").in_flight == 0


def test_duplicate_backends_are_refused() -> None:
    """Backend names are unique."""
    capacity = fleet()
    with pytest.raises(ValueError, match="big"):
        capacity.add("big", ENGINE, ["x"], CapacityGate(max_in_flight=1))


def test_an_upstream_joins_pools_when_its_models_are_known() -> None:
    """An upstream added before its /v1/models answered is in no pool; `set_models` puts it
    in (and later out of) pools, its gate and breaker kept."""
    capacity = fleet()
    capacity.add("far", UPSTREAM, [], CapacityGate(max_in_flight=2), CircuitBreaker())
    assert capacity.pool("far-model") is None and "far" in capacity.names()
    gate = capacity.gate("far")
    capacity.set_models("far", ["far-model", "small"])
    assert capacity.pool("far-model") == ("far",)
    assert capacity.pool("small") == ("small-a", "small-b", "lab", "far")
    assert release(capacity, "far-model") == "far" and gate.in_flight == 1
    capacity.set_models("far", [])
    assert capacity.pool("far-model") is None and capacity.gate("far") is gate


def test_a_drained_backend_takes_no_new_request() -> None:
    """Drained, a backend is skipped; a pool drained whole is unavailable with the drain's
    Retry-After; running entries finish there; resumed, it takes requests again."""
    capacity = fleet(seats=4)
    item = entry()
    capacity.on_release(item, "big", 0.0, "big")
    capacity.set_draining("big", 30.0)
    assert capacity.draining("big") and not capacity.available("big", 0.0)
    assert capacity.retry_after_s("big", 0.0) == 30.0
    capacity.set_draining("small-a", 30.0)
    assert {release(capacity, "small") for _ in range(4)} == {"small-b", "lab"}
    capacity.on_finish(item)
    assert capacity.gate("big").in_flight == 0
    capacity.set_draining("big", None)
    assert release(capacity, "big") == "big"


def test_the_scheduler_drives_the_pools() -> None:
    """Scheduler.decide over a PoolGate: classes keep their order across a pool's backends,
    releases to a pool stop when its backends' seats are taken, and another pool's entries
    still go."""
    capacity = PoolCapacity()
    for name in ("a", "b"):
        capacity.add(name, ENGINE, ["m"], CapacityGate(max_in_flight=2))
    capacity.add("c", ENGINE, ["other"], CapacityGate(max_in_flight=1))
    scheduler = Scheduler(POLICIES)
    batch = [Entry(Tenant(), Priority.BATCH, 10, model="m") for _ in range(3)]
    interactive = [Entry(Tenant(), Priority.INTERACTIVE, 10, model="m") for _ in range(3)]
    other = Entry(Tenant(), Priority.BATCH, 10, model="other")
    for item in [*batch, *interactive, other]:
        assert scheduler.submit(item, 0.0) is None
    gate = PoolGate(capacity, now=0.0)
    released = scheduler.decide(0.0, gate).released
    assert released[:3] == interactive and len(released) == 5 and other in released
    on_m = [e for e in released if e.model == "m"]
    assert sorted(capacity.backend_of(e) or "" for e in on_m) == ["a", "a", "b", "b"]
    assert all(e.backend == capacity.backend_of(e) for e in released)
    scheduler.finish(released[0])
    capacity.on_finish(released[0])
    assert scheduler.decide(1.0, PoolGate(capacity, now=1.0)).released == [batch[1]]


ops = st.lists(
    st.tuples(st.sampled_from(["release", "finish", "fail", "down", "up"]), st.integers(0, 50)),
    max_size=80,
)


@settings(max_examples=200, deadline=None)
@given(ops)
def test_accounting_matches_placements(steps: list[tuple[str, int]]) -> None:
    """Through releases, finishes, reroutes and engines going down and up, each gate counts
    exactly the entries placed on it and their reserved tokens."""
    capacity = fleet(seats=3)
    live: list[Entry] = []
    names = ["big", "small-a", "small-b", "lab"]
    for op, n in steps:
        if op == "release":
            item = entry(cost=n + 1)
            model = ["big", "small", "lab"][n % 3]
            choice = capacity.admits(item, False, 0.0, model, f"k{n % 4}")
            if choice is not None:
                capacity.on_release(item, choice.backend, 0.0, model)
                live.append(item)
        elif op == "finish" and live:
            capacity.on_finish(live.pop(n % len(live)))
        elif op == "fail" and live:
            item = live[n % len(live)]
            failed = capacity.backend_of(item)
            assert failed is not None
            capacity.reroute(item, frozenset({failed}), 0.0)
        elif op == "down":
            capacity.set_serving(names[n % 4], False, back_at=float(n))
        elif op == "up":
            capacity.set_serving(names[n % 4], True)
        for name in names:
            mine = [e for e in live if capacity.backend_of(e) == name]
            gate = capacity.gate(name)
            assert gate.in_flight == len(mine)
            assert gate.reserved_tokens == sum(e.cost for e in mine)


def test_an_asleep_engine_queues_its_pool_and_a_closed_one_takes_nothing_new() -> None:
    """A pool whose engine sleeps on demand is unavailable but its requests queue (`holding`),
    with the predicted wake as its wait; an engine its swap group closed takes no new request
    and its pool's requests queue too."""
    capacity = fleet()
    capacity.set_serving("big", False, back_at=None)
    capacity.set_dormant("big", 3.5)
    assert not capacity.available("big", 0.0) and capacity.holding("big")
    assert capacity.wake_s("big", 0.0) == 3.5 and capacity.retry_after_s("big", 0.0) == 3.5
    assert capacity.wake_s("small", 0.0) is None  # it can take requests now
    capacity.set_draining("big", 30.0)  # an operator drained it: no wake, 503 as drained
    assert not capacity.holding("big") and capacity.wake_s("big", 0.0) is None
    capacity.set_draining("big", None)
    capacity.set_serving("big", True)
    capacity.set_dormant("big", None)
    capacity.set_closed("big", True)
    assert not capacity.available("big", 0.0) and capacity.holding("big")
    assert capacity.admits(entry(), False, 0.0, "big", None) is None
    assert capacity.wake_s("big", 0.0) is None  # closed is no sleep: it drains
    capacity.set_closed("big", False)
    assert release(capacity, "big") == "big"


def test_one_able_backend_is_chosen_without_a_view_of_its_load(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A pool of one backend (or one whose others cannot take the entry) gets its request
    without a `Backend` view built for the choice (issue 37: per-request work a pool of one
    does not need), with the choice `choose` would make; several able backends are viewed."""
    capacity = fleet(seats=1)

    def no_view(*_: object) -> None:
        raise AssertionError("a backend viewed")

    monkeypatch.setattr("llmd.admission.pools._Slot.view", no_view)
    assert capacity.admits(entry(), False, 0.0, "big", "some-key") == Choice("big", affinity=True)
    assert capacity.admits(entry(), False, 0.0, "big", None) == Choice("big")
    with pytest.raises(AssertionError, match="viewed"):
        capacity.admits(entry(), False, 0.0, "small", None)
