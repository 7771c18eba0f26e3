"""The backends at work: a supervisor task per engine and a probe per upstream, and who joins
and leaves (at start-up, on a reload, by `llmd restart --engine`, for a deploy's canary).
What they publish and their clients are the fleet's (llmd/backends/fleet.py)."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Mapping

import structlog

from llmd.backends.upstream import run_probe
from llmd.config import Config, EngineConfig, UpstreamConfig
from llmd.config.backends import shared_gpus
from llmd.config.swap import group_of
from llmd.daemon.reload import changed_engine_keys
from llmd.daemon.swapping import starts_asleep
from llmd.engine.launch import installed_engine_build
from llmd.engine.sleep import sleep_mechanism
from llmd.errors import ConfigError
from llmd.routing.backend import BackendKind
from llmd.state import DaemonState
from llmd.supervisor.leftovers import stop_unclaimed
from llmd.supervisor.state import EnginePhase
from llmd.supervisor.supervisor import Supervisor
from llmd.validation.pools import model_sources

log = structlog.get_logger("llmd.backends")


ApplyTables = Callable[[Mapping[str, EngineConfig]], None]


class Backends:
    """The engines' supervisors and the upstreams' probes over `state` (its fleet, admission's
    pools, validation), for the engine and upstream tables of `state.config`.

    Each engine joins the fleet and its pools when supervised, each upstream when its table
    applies; the supervisors boot, and the probes run, from `start()` on.
    """

    def __init__(
        self,
        state: DaemonState,
        apply_tables: ApplyTables,
        on_members_changed: Callable[[], None],
    ) -> None:
        self.state = state
        # Configures every part from the config in use with these engine tables (the daemon's
        # `apply`; raises ConfigError).
        self.apply_tables = apply_tables
        # Runs when an engine joined or left outside a reload (the daemon rescrapes the new set).
        self.on_members_changed = on_members_changed
        config = state.config
        # One lock per GPU that several engines share: they boot one after the other.
        self.boot_locks = {gpu: asyncio.Lock() for gpu in shared_gpus(config.engine_tables)}
        # One lock per swap group: its engines' first boots run one at a time, those that
        # start asleep first (llmd/supervisor/supervisor.py: `start_lock`).
        self.start_locks = {name: asyncio.Lock() for name in config.swap_groups}
        self.supervisors: dict[str, Supervisor] = {}
        # The upstream tables the fleet runs (a reload diffs the new ones against them).
        self.upstream_tables: dict[str, UpstreamConfig] = dict(config.upstreams)
        # Each running supervisor's task, by engine: what the daemon's main loop waits on. An
        # engine llmd removes leaves it before its supervisor stops (`remove_engine`).
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self.probes: dict[str, asyncio.Task[None]] = {}
        # The names each engine's pools hold beyond its configured one (`engine_changed`).
        self._engine_models: dict[str, tuple[str, ...]] = {}
        # Engine tables of a reload, kept for `llmd restart [--engine NAME]` (None: removed).
        self.pending: dict[str, EngineConfig | None] = {}
        self._started = False
        for name, engine in config.engine_tables.items():
            self.supervise(name, engine)

    async def stop_unclaimed(self) -> None:
        """Stop what a killed llmd left of engines this one does not run (a canary's, one
        removed from the config since: llmd.supervisor.leftovers), before any engine boots;
        each engine's supervisor stops what was left of its own. SIGKILL after the longest
        `stop_timeout_s` of the configured engines."""
        paths = self.state.paths
        claimed = {paths.pid_file_of(name) for name in self.supervisors}
        timeout_s = max(
            (s.engine.stop_timeout_s for s in self.supervisors.values()),
            default=EngineConfig.stop_timeout_s,
        )
        stopped = await asyncio.to_thread(stop_unclaimed, paths, claimed, timeout_s)
        for engine, pids in stopped.items():
            log.warning("engine_leftover_stopped", engine=engine, pids=pids, configured=False)

    def start(self) -> None:
        """Boot every engine and probe every upstream (at start-up; from then on an upstream
        a reload adds is probed at once)."""
        self._started = True
        asleep = starts_asleep(self.state.config)  # their first boots go first
        for name in sorted(self.supervisors, key=lambda name: name not in asleep):
            self.start_engine(name)
        for name in self.state.fleet.upstreams:
            self._start_probe(name)

    # -- engines ------------------------------------------------------------------------------

    def supervise(self, name: str, engine: EngineConfig) -> None:
        """A supervisor for engine `name` (its state in the fleet, its gate in the pools); it
        boots when `start_engine` runs it."""
        fleet, admission = self.state.fleet, self.state.admission
        if name not in fleet.engines:
            fleet.add_engine(name, engine)
        if name not in admission.capacity.names():
            admission.add_backend(name, BackendKind.ENGINE, [engine.model_name])
        locks = [self.boot_locks[gpu] for gpu in sorted(engine.devices) if gpu in self.boot_locks]
        mechanism = (
            sleep_mechanism(engine, installed_engine_build(engine.python))
            if engine.on_demand
            else None
        )
        self.supervisors[name] = Supervisor(
            name,
            engine,
            self.state.config.supervisor,
            self.state.paths,
            fleet.engines[name],
            boot_locks=locks,
            on_change=functools.partial(self.engine_changed, name),
            mechanism=mechanism,
            start_asleep=name in starts_asleep(self.state.config),
            start_lock=self.start_locks.get(group_of(self.state.config.swap_groups, name) or ""),
        )

    def start_engine(self, name: str) -> bool:
        """Run engine `name`'s supervisor when it is not running (at start-up, when added, or
        after it gave up: an operator's restart); whether it started one. Raises KeyError (no
        such engine)."""
        task = self.tasks.get(name)
        if task is not None and not task.done():
            return False
        supervisor = self.supervisors[name]
        self.tasks[name] = asyncio.create_task(supervisor.run(), name=f"engine:{name}")
        return True

    def add_engine(self, name: str, table: EngineConfig) -> None:
        """A canary: engine `name` supervised and booted beside the configured ones (in no
        config file; its pool is its table's model)."""
        self.supervise(name, table)
        self.start_engine(name)
        self.on_members_changed()

    async def remove_engine(self, name: str) -> None:
        """Stop engine `name` and forget it (a canary's end, a reload's removal applied): it
        leaves its pools (requests running there were drained first) and the fleet. Raises
        KeyError (no such engine)."""
        supervisor = self.supervisors.pop(name)
        # Out of the main loop's view before its task ends: a supervisor llmd stopped has not
        # ended on its own (the daemon would stop llmd).
        task = self.tasks.pop(name, None)
        await supervisor.stop()
        if task is not None:
            await asyncio.wait({task})
        self.state.admission.remove_backend(name)
        self.state.fleet.remove(name)
        self.on_members_changed()

    def ready(self) -> bool:
        """What systemd hears as READY: every engine has booted (serving) or given up, and at
        least one serves (an llmd of upstreams only is ready at once). Upstreams, outside
        llmd's control, do not hold it back; `/ready` says whether each model is served."""
        phases = [state.phase for state in self.state.fleet.engines.values()]
        done = (EnginePhase.SERVING, EnginePhase.FAILED, EnginePhase.ASLEEP)
        booted = all(p in done for p in phases)
        serving = (EnginePhase.SERVING, EnginePhase.ASLEEP)
        return booted and (not phases or any(p in serving for p in phases))

    def running(self) -> list[Supervisor]:
        """The supervisors whose task runs (not ended, not given up)."""
        return [
            supervisor
            for name, supervisor in self.supervisors.items()
            if name in self.tasks and not self.tasks[name].done()
        ]

    async def stop_engines(self) -> None:
        """Stop every engine, all at once, and wait for their supervisors' tasks (at
        shutdown). Raises what a supervisor's `stop()` raises."""
        await asyncio.gather(*(s.stop() for s in self.supervisors.values()))
        if self.tasks:
            await asyncio.wait(self.tasks.values())

    def configure(self, config: Config) -> None:
        """`config`'s restart policy for every supervisor, and each engine's client the API
        key of the engine table in use."""
        for name, supervisor in self.supervisors.items():
            supervisor.policy = config.supervisor
            self.state.fleet.configure_engine(name, supervisor.engine)

    # -- engine tables: a reload's, applied by `llmd restart`, and a deploy's ---------------

    @property
    def pending_engine(self) -> EngineConfig | None:
        """The `main` engine's pending table, when it alone changed (one [engine])."""
        return self.pending.get("main") if set(self.pending) == {"main"} else None

    def pending_engines(self) -> list[str]:
        """The engines whose table a reload kept pending."""
        return list(self.pending)

    async def apply_pending(self, name: str) -> list[str] | None:
        """Apply engine `name`'s table a reload kept pending, before it (re)starts: a changed
        table is the next boot's, a new engine is added and boots, a removed one is stopped
        and leaves its pools. The keys it changed (`engines.NAME` for an engine added or
        removed); None when nothing was pending for `name`. Raises ConfigError (as
        `apply_tables`)."""
        if name not in self.pending:
            return None
        table = self.pending.pop(name)
        tables = dict(self.state.config.engine_tables)
        current = tables.get(name)
        if table is None:
            await self.remove_engine(name)
            del tables[name]
            keys = [f"engines.{name}"]
        elif current is None:
            tables[name] = table
            self.supervise(name, table)
            keys = [f"engines.{name}"]
        else:
            prefix = "engine" if set(tables) == {"main"} else f"engines.{name}"
            keys = changed_engine_keys(current, table, prefix)
            tables[name] = table
            self.supervisors[name].engine = table
            self.state.fleet.configure_engine(name, table)
        self.apply_tables(tables)
        if current is None and table is not None:
            self.start_engine(name)
        return keys

    def use_engine_table(self, name: str, table: EngineConfig) -> None:
        """A deploy runs `table` on engine `name` from its next boot (validation's tokenizer
        and the engine's client follow now); the config file is not changed. Raises
        ConfigError (the tenants file, as `apply_tables`): then the engine keeps its table;
        KeyError (no such engine)."""
        tables = {**self.state.config.engine_tables, name: table}
        supervisor = self.supervisors[name]
        before, supervisor.engine = supervisor.engine, table
        try:
            self.apply_tables(tables)
        except ConfigError:
            supervisor.engine = before
            raise

    # -- models -------------------------------------------------------------------------------

    def engine_changed(self, name: str) -> None:
        """A supervisor's phase changed: when the engine serves other names than its configured
        one (several --served-model-name, LoRA adapters: its /v1/models at ready), it moves to
        those pools and they get validators; then admission runs."""
        fleet, capacity = self.state.fleet, self.state.admission.capacity
        if name in fleet.engines and name in capacity.names():
            models = fleet.serving_models(name)
            configured = (fleet.engines[name].model,)
            if models != self._engine_models.get(name, configured):
                self._engine_models[name] = models
                capacity.set_models(name, models)
                self.configure_validators()
                log.info("engine_models_listed", engine=name, models=list(models))
        self.state.admission.pump()

    def configure_validators(self) -> None:
        """Validation's policy from the config in use, and a validator for each model the
        backends serve."""
        sources = model_sources(self.state.config, self.state.fleet.upstream_models())
        self.state.validators.configure(self.state.config, sources)

    # -- upstreams ----------------------------------------------------------------------------

    def apply_upstreams(self, config: Config) -> None:
        """Pool membership of the upstreams: a new one joins (and is probed), a changed one
        is replaced (new client, new breaker), a removed one takes no new request (those
        running there finish)."""
        fleet, admission = self.state.fleet, self.state.admission
        for name, old in list(self.upstream_tables.items()):
            if config.upstreams.get(name) != old:
                probe = self.probes.pop(name, None)
                if probe is not None:
                    probe.cancel()
                admission.remove_backend(name)
                fleet.remove(name)
                del self.upstream_tables[name]
                log.info("upstream_removed", upstream=name)
        for name, upstream in config.upstreams.items():
            if name in self.upstream_tables:
                continue
            fleet.add_upstream(name, upstream)
            admission.add_backend(name, BackendKind.UPSTREAM, upstream.models)
            self.upstream_tables[name] = upstream
            if self._started:  # running: probe it now (at start-up, `start` does)
                self._start_probe(name)
            log.info("upstream_added", upstream=name, url=upstream.url)

    def _start_probe(self, name: str) -> None:
        fleet, capacity = self.state.fleet, self.state.admission.capacity
        breaker = capacity.breaker(name)
        assert breaker is not None
        self.probes[name] = asyncio.create_task(
            run_probe(
                fleet.upstreams[name],
                fleet.client(name),
                breaker,
                lambda: self.state.config.routing.probe_interval_s,
                lambda models: self._upstream_listed(name, models),
            ),
            name=f"probe:{name}",
        )

    def _upstream_listed(self, name: str, models: tuple[str, ...]) -> None:
        """An upstream's /v1/models answered: it serves, and without configured `models`,
        what it lists is its pool membership."""
        upstream = self.state.fleet.upstreams.get(name)
        if upstream is not None and not upstream.configured and upstream.models != models:
            upstream.models = models
            self.state.admission.capacity.set_models(name, models)
            self.configure_validators()
            log.info("upstream_models_listed", upstream=name, models=list(models))
        self.state.admission.upstream_answered(name)  # it serves from its first answer on
