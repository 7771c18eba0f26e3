"""On-demand engines at work: after each admission pass, each swap group's core
(llmd/admission/swap.py) decides from the queue and the engines' states which engine to wake,
which to put to sleep and which takes no new request; this carries it out through the
supervisors, one operation per engine at a time, and counts wakes and evictions.

An on-demand engine outside any swap group is a group of its own: it sleeps after its
idle_sleep_s and wakes when a request names its model.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

import structlog

from llmd.admission.alarm import Alarm
from llmd.admission.swap import Demand, EngineView, GroupPolicy, Residency, SwapGroup, has_room
from llmd.config import Config
from llmd.errors import ActionRefused
from llmd.gpu.footprint import GroupMemory
from llmd.state import DaemonState
from llmd.supervisor.state import EnginePhase
from llmd.supervisor.supervisor import Supervisor

log = structlog.get_logger("llmd.swapping")

# How each phase counts for a swap group. A booting or restarting engine holds its memory and
# cannot be evicted yet (no `awake_since`); one stopped or given up holds none.
RESIDENCY = {
    EnginePhase.SERVING: Residency.AWAKE,
    EnginePhase.STARTING: Residency.AWAKE,
    EnginePhase.RESTARTING: Residency.AWAKE,
    EnginePhase.WAKING: Residency.WAKING,
    EnginePhase.FALLING_ASLEEP: Residency.FALLING_ASLEEP,
    EnginePhase.ASLEEP: Residency.ASLEEP,
    EnginePhase.STOPPING: Residency.FALLING_ASLEEP,
    EnginePhase.STOPPED: Residency.ASLEEP,
    EnginePhase.FAILED: Residency.ASLEEP,
}


def swap_groups(config: Config) -> dict[str, tuple[GroupPolicy, tuple[str, ...]]]:
    """Each swap group's policy and engines, and a group of one for each on-demand engine in
    none (named after the engine). A group fit by memory (no max_resident) gets its device's
    memory from `Swapping.fit_by_memory`."""
    groups = {
        name: (
            GroupPolicy(group.max_resident or 1, group.min_residence_s, group.max_wait_s),
            group.engines,
        )
        for name, group in config.swap_groups.items()
    }
    grouped = {engine for _, engines in groups.values() for engine in engines}
    for name, engine in config.engine_tables.items():
        if engine.on_demand and name not in grouped:
            groups[f"engine:{name}"] = (GroupPolicy(1, 0.0, 0.0), (name,))
    return groups


def starts_asleep(config: Config) -> set[str]:
    """The engines whose first boot ends asleep: in each swap group, all but the first
    max_resident (one in a group fit by memory; pinned ones first, then config order)."""
    asleep: set[str] = set()
    tables = config.engine_tables
    for group in config.swap_groups.values():
        order = sorted(group.engines, key=lambda name: not tables[name].pin)
        asleep.update(order[group.max_resident or 1 :])
    return asleep


class Swapping:
    """The swap groups of `state.config` over `supervisors` (by engine); `pump` runs
    admission again (after an engine is closed or opened)."""

    def __init__(
        self, state: DaemonState, supervisors: Mapping[str, Supervisor], pump: Callable[[], None]
    ) -> None:
        self.state = state
        self.supervisors = supervisors
        self.pump = pump
        self.groups = {
            name: (SwapGroup(policy), engines)
            for name, (policy, engines) in swap_groups(state.config).items()
        }
        self.demand: dict[str, Demand] = {}
        self.last_request: dict[str, float] = {}
        self._ops: dict[str, asyncio.Task[None]] = {}
        self._cancels: dict[str, asyncio.Task[None]] = {}
        # Engines an operator woke: their wake is not cancelled for want of requests.
        self._asked: set[str] = set()
        self._closed: set[str] = set()
        self._phases: dict[str, EnginePhase] = {}
        self._alarm = Alarm(self.pump)  # the next decision's time
        self.memory: GroupMemory | None = None

    def fit_by_memory(self, memory: GroupMemory) -> None:
        """Fit the groups `memory` covers by their device's memory and their engines'
        footprints (measured each time one serves, and now for those serving) instead of a
        count."""
        self.memory = memory
        for name, total in memory.totals.items():
            group = self.groups[name][0]
            group.policy = dataclasses.replace(group.policy, device_bytes=total)
        for name, engine in self.state.fleet.engines.items():
            if engine.phase is EnginePhase.SERVING:  # serving already: read it now
                self._measure(name, engine.pid)

    @property
    def engines(self) -> list[str]:
        """Every on-demand engine."""
        return [name for _, engines in self.groups.values() for name in engines]

    def queued(self, model: str) -> None:
        """A request for `model` entered the queue now: its engines' demand."""
        now = time.monotonic()
        fleet = self.state.fleet
        for name in self.engines:
            if name in fleet.engines and model in fleet.serving_models(name):
                self.demand.setdefault(name, Demand()).record(now)
                self.last_request[name] = now

    def woken(self, model: str, queued_s: float) -> None:
        """A request that came while `model` slept was released after `queued_s` seconds."""
        self.state.observer.metrics.wake_waits.observe((model,), queued_s)

    def decide(self) -> None:
        """Run every group's core now and start what it says (after each admission pass)."""
        now = time.monotonic()
        self._observe_wakes()
        closed: set[str] = set()
        next_at: list[float] = []
        for group, engines in self.groups.values():
            views = [self._view(name, now) for name in engines if name in self.supervisors]
            plan = group.decide(views, now)
            closed |= plan.closed
            if plan.next_at is not None:
                next_at.append(plan.next_at)
            for name, reason in plan.sleep:
                if self._start(name, wake=False):
                    self.state.observer.metrics.evictions.inc((name, reason.value))
                    log.info("engine_sleep_decided", engine=name, reason=reason.value)
            for name in plan.cancel:
                if self._cancel(name):
                    log.info("engine_wake_cancel_decided", engine=name)
            for name in plan.wake:
                if self._start(name, wake=True):
                    label = self._mechanism(name)
                    self.state.observer.metrics.wakes.inc((name, label))
                    log.info("engine_wake_decided", engine=name, mechanism=label)
        self._alarm.arm(min(next_at) if next_at else None, now)
        if self._close(closed | self._falling_asleep()):
            asyncio.get_running_loop().call_soon(self.pump)

    def _falling_asleep(self) -> set[str]:
        """The engines whose sleep has been started: they take no new request. Their sleep task
        runs from the next turn of the loop, and a request released to the engine meanwhile
        would reach it asleep and never run (seen in scripts/bench_swap.py: one in ~400)."""
        return {
            name
            for name, task in self._ops.items()
            if not task.done() and task.get_name() == f"sleep:{name}"
        }

    def _close(self, closed: set[str]) -> bool:
        """Let exactly the engines in `closed` take no new request; whether that changed."""
        if closed == self._closed:
            return False
        capacity = self.state.admission.capacity
        for name in closed ^ self._closed:
            if name in capacity.names():
                capacity.set_closed(name, name in closed)
        self._closed = closed
        return True

    def operator_wake(self, name: str) -> dict[str, Any]:
        """`llmd wake --engine NAME`: wake on-demand engine `name` now. Refused (ActionRefused)
        for an engine not on demand, one not asleep, or one whose swap group is full."""
        group = self._group_of(name, "wake")
        phase = self.state.fleet.engines[name].phase
        if phase is not EnginePhase.ASLEEP:
            raise ActionRefused(f"wake refused: engine {name} is {phase.value}, not asleep")
        swap, engines = group
        now = time.monotonic()
        views = [self._view(n, now) for n in engines if n in self.supervisors]
        if not has_room(swap.policy, views, name):
            resident = ", ".join(v.name for v in views if v.resident)
            room = (
                f"no room for {name} beside the others' memory"
                if swap.policy.device_bytes
                else f"{swap.policy.max_resident} engine(s) awake at most"
            )
            raise ActionRefused(
                f"wake refused: its swap group has {room}, and {resident} are awake; put one "
                "to sleep first"
            )
        started = self._start(name, wake=True)
        if started:
            self._asked.add(name)
            self.state.observer.metrics.wakes.inc((name, self._mechanism(name)))
            log.info("engine_wake_asked", engine=name)
        return self._answer(name, started)

    def operator_sleep(self, name: str) -> dict[str, Any]:
        """`llmd sleep --engine NAME`: put on-demand engine `name` to sleep now. Refused
        (ActionRefused) for an engine not on demand, not serving, or with requests in flight
        (drain it first). Requests that then come for its model wake it again."""
        self._group_of(name, "sleep")
        engine = self.state.fleet.engines[name]
        if engine.phase is not EnginePhase.SERVING:
            raise ActionRefused(f"sleep refused: engine {name} is {engine.phase.value}")
        capacity = self.state.admission.capacity
        in_flight = capacity.gate(name).in_flight if name in capacity.names() else 0
        if in_flight:
            raise ActionRefused(
                f"sleep refused: engine {name} has {in_flight} requests in flight; "
                f"`llmd drain --engine {name} --wait` first"
            )
        started = self._start(name, wake=False)
        if started:
            self.state.observer.metrics.evictions.inc((name, "operator"))
            log.info("engine_sleep_asked", engine=name)
        return self._answer(name, started)

    def _mechanism(self, name: str) -> str:
        mechanism = self.supervisors[name].mechanism
        return mechanism.value if mechanism is not None else ""

    def _group_of(self, name: str, action: str) -> tuple[SwapGroup, tuple[str, ...]]:
        for group, engines in self.groups.values():
            if name in engines:
                return group, engines
        raise ActionRefused(
            f"{action} refused: engine {name} is not on demand (set on_demand = true in its table)"
        )

    def _answer(self, name: str, started: bool) -> dict[str, Any]:
        engine = self.state.fleet.engines[name]
        return {
            "engine": name,
            "started": started,
            "state": engine.phase.value,
            "predicted_wake_s": round(engine.predicted_wake_s(), 2),
        }

    def close(self) -> None:
        """Cancel the timer and the operations under way (at shutdown)."""
        self._alarm.close()
        for task in [*self._ops.values(), *self._cancels.values()]:
            task.cancel()

    def _view(self, name: str, now: float) -> EngineView:
        fleet, admission = self.state.fleet, self.state.admission
        engine = fleet.engines[name]
        table = self.supervisors[name].engine
        models = set(fleet.serving_models(name))
        capacity = admission.capacity
        drained = name in capacity.names() and capacity.draining(name)
        waiting = sum(1 for entry in admission.scheduler.entries() if entry.model in models)
        waiting = 0 if drained else waiting  # an engine an operator drained is not woken
        in_flight = capacity.gate(name).in_flight if name in capacity.names() else 0
        demand = self.demand.get(name)
        residency = RESIDENCY[engine.phase]
        awake_bytes, asleep_bytes = (
            self.memory.sizes(name)
            if self.memory is not None and name in self.memory.devices
            else (0, 0)
        )
        return EngineView(
            name=name,
            residency=residency,
            in_flight=in_flight,
            waiting=waiting,
            pinned=table.pin,
            awake_since=engine.ready_at if engine.phase is EnginePhase.SERVING else None,
            last_request_at=self.last_request.get(name, engine.ready_at),
            idle_sleep_s=table.idle_sleep_s,
            wake_s=engine.predicted_wake_s(),
            demand=demand.per_minute(now) if demand is not None else 0.0,
            awake_bytes=awake_bytes,
            asleep_bytes=asleep_bytes,
        )

    def _start(self, name: str, *, wake: bool) -> bool:
        """Wake engine `name` (or put it to sleep, or cancel its wake) unless an operation runs
        for it already or its phase does not allow it; whether it started."""
        running = self._ops.get(name)
        if running is not None and not running.done():
            return False
        phase = self.state.fleet.engines[name].phase
        supervisor = self.supervisors[name]
        if wake and phase is EnginePhase.ASLEEP:
            self._ops[name] = asyncio.create_task(_run(supervisor.wake()), name=f"wake:{name}")
            return True
        if not wake and phase in (EnginePhase.SERVING, EnginePhase.WAKING):
            self._ops[name] = asyncio.create_task(_run(supervisor.sleep()), name=f"sleep:{name}")
            self._close(self._closed | {name})  # before any other request is released
            return True
        return False

    def _cancel(self, name: str) -> bool:
        """Cancel engine `name`'s wake under way (unless an operator asked for it, or a cancel
        runs already): a sleep-mode wake goes back to sleep once awake, a boot is stopped."""
        running = self._cancels.get(name)
        if name in self._asked or (running is not None and not running.done()):
            return False
        if self.state.fleet.engines[name].phase is not EnginePhase.WAKING:
            return False
        task = asyncio.create_task(_run(self.supervisors[name].sleep()), name=f"cancel:{name}")
        self._cancels[name] = task
        return True

    def _observe_wakes(self) -> None:
        """Each wake that ended since the last pass, in the wake-seconds histogram."""
        fleet = self.state.fleet
        for name in self.engines:
            engine = fleet.engines.get(name)
            if engine is None:
                continue
            woke = self._phases.get(name) is EnginePhase.WAKING
            if woke and engine.phase is EnginePhase.SERVING and engine.wake_s is not None:
                self.state.observer.metrics.wake_seconds.observe((name,), engine.wake_s)
            serves = engine.phase is EnginePhase.SERVING
            if serves and self._phases.get(name) is not EnginePhase.SERVING:
                self._measure(name, engine.pid)
            self._phases[name] = engine.phase
            op = self._ops.get(name)
            idle = op is None or op.done()
            if engine.phase is EnginePhase.SERVING or (engine.phase is EnginePhase.ASLEEP and idle):
                self._asked.discard(name)

    def _measure(self, name: str, pgid: int | None) -> None:
        """Engine `name` serves from now: read its footprint (a group fit by memory)."""
        if self.memory is not None and name in self.memory.devices and pgid is not None:
            read = self.memory.observe(name, pgid)
            awake, _ = self.memory.sizes(name)
            log.info(
                "engine_footprint_read",
                engine=name,
                awake_gib=round(awake / 2**30, 2),
                measured=read is not None,
            )


async def _run(operation: Coroutine[object, object, bool]) -> None:
    await operation
