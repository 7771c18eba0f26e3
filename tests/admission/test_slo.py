"""The SLO guard at work: windows per class, evaluation, holding batch in admission (aging still
releases it), capping max_tokens, shedding with Retry-After, override reset by reload, the log
line per level change."""

from __future__ import annotations

import asyncio
import dataclasses
import json

import pytest

from llmd.admission.classes import Priority
from llmd.admission.control import Admission
from llmd.admission.cost import Cost
from llmd.admission.entries import ClassPolicy, Entry
from llmd.admission.guard import Level
from llmd.admission.requests import AdmissionRequest
from llmd.admission.scheduler import Scheduler
from llmd.admission.slo import EVALUATE_EVERY_S, SloGuard
from llmd.admission.tenants import Tenant
from llmd.config import AdmissionConfig, ClassConfig, Config, EngineConfig, GuardConfig
from llmd.errors import Overloaded, QueueTimeout
from llmd.supervisor.state import EnginePhase, EngineState
from tests.support.log_capture import Captured

GUARD = GuardConfig(window_s=10, min_samples=5, dwell_s=2.0, recover_ratio=0.8, max_tokens_cap=64)
CONFIG = AdmissionConfig(
    max_in_flight=4,
    batch_reserve=0,
    interactive=ClassConfig(256, 10.0, 0.0, ttft_p95_budget_ms=100.0),
    normal=ClassConfig(1024, 60.0, 5.0, ttft_p95_budget_ms=1000.0),
    batch=ClassConfig(4096, 600.0, 15.0),
    guard=GUARD,
)


class Clock:
    """Monotonic seconds that move only when told."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def scheduler() -> Scheduler:
    return Scheduler({cls: ClassPolicy(100, 60.0, 0.0) for cls in Priority})


def evaluate(guard: SloGuard, clock: Clock, sched: Scheduler | None = None) -> Level:
    """One evaluation a little later than the last (the guard evaluates at most every
    EVALUATE_EVERY_S); the level in force."""
    clock.now += EVALUATE_EVERY_S
    guard.gate(_NoGate(), sched or scheduler())
    return Level(guard.as_snapshot().level)


class _NoGate:
    def admits(self, entry: Entry, overdue: bool) -> str | None:
        return None

    def on_release(self, entry: Entry, backend: str) -> None:
        pass


def test_rises_on_the_class_window_and_reports_p95_against_budget(
    captured_logs: Captured,
) -> None:
    """Interactive TTFT over its budget on enough requests: level 1, the reason and each
    budgeted class's p95 against its budget in the snapshot, one log line for the change."""
    clock = Clock()
    guard = SloGuard(CONFIG, clock)
    for _ in range(4):
        guard.observed("interactive", 0.3, 0.0)
    assert evaluate(guard, clock) is Level.NORMAL  # 4 requests: under min_samples
    guard.observed("interactive", 0.3, 0.0)
    guard.observed("batch", 9.0, 8.0)  # batch has no budget: never a reason
    assert evaluate(guard, clock) is Level.HOLD_BATCH
    assert evaluate(guard, clock) is Level.HOLD_BATCH  # within the dwell
    status = guard.as_snapshot()
    assert status.mode == "auto" and status.name == "hold_batch"
    assert "interactive TTFT p95" in status.reason and "over its budget 100 ms" in status.reason
    rows = {row.name: row for row in status.classes}
    assert rows["interactive"].budget_s == 0.1 and rows["interactive"].samples == 5
    assert rows["interactive"].p95_s is not None and 0.29 <= rows["interactive"].p95_s <= 0.32
    assert rows["batch"].budget_s is None and rows["batch"].samples == 1
    changes = [e for e in captured_logs.lines() if e["event"] == "slo_guard_level_changed"]
    assert [(e["guard_level"], e["previous"]) for e in changes] == [(1, 0)]
    assert "interactive TTFT p95" in changes[0]["reason"]


def test_a_queued_request_predicted_late_raises_the_level() -> None:
    """An interactive request queued longer than its budget (plus the recent time from
    release to first token) is over budget before any TTFT is measured."""
    clock = Clock()
    guard = SloGuard(CONFIG, clock)
    sched = scheduler()
    queued_at = clock.now + EVALUATE_EVERY_S - 0.05  # 50 ms before the next evaluation
    sched.submit(Entry(Tenant(), Priority.INTERACTIVE, cost=10), queued_at)
    assert evaluate(guard, clock, sched) is Level.NORMAL
    clock.now += 0.2
    assert evaluate(guard, clock, sched) is Level.HOLD_BATCH
    assert "interactive predicted TTFT" in guard.state.reason


