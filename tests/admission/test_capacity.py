"""The capacity gate: engine load, llmd's own reservations, the batch reserve, never idle."""

from __future__ import annotations

from llmd.admission.capacity import CapacityGate, EngineLoad
from llmd.admission.classes import Priority
from llmd.admission.entries import Entry
from llmd.admission.tenants import Tenant


def entry(cost: int, cls: Priority = Priority.NORMAL) -> Entry:
    return Entry(Tenant(), cls, cost)


def test_reservations_count_at_release_against_kv_tokens() -> None:
    """Released prompt+max_tokens are reserved at once, before any scrape shows them."""
    gate = CapacityGate(max_in_flight=100, load=EngineLoad(kv_tokens=1000))
    first = entry(800)
    assert gate.admits(first, False)
    gate.on_release(first)
    assert not gate.admits(entry(200), False)  # 800 + 200 > 0.9 * 1000
    assert gate.admits(entry(100), False)
    gate.on_finish(first)
    assert gate.reserved_tokens == 0 and gate.admits(entry(800), False)


def test_engine_metrics_hold_releases() -> None:
    """KV usage at the watermark holds every release; engine waiting holds normal and batch."""
    running = entry(1)
    gate = CapacityGate(max_in_flight=100, load=EngineLoad(kv_usage=0.95))
    gate.on_release(running)
    assert not gate.admits(entry(1, Priority.INTERACTIVE), False)
    gate = CapacityGate(max_in_flight=100, max_engine_waiting=1, load=EngineLoad(waiting=2))
    gate.on_release(running)
    assert not gate.admits(entry(1), False)
    assert gate.admits(entry(1, Priority.INTERACTIVE), False)


def test_engine_waiting_is_counted_in_requests_the_size_of_this_one() -> None:
    """vLLM counts each input of a pooling request as a request waiting: a request of 8 inputs
    is held only past 8 x max_engine_waiting waiting, one of 1 input past max_engine_waiting."""
    gate = CapacityGate(max_in_flight=100, max_engine_waiting=4, load=EngineLoad(waiting=8))
    gate.on_release(entry(1))
    eight = Entry(Tenant(), Priority.BATCH, 80, seats=8)
    assert gate.admits(eight, False)
    assert not gate.admits(entry(10, Priority.BATCH), False)
    gate.set_load(EngineLoad(waiting=33))
    assert not gate.admits(eight, False)


def test_idle_engine_always_admits() -> None:
    """With nothing in flight anything is admitted, even a request bigger than the budget."""
    gate = CapacityGate(max_in_flight=1, load=EngineLoad(kv_usage=0.99, waiting=5, kv_tokens=10))
    assert gate.admits(entry(10_000), False)
    gate.serving = False
    assert not gate.admits(entry(1), False)


def test_batch_reserve_is_kept_for_higher_classes_unless_overdue() -> None:
    """Batch may not take the last `batch_reserve` slots; interactive and overdue batch may."""
    gate = CapacityGate(max_in_flight=4, batch_reserve=2)
    for _ in range(2):
        gate.on_release(entry(1))
    assert not gate.admits(entry(1, Priority.BATCH), False)
    assert gate.admits(entry(1, Priority.BATCH), True)
    assert gate.admits(entry(1, Priority.INTERACTIVE), False)
    for _ in range(2):
        gate.on_release(entry(1))
    assert not gate.admits(entry(1, Priority.INTERACTIVE), False)


def test_seats_are_sequences_not_requests() -> None:
    """32 requests with n = 4 take the engine's 128 seats: a 33rd waits, and a request of one
    sequence takes the one seat left after 31 of them and a request of 3."""
    gate = CapacityGate(max_in_flight=128)
    for _ in range(32):
        four = Entry(Tenant(), Priority.NORMAL, 10, seats=4)
        assert gate.admits(four, False)
        gate.on_release(four)
    assert gate.in_flight == 128
    assert not gate.admits(entry(1, Priority.INTERACTIVE), False)
    gate.on_finish(four)
    assert not gate.admits(Entry(Tenant(), Priority.NORMAL, 10, seats=5), False)
    assert gate.admits(Entry(Tenant(), Priority.NORMAL, 10, seats=4), False)


def test_the_batch_reserve_is_kept_in_seats() -> None:
    """Batch may not take the last batch_reserve seats with a multi-sequence request either:
    a batch request of 4 sequences waits while fewer than 4 + reserve seats are free."""
    gate = CapacityGate(max_in_flight=16, batch_reserve=4)
    gate.on_release(Entry(Tenant(), Priority.BATCH, 10, seats=8))
    assert not gate.admits(Entry(Tenant(), Priority.BATCH, 10, seats=5), False)
    assert gate.admits(Entry(Tenant(), Priority.BATCH, 10, seats=4), False)
    assert gate.admits(Entry(Tenant(), Priority.INTERACTIVE, 10, seats=8), False)


def test_never_fits_names_requests_no_idle_engine_could_take() -> None:
    """More sequences than max_in_flight, or more KV tokens than the budget (capacity x
    watermark x overcommit), cannot run even alone; the reason says which."""
    gate = CapacityGate(max_in_flight=128, load=EngineLoad(kv_tokens=65_536))
    assert gate.never_fits(16, 58_982) is None
    seats = gate.never_fits(129, 10)
    assert seats is not None and "129 sequences" in seats
    tokens = gate.never_fits(16, (2_000 + 2_048) * 16)
    assert tokens is not None and "64,768 tokens" in tokens and "58,982" in tokens
    assert CapacityGate(max_in_flight=128).never_fits(16, 10**9) is None  # capacity unknown
