"""Deploys on the live engines: runs the deploy state machine (llmd/releases/deploy.py) with the
engine's supervisor, admission's hold and the smoke gate, feeds it the events that come back,
and appends each step to the history file.

One supervisor per engine runs its releases one after the other: the machine's `StopEngine`
then `BootEngine` of one engine is one supervisor restart with the new release's table. While a
deploy holds the engine (`Drain` until `Resume`), admission gives it no request and requests
for its pool wait in llmd's queues within their timeouts (503 `queue_timeout` with Retry-After
past them). Only `replace` runs here; `canary` is refused until it is wired.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Mapping
from typing import Any, Protocol

import structlog

from llmd.actions import OperatorActions
from llmd.config import EngineConfig
from llmd.errors import ActionRefused, NotFound, ReleaseError
from llmd.releases.deploy import advance, start
from llmd.releases.deploy_events import (
    Abort,
    Action,
    Booted,
    BootEngine,
    DeployPlan,
    DeployState,
    Drain,
    Drained,
    Event,
    RecordHistory,
    Resume,
    RunSmoke,
    SmokeDone,
    Strategy,
)
from llmd.releases.golden import load_golden, pinned_max_model_len
from llmd.releases.position import boot_table, cannot_boot, positions, running_release
from llmd.releases.settings import ReleaseConfig
from llmd.releases.smoke import SmokeExpectations
from llmd.releases.smoke_runner import run_smoke
from llmd.releases.store import ReleaseStore
from llmd.state import DaemonState
from llmd.supervisor.supervisor import Supervisor

log = structlog.get_logger("llmd.releases")

_POLL_S = 0.1


class DeployHost(Protocol):
    """The daemon as a deploy sees it."""

    state: DaemonState
    supervisors: dict[str, Supervisor]
    actions: OperatorActions

    def use_engine_table(self, name: str, table: EngineConfig) -> None:
        """Make `table` engine `name`'s (its supervisor's next boot, validation's tokenizer)."""
        ...

    def start_engine(self, name: str) -> bool:
        """Run engine `name`'s supervisor again when it gave up; whether it did."""
        ...


