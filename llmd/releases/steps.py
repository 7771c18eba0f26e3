"""The steps a deploy runs on the live engines (llmd/releases/orchestrator.py executes the state
machine with them): hold an engine, wait for its drain, boot a release (in place, or beside it
as a canary) and run the smoke gate on it, with the tokenizer llmd's validation counts with."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Protocol

from llmd.config import EngineConfig
from llmd.config.release import ReleaseConfig
from llmd.engine.args import engine_auth_headers
from llmd.errors import ReleaseError
from llmd.releases.deploy_events import Booted, Drained, SmokeDone
from llmd.releases.golden import load_golden, pinned_max_model_len
from llmd.releases.position import boot_table
from llmd.releases.smoke import SmokeExpectations
from llmd.releases.smoke_runner import run_smoke
from llmd.releases.store import ReleaseStore
from llmd.state import DaemonState
from llmd.supervisor.state import EnginePhase
from llmd.supervisor.supervisor import Supervisor

_POLL_S = 0.1


class EngineSet(Protocol):
    """The engines at work as a deploy uses them (the daemon's `Backends`,
    llmd/daemon/backends.py): their supervisors, a table for an engine's next boot, a canary
    added and removed."""

    supervisors: dict[str, Supervisor]

    def start_engine(self, name: str) -> bool: ...

    def add_engine(self, name: str, table: EngineConfig) -> None: ...

    def use_engine_table(self, name: str, table: EngineConfig) -> None: ...

    async def remove_engine(self, name: str) -> None: ...


class Operations(Protocol):
    """The operator actions as a deploy uses them (the daemon's `OperatorActions`,
    llmd/daemon/actions.py): which one is under way, and a wait for a drain."""

    under_way: str | None

    async def wait_drained(
        self, deadline_s: float, hurry: asyncio.Event | None = None, engine: str | None = None
    ) -> int: ...


class DeployHost(Protocol):
    """The daemon as a deploy sees it: its state, its engines at work, its operator actions.
    A protocol, so that releases/ sits below the daemon that runs it."""

    state: DaemonState

    @property
    def file_tables(self) -> dict[str, EngineConfig]:
        """The config file's engine tables as last read (a deploy runs others)."""

    @property
    def backends(self) -> EngineSet: ...

    @property
    def actions(self) -> Operations: ...


async def drained(host: DeployHost, engine: str, release: str) -> Drained:
    """Wait until nothing runs on `engine` (up to the drain timeout, then what remains is
    ended in-band)."""
    timeout = host.state.config.server.drain_timeout_s
    await host.actions.wait_drained(timeout, engine=engine)
    return Drained(release, time.monotonic())


async def boot(
    host: DeployHost, store: ReleaseStore, engine: str, release: str, beside: bool
) -> Booted:
    """Swap in `release`'s table and restart `engine` (`beside`: start it as a new,
    held engine from the table of the one it is the canary of); Booted when it serves, or
    when it exits or gives up first, or after its start timeout. An engine asleep on demand
    boots the table when its swap group next wakes it (a request for its model waits): until
    then this waits, and the start timeout counts from the wake."""
    base = engine.rsplit(".", 1)[0] if beside else engine
    try:
        record = await asyncio.to_thread(store.get, release)
        table = boot_table(record, host.backends.supervisors[base].engine)
    except ReleaseError as exc:
        return Booted(release, False, time.monotonic(), str(exc))
    began = time.monotonic()
    if beside:
        host.backends.add_engine(engine, table)
        hold(host, engine, True)
        host.state.fleet.engines[engine].release = release
    supervisor = host.backends.supervisors[engine]
    state = supervisor.state
    failures = _failures(state.exits_by_reason)
    if not beside:
        host.backends.use_engine_table(engine, table)
        # Asleep on demand: it boots `table` when its swap group next wakes it.
        asleep = supervisor.boot_on_wake()
        if not asleep and not await supervisor.restart():
            host.backends.start_engine(engine)  # gave up: run it again (in backoff: it boots next)
    while time.monotonic() - began < table.start_timeout_s + 5:
        if state.phase is EnginePhase.ASLEEP:
            began = time.monotonic()  # its start timeout counts from its wake
        if state.serving and state.ready_at is not None and state.ready_at >= began:
            return Booted(release, True, time.monotonic())
        exited = _failures(state.exits_by_reason) > failures
        if exited or state.phase.value == "failed":
            detail = state.last_exit.detail if state.last_exit else state.phase.value
            return Booted(release, False, time.monotonic(), detail)
        await asyncio.sleep(_POLL_S)
    return Booted(release, False, time.monotonic(), "not serving within its start timeout")


async def smoke(
    host: DeployHost, store: ReleaseStore, engine: str, release: str, rules: ReleaseConfig
) -> SmokeDone:
    """The smoke gate on the engine now running `release`, counting with the tokenizer
    llmd's validation will use for it."""
    supervisor = host.backends.supervisors[engine]
    table = supervisor.engine
    try:
        record = await asyncio.to_thread(store.get, release)
        golden = load_golden(rules.golden_prompts)
    except ReleaseError as exc:
        return SmokeDone(release, False, time.monotonic(), "setup", str(exc))
    validator = host.state.validators.for_model(table.model_name)
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
        headers=engine_auth_headers(table),
    )
    return SmokeDone(
        release, report.passed, time.monotonic(), report.failed_check or "", report.summary()
    )


def hold(host: DeployHost, engine: str, held: bool) -> None:
    """A deploy holds `engine` (it takes no request; its pool's requests queue) or not."""
    capacity = host.state.admission.capacity
    if engine in capacity.names():
        capacity.set_held(engine, held)
        host.state.admission.pump()


def _failures(exits: Mapping[str, int]) -> int:
    """Exits llmd did not ask for (an operator's or a deploy's restart is not one)."""
    return sum(count for kind, count in exits.items() if kind != "restart_requested")