def test_a_queue_waiting_out_an_outage_does_not_raise_the_level() -> None:
    """While a pool has no backend to take requests (an engine booting or held by a deploy)
    the queued request's wait measures the outage: the level stays; once the pool serves
    again the same wait counts."""
    clock = Clock()
    guard = SloGuard(CONFIG, clock)
    sched = scheduler()
    sched.submit(Entry(Tenant(), Priority.INTERACTIVE, cost=10), clock.now)
    for _ in range(20):
        clock.now += EVALUATE_EVERY_S
        guard.gate(_NoGate(), sched, outage=lambda: True)
        assert guard.as_snapshot().level == Level.NORMAL
    assert evaluate(guard, clock, sched) is Level.HOLD_BATCH


def test_the_window_forgets_and_the_guard_recovers_a_level_per_dwell() -> None:
    """Once the slow requests leave the window the level falls one step per dwell."""
    clock = Clock()
    guard = SloGuard(CONFIG, clock)
    for _ in range(10):
        guard.observed("interactive", 0.5, 0.0)

    def a_dwell_apart(evaluations: int) -> list[Level]:
        levels = []
        for _ in range(evaluations):
            levels.append(evaluate(guard, clock))
            clock.now += GUARD.dwell_s
        return levels

    assert a_dwell_apart(4) == [1, 2, 3, 4]
    clock.now += GUARD.window_s + 1
    for _ in range(10):
        guard.observed("interactive", 0.01, 0.0)
    assert a_dwell_apart(5) == [3, 2, 1, 0, 0]


def test_cap_body_lowers_max_tokens_of_normal_and_batch_only() -> None:
    """From level 2 a normal or batch body asking more than the cap (or leaving it unset) is
    capped and the header says FROM->TO; interactive, small asks and '' are left alone."""
    guard = SloGuard(CONFIG, Clock())
    chat = json.dumps({"model": "m", "max_tokens": 500}).encode()
    assert guard.cap_body(Priority.NORMAL, [chat, b""]) == ([chat, b""], None)  # level 0
    guard.override("level 2")
    bodies, said = guard.cap_body(Priority.NORMAL, [chat, b""])
    assert said == b"500->64" and json.loads(bodies[0])["max_tokens"] == 64 and bodies[1] == b""
    newer = json.dumps({"max_completion_tokens": 100, "priority": 2}).encode()
    bodies, said = guard.cap_body(Priority.BATCH, [newer, newer])
    assert said == b"100->64"
    assert all(json.loads(b) == {"max_completion_tokens": 64, "priority": 2} for b in bodies)
    unset = json.dumps({"prompt": "x"}).encode()
    bodies, said = guard.cap_body(Priority.BATCH, [unset])
    assert said == b"unset->64" and json.loads(bodies[0])["max_tokens"] == 64
    small = json.dumps({"max_tokens": 10}).encode()
    assert guard.cap_body(Priority.NORMAL, [small]) == ([small], None)
    assert guard.cap_body(Priority.INTERACTIVE, [chat]) == ([chat], None)


def test_a_reload_resets_the_operators_override_and_no_budget_means_level_0() -> None:
    """`guard level 4` lasts until a reload; a config without budgets puts the level at 0 at
    once; a bad mode is a ValueError."""
    guard = SloGuard(CONFIG, Clock())
    assert guard.override("level 4").mode == "pinned"
    guard.configure(CONFIG)
    status = guard.as_snapshot()
    assert (status.level, status.mode) == (0, "auto") and "reload" in status.reason
    guard.state = dataclasses.replace(guard.state, level=Level.SHED_BATCH)
    no_budgets = dataclasses.replace(
        CONFIG,
        interactive=ClassConfig(256, 10.0, 0.0),
        normal=ClassConfig(1024, 60.0, 5.0),
    )
    guard.configure(no_budgets)
    assert guard.as_snapshot().level == 0
    with pytest.raises(ValueError):
        guard.override("level five")