class Deployer:
    """The deploys of one llmd over `host`'s engines, with records and history in `store`;
    one deploy per engine at a time. Each deploy's snapshot is in `host.state.deploys`."""

    def __init__(self, host: DeployHost, store: ReleaseStore) -> None:
        self.host = host
        self.store = store
        self._runs: dict[str, asyncio.Task[None]] = {}
        self._events: dict[str, asyncio.Queue[Event]] = {}

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
        for name, supervisor in self.host.supervisors.items():
            if name in self.host.state.fleet.engines:
                position = running_release(name, supervisor.engine, releases, history)
                self.host.state.fleet.engines[name].release = position.current

    def deploy(
        self, release: str, engine: str | None = None, strategy: str = "replace"
    ) -> dict[str, Any]:
        """Start deploying `release` on `engine` (None: the only engine); its first snapshot.
        Raises NotFound (no such engine), ActionRefused (a deploy under way, the engine not
        serving, canary asked, the release or the current one cannot boot: with the reason),
        ReleaseError (no such release, the store unreadable)."""
        name = self._engine(engine)
        if strategy != Strategy.REPLACE:
            raise ActionRefused(
                f"deploy refused: strategy {strategy!r} is not wired yet; use replace"
            )
        old = self.host.state.fleet.engines[name].release
        if old is None:
            raise ActionRefused(
                f"deploy refused: engine {name} runs no recorded release; `llmd release create "
                "NAME --engine " + name + "` records what it runs now"
            )
        return self._start(name, old, release, f"deploy-{release}")

    def rollback(self, engine: str | None = None) -> dict[str, Any]:
        """Abort the deploy under way on `engine`, or, with none, deploy its previous release
        by the same path; the snapshot. Raises NotFound, ActionRefused (no previous release),
        ReleaseError."""
        name = self._engine(engine)
        if name in self._events:
            self._events[name].put_nowait(Abort(time.monotonic(), "llmd rollback"))
            return self.host.state.deploys[name]
        current = self.host.state.fleet.engines[name].release
        history, _ = self.store.history()
        position = positions(history).get(name)
        if current is None or position is None or position.previous is None:
            raise ActionRefused(f"rollback refused: engine {name} has no previous release")
        return self._start(name, current, position.previous, f"rollback-{position.previous}")

    async def wait(self, engine: str | None = None) -> dict[str, Any]:
        """Wait for `engine`'s deploy to end; its last snapshot."""
        name = self._engine(engine)
        task = self._runs.get(name)
        if task is not None:
            await asyncio.wait({task})
        return self.host.state.deploys.get(name, {})

    async def stop(self) -> None:
        """Cancel the deploys under way (llmd is stopping)."""
        for task in self._runs.values():
            task.cancel()
        if self._runs:
            await asyncio.wait(self._runs.values())

    def _engine(self, engine: str | None) -> str:
        names = list(self.host.supervisors)
        if engine is None and len(names) == 1:
            return names[0]
        if engine is None:
            raise ActionRefused(f"name the engine (--engine): llmd runs {', '.join(names)}")
        if engine not in names:
            raise NotFound(f"no engine {engine!r}; engines: {', '.join(names) or 'none'}")
        return engine

    def _start(self, name: str, old: str, new: str, label: str) -> dict[str, Any]:
        if name in self._runs and not self._runs[name].done():
            raise ActionRefused(f"deploy refused: a deploy is under way on engine {name}")
        if self.host.actions.under_way is not None:
            raise ActionRefused(f"deploy refused: a {self.host.actions.under_way} is under way")
        if not self.host.state.fleet.engines[name].serving:
            phase = self.host.state.fleet.engines[name].phase.value
            raise ActionRefused(f"deploy refused: engine {name} is {phase}; deploy once it serves")
        if old == new:
            raise ActionRefused(f"deploy refused: engine {name} runs {new} already")
        current = self.host.supervisors[name].engine
        for release, role in ((self.store.get(new), "new"), (self.store.get(old), "previous")):
            why = cannot_boot(release)
            if why is not None:
                raise ActionRefused(f"deploy refused: the {role} release cannot boot: {why}")
            boot_table(release, current)  # raises ReleaseError: it cannot replace this engine
        config = self.host.state.config.release
        plan = DeployPlan(
            deploy_id=f"{label}-{time.strftime('%Y%m%dT%H%M%S')}",
            engine=name,
            old=old,
            new=new,
            strategy=Strategy.REPLACE,
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
        finally:
            for task in work:
                task.cancel()
            del self._events[name]
            self._hold(name, False)

    async def _execute(
        self,
        state: DeployState,
        actions: list[Action],
        events: asyncio.Queue[Event],
        work: set[asyncio.Task[None]],
    ) -> None:
        """Run `actions` in order; those whose end is an event run as tasks that queue it."""
        plan = state.plan
        for action in actions:
            match action:
                case RecordHistory(line=line):
                    await self._record(line)
                case Drain(engine=engine, release=release):
                    self._hold(engine, True)
                    work.add(self._later(events, self._drained(engine, release)))
                case BootEngine(engine=engine, release=release):
                    work.add(self._later(events, self._boot(engine, release)))
                case RunSmoke(engine=engine, release=release):
                    work.add(self._later(events, self._smoke(engine, release, plan.rules)))
                case Resume(engine=engine, release=release):
                    self.host.state.fleet.engines[engine].release = release
                    self._hold(engine, False)
                case _:  # StopEngine: the next BootEngine restarts the supervisor; SetShare: canary
                    pass

    def _later(self, events: asyncio.Queue[Event], work: Awaitable[Event]) -> asyncio.Task[None]:
        async def run() -> None:
            events.put_nowait(await work)

        return asyncio.create_task(run())

    async def _record(self, line: dict[str, Any]) -> None:
        event = str(line["event"])
        name = event if event.startswith("deploy_") else f"deploy_{event}"
        log.info(name, **{k: v for k, v in line.items() if k != "event"})
        try:
            await asyncio.to_thread(self.store.append_history, line)
        except ReleaseError as exc:
            log.error("deploy_history_unwritable", error=str(exc))

    async def _drained(self, engine: str, release: str) -> Drained:
        timeout = self.host.state.config.server.drain_timeout_s
        await self.host.actions.wait_drained(timeout, engine=engine)
        return Drained(release, time.monotonic())

    async def _boot(self, engine: str, release: str) -> Booted:
        """Swap in `release`'s table and restart the engine; Booted when it serves, or when
        it exits or gives up first, or after its start timeout."""
        supervisor = self.host.supervisors[engine]
        state = supervisor.state
        try:
            table = boot_table(await asyncio.to_thread(self.store.get, release), supervisor.engine)
        except ReleaseError as exc:
            return Booted(release, False, time.monotonic(), str(exc))
        failures = _failures(state.exits_by_reason)
        began = time.monotonic()
        self.host.use_engine_table(engine, table)
        if not await supervisor.restart():
            self.host.start_engine(engine)  # gave up: run it again (in backoff: it boots next)
        while time.monotonic() - began < table.start_timeout_s + 5:
            if state.serving and state.ready_at is not None and state.ready_at >= began:
                return Booted(release, True, time.monotonic())
            exited = _failures(state.exits_by_reason) > failures
            if exited or state.phase.value == "failed":
                detail = state.last_exit.detail if state.last_exit else state.phase.value
                return Booted(release, False, time.monotonic(), detail)
            await asyncio.sleep(_POLL_S)
        return Booted(release, False, time.monotonic(), "not serving within its start timeout")

    async def _smoke(self, engine: str, release: str, rules: ReleaseConfig) -> SmokeDone:
        """The smoke gate on the engine now running `release`, counting with the tokenizer
        llmd's validation will use for it."""
        supervisor = self.host.supervisors[engine]
        table = supervisor.engine
        try:
            record = await asyncio.to_thread(self.store.get, release)
            golden = load_golden(rules.golden_prompts)
        except ReleaseError as exc:
            return SmokeDone(release, False, time.monotonic(), "setup", str(exc))
        validator = self.host.state.validators.for_model(table.model_name)
        if validator.loading is not None:
            await asyncio.wait({validator.loading})
        expected = SmokeExpectations(
            served_model_name=table.model_name,
            max_model_len=pinned_max_model_len(record),
            boot_timeout_s=table.start_timeout_s,
            latency_s=rules.golden_latency_s,
            degenerate_share=rules.degenerate_share,
        )
        report = await run_smoke(
            supervisor.socket,
            expected,
            boot_s=supervisor.state.boot_s,
            counter=validator.local,
            golden=golden,
            max_tokens=rules.golden_max_tokens,
            engine_log_tail=supervisor.recent_output(),
        )
        return SmokeDone(
            release, report.passed, time.monotonic(), report.failed_check or "", report.summary()
        )

    def _hold(self, engine: str, held: bool) -> None:
        capacity = self.host.state.admission.capacity
        if engine in capacity.names():
            capacity.set_held(engine, held)
            self.host.state.admission.pump()


def _failures(exits: Mapping[str, int]) -> int:
    """Exits llmd did not ask for (an operator's or a deploy's restart is not one)."""
    return sum(count for kind, count in exits.items() if kind != "restart_requested")
