"""Deploys on the live engines: runs the deploy state machine (llmd/releases/deploy.py) with the
engine's supervisor, admission's hold and the smoke gate, feeds it the events that come back,
and appends each step to the history file.

- One supervisor per engine runs its releases one after the other: the machine's `StopEngine`
  then `BootEngine` of one engine is one supervisor restart with the new release's table.
- While a deploy holds the engine (`Drain` until `Resume`), admission gives it no request and
  requests for its pool wait in llmd's queues within their timeouts (503 `queue_timeout` with
  Retry-After past them).
- A `canary` boots the new release as a second engine (llmd/releases/canary.py).
- Nothing a step raises leaves the engine held: a step's work that raises comes back as its
  `StepFailed` event (the machine takes the way back to the old release), and an executor that
  raises ends the deploy `failed`; both are recorded with the error.
- A promoted canary whose engine does not boot the new release shows as `adopting` until the
  engine serves it.
- A deploy that llmd's stop cuts ends `interrupted` in the history (the engine boots its
  current release, the old one, at the next start); one a killed llmd left open is closed so
  when the next llmd starts (`close_interrupted`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable
from typing import Any

import structlog

from llmd.config.release import ReleaseConfig, parse_steps
from llmd.errors import ActionRefused, NotFound, ReleaseError
from llmd.releases.canary import (
    CANARY_SUFFIX,
    CanaryFigures,
    adopt,
    adopt_when_serving,
    canary_name,
    remove_canary,
    set_split,
)
from llmd.releases.deploy import advance, start
from llmd.releases.deploy_events import (
    Abort,
    Action,
    BootEngine,
    DeployPlan,
    DeployState,
    Drain,
    Event,
    RecordHistory,
    Resume,
    RunSmoke,
    SetShare,
    StepFailed,
    StopEngine,
    Strategy,
)
from llmd.releases.position import open_deploys, positions, running_release
from llmd.releases.preflight import check_deployable
from llmd.releases.restore import ENDED, table_digest
from llmd.releases.steps import DeployHost, boot, drained, hold, smoke
from llmd.releases.store import ReleaseStore

log = structlog.get_logger("llmd.releases")


_STOPPED = "llmd stopped during the deploy; the engine boots its current release at the next start"
_LEFT_OPEN = "found open at start-up: the llmd that ran it stopped without closing it"


class Deployer:
    """The deploys of one llmd over `host`'s engines, with records and history in `store`;
    one deploy per engine at a time. Each deploy's snapshot is in `host.state.deploys`."""

    def __init__(self, host: DeployHost, store: ReleaseStore) -> None:
        self.host = host
        self.store = store
        self._runs: dict[str, asyncio.Task[None]] = {}
        self._events: dict[str, asyncio.Queue[Event]] = {}
        self._figures: dict[str, CanaryFigures] = {}

    def read_releases(self) -> None:
        """Set each engine's `release` from the store and the table it runs (at start-up, and
        when `llmd restart` applies a table from the config file); a store that cannot be read
        leaves them as they are, logged."""
        try:
            releases, _ = self.store.releases()
            history, _ = self.store.history()
        except ReleaseError as exc:
            log.warning("releases_unreadable", error=str(exc))
            return
        for name, supervisor in self.host.backends.supervisors.items():
            if name in self.host.state.fleet.engines:
                position = running_release(name, supervisor.engine, releases, history)
                self.host.state.fleet.engines[name].release = position.current

    def close_interrupted(self) -> None:
        """Close in the history each deploy an earlier llmd left open (it was killed, or its
        stop could not write): an `interrupted` line, logged `deploy_interrupted`. At start-up,
        before any deploy; a store that cannot be read or written is logged and left."""
        try:
            history, _ = self.store.history()
            for began in open_deploys(history).values():
                kept = ("deploy", "engine", "strategy", "old", "new")
                line: dict[str, Any] = {key: began[key] for key in kept if key in began}
                line |= {"event": "interrupted", "reason": _LEFT_OPEN}
                self.store.append_history(line)
                log.warning("deploy_interrupted", **{k: v for k, v in line.items() if k != "event"})
        except ReleaseError as exc:
            log.warning("releases_unreadable", error=str(exc))

    def deploy(
        self,
        release: str,
        engine: str | None = None,
        strategy: str = "replace",
        steps: str | None = None,
        step_s: float | None = None,
    ) -> dict[str, Any]:
        """Start deploying `release` on `engine` (None: the only engine) by `strategy`
        (`canary`: `steps` such as "5,25,50,100" and `step_s` override `[release]`); its first
        snapshot. Raises NotFound (no such engine), ActionRefused (a deploy under way, the
        engine not serving, the release or the current one cannot boot: with the reason),
        ReleaseError (no such release, the store unreadable), ConfigError (bad steps)."""
        name = self._engine(engine)
        if strategy not in (Strategy.REPLACE, Strategy.CANARY):
            raise ActionRefused(f"deploy refused: no strategy {strategy!r} (replace, canary)")
        old = self.host.state.fleet.engines[name].release
        if old is None:
            raise ActionRefused(
                f"deploy refused: engine {name} runs no recorded release; `llmd release create "
                "NAME --engine " + name + "` records what it runs now"
            )
        config = self.host.state.config.release
        canary = dataclasses.replace(
            config,
            canary_steps=steps or config.canary_steps,
            step_s=config.step_s if step_s is None else step_s,
            max_step_s=max(config.max_step_s, step_s or 0),
        )
        parse_steps(canary.canary_steps)
        return self._start(name, old, release, f"deploy-{release}", Strategy(strategy), canary)

    def rollback(self, engine: str | None = None) -> dict[str, Any]:
        """Abort the deploy under way on `engine`, or, with none, deploy its previous release
        by the same path; the snapshot. Raises NotFound, ActionRefused (no previous release;
        a promoted canary's engine still booting the new release), ReleaseError."""
        name = self._engine(engine)
        if self.host.state.deploys.get(name, {}).get("phase") == "adopting":
            raise ActionRefused(
                f"rollback refused: engine {name} was promoted and is booting the new release "
                "(adopting); roll back once it serves"
            )
        if name in self._events:
            self._events[name].put_nowait(Abort(time.monotonic(), "llmd rollback"))
            return self.host.state.deploys[name]
        current = self.host.state.fleet.engines[name].release
        history, _ = self.store.history()
        position = positions(history).get(name)
        if current is None or position is None or position.previous is None:
            raise ActionRefused(f"rollback refused: engine {name} has no previous release")
        label = f"rollback-{position.previous}"
        config = self.host.state.config.release
        return self._start(name, current, position.previous, label, Strategy.REPLACE, config)

    async def wait(self, engine: str | None = None) -> dict[str, Any]:
        """Wait for `engine`'s deploy to end; its last snapshot."""
        name = self._engine(engine)
        task = self._runs.get(name)
        if task is not None:
            await asyncio.wait({task})
        return self.host.state.deploys.get(name, {})

    async def stop(self) -> None:
        """Cancel the deploys under way (llmd is stopping); each ends `interrupted` in the
        history and the status."""
        for task in self._runs.values():
            task.cancel()
        if self._runs:
            await asyncio.wait(self._runs.values())

    def _engine(self, engine: str | None) -> str:
        """The engine a verb names (None: the only one; canaries are not engines here)."""
        names = [
            name for name in self.host.backends.supervisors if not name.endswith(CANARY_SUFFIX)
        ]
        if engine is None and len(names) == 1:
            return names[0]
        if engine is None:
            raise ActionRefused(f"name the engine (--engine): llmd runs {', '.join(names)}")
        if engine not in names:
            raise NotFound(f"no engine {engine!r}; engines: {', '.join(names) or 'none'}")
        return engine

    def _start(
        self, name: str, old: str, new: str, label: str, strategy: Strategy, config: ReleaseConfig
    ) -> dict[str, Any]:
        if name in self._runs and not self._runs[name].done():
            raise ActionRefused(f"deploy refused: a deploy is under way on engine {name}")
        check_deployable(self.host, self.store, name, old, new, strategy)
        plan = DeployPlan(
            deploy_id=f"{label}-{time.strftime('%Y%m%dT%H%M%S')}",
            engine=name,
            old=old,
            new=new,
            strategy=strategy,
            steps=config.steps(),
            step_s=config.step_s,
            max_step_s=config.max_step_s,
            rules=config,
        )
        state, actions = start(plan, time.monotonic())
        self.host.state.deploys[name] = state.as_snapshot()
        events: asyncio.Queue[Event] = asyncio.Queue()
        self._events[name] = events
        self._runs[name] = asyncio.create_task(
            self._drive(state, actions, events), name=f"deploy:{name}"
        )
        return self.host.state.deploys[name]

    async def _drive(
        self, state: DeployState, actions: list[Action], events: asyncio.Queue[Event]
    ) -> None:
        """Execute, wait for the next event, advance, until the deploy ends."""
        name = state.plan.engine
        work: set[asyncio.Task[None]] = set()
        try:
            await self._execute(state, actions, events, work)
            while not state.done:
                state, actions = advance(state, await events.get())
                self.host.state.deploys[name] = state.as_snapshot()
                await self._execute(state, actions, events, work)
        except Exception as exc:  # recorded as the deploy's failure
            await self._crashed(state, exc)
        except asyncio.CancelledError:  # llmd is stopping (`stop`)
            if not state.done:
                self._mark(state, "interrupted", _STOPPED)
                await self._record(state.plan.history_line("interrupted", reason=_STOPPED))
            raise
        finally:
            for task in work:
                task.cancel()
            del self._events[name]
            hold(self.host, name, False)
            if self._figures.pop(name, None) is not None:
                set_split(self.host, name, 0)

    async def _execute(
        self,
        state: DeployState,
        actions: list[Action],
        events: asyncio.Queue[Event],
        work: set[asyncio.Task[None]],
    ) -> None:
        """Run `actions` in order; those whose end is an event run as tasks that queue it. In
        a canary the new release runs on the engine's canary backend."""
        plan = state.plan
        canary = plan.strategy is Strategy.CANARY
        for action in actions:
            where = plan.engine
            if canary and getattr(action, "release", None) == plan.new:
                where = canary_name(plan.engine)
            match action:
                case RecordHistory(line=line):
                    await self._record(line)
                case Drain(engine=engine, release=release):
                    hold(self.host, engine, True)
                    waiting = drained(self.host, engine, release)
                    work.add(self._later(events, "drain", release, waiting))
                case BootEngine(release=release):
                    booting = boot(self.host, self.store, where, release, canary)
                    work.add(self._later(events, "boot", release, booting))
                case RunSmoke(release=release):
                    gate = smoke(self.host, self.store, where, release, plan.rules)
                    work.add(self._later(events, "smoke", release, gate))
                case Resume(engine=engine, release=release):
                    self.host.state.fleet.engines[engine].release = release
                    hold(self.host, engine, False)
                case SetShare(engine=engine, percent=percent):
                    self._share(engine, percent, plan.rules, events, work)
                case StopEngine(release=release) if canary and release == plan.new:
                    await remove_canary(self.host, plan.engine)
                case StopEngine() if canary:  # promoted: the engine takes the new release
                    booted = await adopt(self.host, self.store, plan.engine, plan.new)
                    if not booted.ok:
                        await self._adopt_retried(state, booted.detail)

    def _share(
        self,
        engine: str,
        percent: int,
        rules: ReleaseConfig,
        events: asyncio.Queue[Event],
        work: set[asyncio.Task[None]],
    ) -> None:
        """Split the pool at `percent`; the figures start again; the first share starts the
        comparison's loop (an `Observed` every second, or fifth of a step)."""
        figures = self._figures.get(engine)
        if figures is None and percent > 0:
            figures = self._figures[engine] = CanaryFigures(engine, rules.buckets())
            self.host.state.observer.on_ended = self._ended
            hold(self.host, canary_name(engine), False)
            work.add(
                asyncio.create_task(self._observe(figures, events, min(1.0, rules.step_s / 5)))
            )
        if figures is not None:
            figures.reset()
        set_split(self.host, engine, percent)

    async def _observe(
        self, figures: CanaryFigures, events: asyncio.Queue[Event], every_s: float
    ) -> None:
        while True:
            await asyncio.sleep(every_s)
            events.put_nowait(figures.observed())

    def _ended(self, record: Any) -> None:
        """A request ended: counted by the canary of its engine; a refused one on the release
        its pool's split assigned it to."""
        split = self.host.state.admission.capacity.splits.get(record.model or "")
        assigned = None
        if record.rejected and split is not None:
            assigned = split.backend_for(record.tenant, record.conversation)
        for figures in self._figures.values():
            figures.record(record, assigned)

    def _later(
        self, events: asyncio.Queue[Event], step: str, release: str, work: Awaitable[Event]
    ) -> asyncio.Task[None]:
        """Run `work` (the `step` of `release`) as a task that queues its event; work that
        raises queues `StepFailed` with the error, so the deploy goes back to the old release
        rather than waiting for an event that never comes."""

        async def run() -> None:
            try:
                event = await work
            except Exception as exc:  # any failure of the step is its event
                log.error(
                    "deploy_step_raised", step=step, release=release, error=repr(exc), exc_info=exc
                )
                event = StepFailed(step, release, time.monotonic(), repr(exc))
            events.put_nowait(event)

        return asyncio.create_task(run())

    async def _adopt_retried(self, state: DeployState, detail: str) -> None:
        """A promoted canary's engine did not boot the new release: recorded (status,
        history, log), the canary keeps all the traffic while the engine's supervisor restarts
        it as usual (backoff); once it serves it takes the traffic back and the canary goes.
        If the supervisor gives up, the deploy fails and the canary serves on."""
        plan = state.plan
        name, canary = plan.engine, canary_name(plan.engine)
        reason = (
            f"promoted, but engine {name} did not boot {plan.new}: {detail}; {canary} serves "
            f"all the traffic while {name} restarts (backoff)"
        )
        self._mark(state, "adopting", reason)
        await self._record(plan.history_line("adopt_failed", reason=reason, detail=detail))
        if not await adopt_when_serving(self.host, name, plan.new):
            gave_up = (
                f"engine {name} gave up booting {plan.new} ({detail}); {canary} serves "
                f"{plan.new}; `llmd restart --engine {name}` boots it again"
            )
            self._mark(state, "failed", gave_up)
            await self._record(plan.history_line("failed", reason=gave_up))
            return
        self._mark(state, "promoted", f"all steps held; engine {name} booted {plan.new} again")
        await self._record(plan.history_line("adopted", release=plan.new))

    async def _crashed(self, state: DeployState, exc: Exception) -> None:
        """The executor itself raised: the deploy failed, recorded with the error. The hold
        and the split go (`_drive`); a canary goes when the engine serves (else it serves
        on, beside the engine's supervisor restarting it)."""
        plan = state.plan
        reason = f"the deploy's executor raised in phase {state.phase}: {exc!r}"
        log.error("deploy_executor_raised", engine=plan.engine, error=repr(exc), exc_info=exc)
        self._mark(state, "failed", reason)
        await self._record(plan.history_line("failed", reason=reason))
        canary = canary_name(plan.engine)
        if (
            canary in self.host.backends.supervisors
            and self.host.state.fleet.engines[plan.engine].serving
        ):
            try:
                await remove_canary(self.host, plan.engine)
            except Exception as again:  # logged; the canary stays
                log.error("deploy_canary_not_removed", engine=plan.engine, error=repr(again))

    def _mark(self, state: DeployState, phase: str, reason: str) -> None:
        """Show `phase` and `reason` in the status's deploy of `state`'s engine (past the
        state machine's own end: the promoted engine's boot, an executor's failure)."""
        snapshot = {**state.as_snapshot(), "phase": phase, "reason": reason}
        self.host.state.deploys[state.plan.engine] = snapshot

    async def _record(self, line: dict[str, Any]) -> None:
        """Log `line` and append it to the history; an ended deploy's line carries the digest
        of the config file's table (`config`: what a later start compares, restore.py)."""
        event = str(line["event"])
        if event in (*ENDED, "failed"):
            self.host.state.observer.deploy_ended(
                str(line["engine"]), str(line.get("strategy", "")), event
            )
        table = self.host.file_tables.get(str(line["engine"]))
        if event in ENDED and table is not None:
            line = {**line, "config": table_digest(table)}
        name = event if event.startswith("deploy_") else f"deploy_{event}"
        log.info(name, **{k: v for k, v in line.items() if k != "event"})
        try:
            await asyncio.to_thread(self.store.append_history, line)
        except ReleaseError as exc:
            log.error("deploy_history_unwritable", error=str(exc))