def admission(
    guard_mode: str, batch_aging_s: float = 15.0, batch_timeout_s: float = 600.0
) -> Admission:
    config = Config(
        engine=EngineConfig(model="m"),
        admission=dataclasses.replace(
            CONFIG, batch=ClassConfig(4096, batch_timeout_s, batch_aging_s), max_in_flight=8
        ),
    )
    adm = Admission(config, {"main": EngineState(phase=EnginePhase.SERVING, max_model_len=1024)})
    adm.guard.override(guard_mode)
    return adm


def request(adm: Admission, cls: Priority) -> AdmissionRequest:
    return AdmissionRequest(adm.tenants.tenants()[0], cls, Cost(seats=1, tokens=100))


async def test_level_1_holds_batch_in_the_queue_while_the_others_pass() -> None:
    """At level 1 a batch request waits in llmd (capacity free) while normal and interactive
    requests are released; back at level 0 it is released at once."""
    adm = admission("level 1")
    held = asyncio.create_task(adm.admit(request(adm, Priority.BATCH)))
    normal = await asyncio.wait_for(adm.admit(request(adm, Priority.NORMAL)), 5)
    interactive = await asyncio.wait_for(adm.admit(request(adm, Priority.INTERACTIVE)), 5)
    assert normal.entry.backend == interactive.entry.backend == "main"
    assert not held.done() and adm.scheduler.queued(Priority.BATCH) == 1
    adm.guard.override("off")
    adm.pump()
    ticket = await asyncio.wait_for(held, 5)
    assert ticket.entry.cls is Priority.BATCH


async def test_held_batch_is_still_released_by_aging() -> None:
    """Held batch is not starved: once its class has waited its aging_s without a release, the
    next pump releases it even at level 4."""
    adm = admission("level 4", batch_aging_s=0.05)
    adm.guard.override("level 1")  # shed levels refuse new batch; level 1 holds what queued
    first = asyncio.create_task(adm.admit(request(adm, Priority.BATCH)))
    await asyncio.sleep(0)
    assert not first.done()
    adm.guard.override("level 4")

    async def released() -> bool:
        while not first.done():
            adm.pump()
            await asyncio.sleep(0.01)
        return True

    assert await asyncio.wait_for(released(), 5)
    assert first.result().entry.cls is Priority.BATCH


async def test_shed_levels_refuse_new_batch_then_normal_never_interactive() -> None:
    """Level 3 sheds new batch (503 overloaded, Retry-After >= 1), level 4 new normal too;
    interactive is admitted at both."""
    adm = admission("level 3")
    with pytest.raises(Overloaded) as caught:
        await adm.admit(request(adm, Priority.BATCH))
    assert caught.value.status == 503 and caught.value.code == "overloaded"
    assert caught.value.retry_after_s is not None and caught.value.retry_after_s >= 1
    assert "level 3" in caught.value.message
    await asyncio.wait_for(adm.admit(request(adm, Priority.NORMAL)), 5)
    adm.guard.override("level 4")
    with pytest.raises(Overloaded):
        await adm.admit(request(adm, Priority.NORMAL))
    await asyncio.wait_for(adm.admit(request(adm, Priority.INTERACTIVE)), 5)


async def test_held_batch_waits_within_its_queue_timeout() -> None:
    """A batch request held at level 1 is answered 503 queue_timeout once its class's
    queue_timeout_s passes, as any queued request."""
    adm = admission("level 1", batch_timeout_s=0.05)
    with pytest.raises(QueueTimeout):
        await asyncio.wait_for(adm.admit(request(adm, Priority.BATCH)), 5)


async def test_level_1_holds_nothing_when_batch_does_not_age() -> None:
    """With batch aging_s = 0 nothing bounds a held batch request's wait, so level 1 does not
    hold it (README)."""
    adm = admission("level 1", batch_aging_s=0.0)
    ticket = await asyncio.wait_for(adm.admit(request(adm, Priority.BATCH)), 5)
    assert ticket.entry.cls is Priority.BATCH


def test_the_outage_is_asked_only_when_the_level_is_due() -> None:
    """The pump's outage question (every pool walked) is asked once per evaluation, not at
    every pump: twice within EVALUATE_EVERY_S asks it once."""
    clock = Clock()
    guard = SloGuard(CONFIG, clock)
    asked: list[float] = []

    def outage() -> bool:
        asked.append(clock.now)
        return False

    clock.now += EVALUATE_EVERY_S
    guard.gate(_NoGate(), scheduler(), outage)
    guard.gate(_NoGate(), scheduler(), outage)
    assert asked == [clock.now]
