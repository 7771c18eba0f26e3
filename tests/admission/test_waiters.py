"""The asyncio side of admission: waiting, release on finish, cancellation, engine flags."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from llmd.admission.classes import Priority
from llmd.admission.waiters import Admission, Request, max_in_flight
from llmd.config import AdmissionConfig, Config, EngineConfig
from llmd.errors import QueueTimeout
from llmd.supervisor.state import EnginePhase, EngineState


def admission(**fields: object) -> Admission:
    config = Config(
        engine=EngineConfig(model="m", args=("--scheduling-policy=priority",)),
        admission=dataclasses.replace(AdmissionConfig(max_in_flight=1), **fields),  # type: ignore[arg-type]
    )
    return Admission(config, EngineState(phase=EnginePhase.SERVING, max_model_len=1024))


def request(adm: Admission, cls: Priority = Priority.NORMAL, **headers: str) -> Request:
    raw = [(k.encode(), v.encode()) for k, v in headers.items()]
    return Request(adm.tenants.tenants()[0], cls, 100, raw)


async def test_waits_for_a_slot_and_leaves_the_queue_when_cancelled() -> None:
    """The second request waits for the first to finish; a cancelled waiter leaves at once."""
    adm = admission()
    first = await adm.admit(request(adm))
    second = asyncio.create_task(adm.admit(request(adm)))
    leaver = asyncio.create_task(adm.admit(request(adm)))
    await asyncio.sleep(0.01)
    assert adm.scheduler.queued() == 2
    leaver.cancel()
    await asyncio.gather(leaver, return_exceptions=True)
    assert adm.scheduler.queued() == 1
    adm.finish(first)
    ticket = await asyncio.wait_for(second, 1)
    assert ticket.queue_ms >= 5
    assert adm.gate.in_flight == 1 and adm.scheduler.queued() == 0


async def test_deadline_header_rejects_while_queued() -> None:
    """x-llmd-deadline-ms passes while queued: QueueTimeout (503) with Retry-After."""
    adm = admission()
    await adm.admit(request(adm))
    with pytest.raises(QueueTimeout) as caught:
        await adm.admit(request(adm, **{"x-llmd-deadline-ms": "30"}))
    assert caught.value.retry_after_s is not None and caught.value.retry_after_s >= 1
    assert "x-llmd-deadline-ms" in caught.value.message


def test_engine_flags_set_priority_and_max_in_flight() -> None:
    """--scheduling-policy priority turns on the priority field; --max-num-seqs sizes the gate."""
    assert admission().engine_priority
    engine = EngineConfig(model="m", args=("--max-num-seqs", "48"))
    assert max_in_flight(engine, AdmissionConfig()) == 48
    assert max_in_flight(engine, AdmissionConfig(max_in_flight=7)) == 7
    assert max_in_flight(EngineConfig(model="m"), AdmissionConfig()) == 128


def test_cost_uses_the_engines_default_output_when_max_tokens_is_omitted() -> None:
    """Omitted max_tokens: the rest of the context for chat, 16 for completions; times n."""
    adm = admission()
    assert adm.cost(24, None, 1, chat=True) == 1024
    assert adm.cost(24, None, 1, chat=False) == 40
    assert adm.cost(24, 10, 2, chat=True) == 68
