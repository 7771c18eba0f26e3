"""The asyncio side of admission: waiting, release on finish, cancellation, engine flags."""

from __future__ import annotations

import asyncio
import dataclasses
import time

import pytest

from llmd.admission.classes import Priority
from llmd.admission.control import Admission
from llmd.admission.cost import Cost
from llmd.admission.gates import max_in_flight
from llmd.admission.requests import AdmissionRequest, read_deadline
from llmd.config import AdmissionConfig, Config, EngineConfig
from llmd.errors import InvalidRequest, QueueTimeout
from llmd.routing.backend import BackendKind
from llmd.supervisor.state import EnginePhase, EngineState
from tests.support.waiting import until


def admission(**fields: object) -> Admission:
    config = Config(
        engine=EngineConfig(model="m", args=("--scheduling-policy=priority",)),
        admission=dataclasses.replace(AdmissionConfig(max_in_flight=1), **fields),  # type: ignore[arg-type]
    )
    return Admission(config, {"main": EngineState(phase=EnginePhase.SERVING, max_model_len=1024)})


def request(
    adm: Admission, cls: Priority = Priority.NORMAL, deadline: float | None = None
) -> AdmissionRequest:
    return AdmissionRequest(adm.tenants.tenants()[0], cls, Cost(seats=1, tokens=100), deadline)


async def test_waits_for_a_slot_and_leaves_the_queue_when_cancelled() -> None:
    """The second request waits for the first to finish; a cancelled waiter leaves at once."""
    adm = admission()
    first = await adm.admit(request(adm))
    second = asyncio.create_task(adm.admit(request(adm)))
    leaver = asyncio.create_task(adm.admit(request(adm)))
    await asyncio.sleep(0.01)
    assert adm.scheduler.queued() == 2
    queued_by = time.monotonic()  # the second was queued by now
    leaver.cancel()
    await asyncio.gather(leaver, return_exceptions=True)
    assert adm.scheduler.queued() == 1
    await asyncio.sleep(0.01)
    finished_at = time.monotonic()  # and released after this
    adm.finish(first)
    ticket = await asyncio.wait_for(second, 1)
    # Its wait covers at least that span (a bound that holds on a loaded machine, where the
    # second may be queued well after the test's first sleep began)
    assert ticket.queue_ms >= (finished_at - queued_by) * 1000 >= 9
    assert adm.capacity.gate("main").in_flight == 1 and adm.scheduler.queued() == 0


async def test_deadline_header_rejects_while_queued() -> None:
    """x-llmd-deadline-ms passes while queued: QueueTimeout (503) with Retry-After."""
    adm = admission()
    await adm.admit(request(adm))
    deadline = read_deadline([(b"x-llmd-deadline-ms", b"30")], time.monotonic())
    with pytest.raises(QueueTimeout) as caught:
        await adm.admit(request(adm, deadline=deadline))
    assert caught.value.retry_after_s is not None and caught.value.retry_after_s >= 1
    assert "x-llmd-deadline-ms" in caught.value.message


async def test_deadline_counts_from_arrival_not_from_admission() -> None:
    """A deadline that passed before the request reached admission (it arrived 0.5 s ago, with
    200 ms to go) is answered at once, while the engine is busy, not 200 ms later."""
    adm = admission()
    await adm.admit(request(adm))
    arrived = time.monotonic() - 0.5
    deadline = read_deadline([(b"x-llmd-deadline-ms", b"200")], arrived)
    assert deadline == pytest.approx(arrived + 0.2)
    waiting = adm.admit(request(adm, deadline=deadline))
    with pytest.raises(QueueTimeout):  # at once: in its first step, before it waits on anything
        waiting.send(None)


@pytest.mark.parametrize("value", [b"0", b"-5", b"1.5", b"soon", b"86400001", b"\xb2", b"9" * 5000])
def test_bad_deadline_header_is_400(value: bytes) -> None:
    """x-llmd-deadline-ms must be whole milliseconds in 1..86,400,000."""
    with pytest.raises(InvalidRequest, match="x-llmd-deadline-ms"):
        read_deadline([(b"x-llmd-deadline-ms", value)], 0.0)


def test_engine_flags_set_priority_and_max_in_flight() -> None:
    """--scheduling-policy priority turns on the priority field for that engine; --max-num-seqs
    sizes its gate."""
    assert admission().gates.priority_backends == {"main"}
    engine = EngineConfig(model="m", args=("--max-num-seqs", "48"))
    assert max_in_flight(engine, AdmissionConfig()) == 48
    assert max_in_flight(engine, AdmissionConfig(max_in_flight=7)) == 7
    assert max_in_flight(EngineConfig(model="m"), AdmissionConfig()) == 128
    underscored = EngineConfig(model="m", args=("--max_num_seqs", "16"))  # as vLLM reads it
    assert max_in_flight(underscored, AdmissionConfig()) == 16


def test_a_request_is_refused_only_when_it_fits_no_backend_of_its_pool() -> None:
    """never_fits per pool: more seats than one backend has but not than another's passes;
    more than every backend of the pool has is a 400 saying why."""
    adm = admission()  # `main`: one seat
    (model,) = adm.capacity.models()
    adm.add_backend("wide", BackendKind.ENGINE, [model])
    adm.capacity.gate("wide").max_in_flight = 4
    adm.gates.check_fits(Cost(seats=4, tokens=100), model)
    with pytest.raises(InvalidRequest, match="5 sequences at once"):
        adm.gates.check_fits(Cost(seats=5, tokens=100), model)


async def test_paced_batch_is_released_by_the_timer_and_interactive_passes_it() -> None:
    """Batch requests over the pace's burst wait in the queue and are released one per
    `batch_pace_ms` by admission's own timer (nothing finishes meanwhile); an interactive
    request that comes behind them is released at once."""
    adm = admission(max_in_flight=100, batch_pace_ms=20.0)
    wave = [asyncio.create_task(adm.admit(request(adm, Priority.BATCH))) for _ in range(5)]
    await asyncio.sleep(0)
    assert adm.scheduler.queued(Priority.BATCH) == 3  # two went in: the burst
    chat = await adm.admit(request(adm, Priority.INTERACTIVE))
    # At once: before the timer released any of the three paced ones (an order, not a time:
    # a loaded machine may hold the loop for milliseconds).
    assert adm.scheduler.queued(Priority.BATCH) == 3
    tickets = await asyncio.wait_for(asyncio.gather(*wave), 5)
    released = sorted(t.entry.released_at or 0.0 for t in tickets)
    assert chat.entry.released_at is not None and chat.entry.released_at < released[2]
    assert released[-1] - released[0] >= 3 * 0.020 - 0.001  # three more intervals, at least
    assert adm.capacity.gate("main").in_flight == 6


async def test_a_finish_runs_a_pass_only_when_one_could_change_something(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A finish with nothing queued and no device hold or swap group runs no pass (issue 37:
    a pass is about a quarter of a request's admission CPU); with a request queued it does,
    and releases it; with a swap group told after each pass it does too."""
    adm = admission()
    passes: list[None] = []
    pump = adm.pump

    def counted() -> None:
        passes.append(None)
        pump()

    monkeypatch.setattr(adm, "pump", counted)
    first = await adm.admit(request(adm))
    assert len(passes) == 1  # the admit's own
    adm.finish(first)
    assert len(passes) == 1
    first = await adm.admit(request(adm))
    second = asyncio.create_task(adm.admit(request(adm)))
    assert await until(lambda: adm.scheduler.queued() == 1, timeout_s=5)
    before = len(passes)
    adm.finish(first)
    assert len(passes) == before + 1
    adm.finish(await asyncio.wait_for(second, 5))
    adm.after_pump = lambda: None
    before = len(passes)
    adm.finish(await adm.admit(request(adm)))
    assert len(passes) == before + 2
