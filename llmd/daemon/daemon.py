"""The daemon: owns the event loop, the signals and the lifecycle of llmd's parts.

serve() → startup() → main_loop() → shutdown(), as uvicorn's Server reads. Signal handlers only
queue the signal; the main loop acts on it. uvicorn runs embedded with its own signal capture
disabled, so signals are handled here alone. Reload is start-up again (gunicorn's arbiter):
`LiveConfig.apply` (llmd/daemon/live_config.py) configures every part from a config, at
start-up and on each reload alike.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import structlog

from llmd import exitcodes
from llmd.admission.control import Admission
from llmd.backends.fleet import Fleet, PoolLimits
from llmd.backends.relisting import ModelRelisting
from llmd.config import Config, EngineConfig, ResponsesConfig
from llmd.daemon.actions import OperatorActions
from llmd.daemon.admin_api import AdminApp
from llmd.daemon.backends import Backends
from llmd.daemon.devices import check_devices
from llmd.daemon.housekeeping import Housekeeping
from llmd.daemon.listeners import Listeners, bind_tcp, bind_unix
from llmd.daemon.live_config import LiveConfig
from llmd.daemon.reload import with_engine_tables
from llmd.daemon.swapping import Swapping
from llmd.daemon.telemetry import Telemetry
from llmd.daemon.usage import UsageKeeper
from llmd.daemon.watchdog import Watchdog
from llmd.endpoints.store import FILE_NAME as STORE_FILE
from llmd.endpoints.store import ResponseStore
from llmd.errors import ActionRefused, ConfigError, EngineGaveUp
from llmd.gpu.preflight import GpuReport
from llmd.logs import line_limiter
from llmd.proxy.app import build_app
from llmd.proxy.connections import limited_protocol
from llmd.proxy.protocol import bounded_protocol
from llmd.releases.orchestrator import Deployer
from llmd.releases.restore import restore
from llmd.releases.store import ReleaseStore
from llmd.runtime import RuntimePaths, check_writable
from llmd.state import DaemonState
from llmd.systemd.notify import Notifier
from llmd.systemd.reporter import ServiceReporter
from llmd.telemetry.observer import Observer
from llmd.telemetry.status_metrics import StatusCollector
from llmd.validation.pools import Validators

log = structlog.get_logger("llmd.daemon.daemon")

# The statuses `llmd serve` exits with (llmd/exitcodes.py says when each is used).
EXIT_OK = exitcodes.OK
EXIT_FAILURE = exitcodes.FAILURE
EXIT_ENGINE_GAVE_UP = exitcodes.ENGINE_GAVE_UP
EXIT_CONFIG = exitcodes.CONFIG
TICK_S = 1.0
_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class Daemon:
    """One llmd instance: the public proxy, the admin API, the supervised engines and the
    upstreams.

    `listen`, `runtime_dir` and `state_dir` are the command line's overrides of the config
    file's values; a reload keeps them.
    """

    live_config: LiveConfig  # the config in use and the parts it configures

    def __init__(
        self,
        config: Config,
        *,
        listen: str | None = None,
        runtime_dir: str | None = None,
        state_dir: str | None = None,
    ) -> None:
        self.state_dir = Path(state_dir or config.server.state_dir)
        store = ReleaseStore(self.state_dir)
        # The config file's engine tables: a deploy, or the current releases restored here,
        # may run others (llmd/releases/restore.py).
        file_tables = dict(config.engine_tables)
        tables, self.restorations = restore(store, file_tables)
        config = with_engine_tables(config, tables)
        self.paths = RuntimePaths(Path(config.server.runtime_dir))
        fleet = Fleet(self.paths)
        for name, engine in config.engine_tables.items():
            fleet.add_engine(name, engine)
        for name, upstream in config.upstreams.items():
            fleet.add_upstream(name, upstream)
        self.state = DaemonState(
            config=config,
            paths=self.paths,
            fleet=fleet,
            admission=Admission(config, fleet.engines),
            validators=Validators(fleet.client_of, lambda model: PoolLimits(fleet, model)),
            observer=Observer(config.telemetry.top_tenants, config.logging.requests),
        )
        self.telemetry = Telemetry(self.state.observer, self.state.admission.engine_sampled)
        # Usage and the token budgets, kept in the state directory: the budgets start where
        # the last llmd left them.
        self.usage = UsageKeeper(self.state, Path(state_dir or config.server.state_dir))
        self.usage.open()
        # The engines' supervisors and the upstreams' probes; telemetry follows who joins.
        # Both go through the live config, built below over these parts.
        self.backends = Backends(
            self.state,
            lambda tables: self.live_config.apply_tables(tables),
            lambda: self.live_config.follow_telemetry(),
        )
        # On-demand engines: woken and put to sleep by their swap groups after each admission
        # pass (llmd/daemon/swapping.py).
        admission = self.state.admission
        self.swapping = Swapping(self.state, self.backends.supervisors, admission.pump)
        if self.swapping.engines:
            admission.on_queued = self.swapping.queued
            admission.after_pump = self.swapping.decide
            admission.on_woken = self.swapping.woken
        # The device pause stops and resumes engines through their supervisors.
        admission.pauser = self._pause_engine
        # The stall watchdog over every backend (llmd/supervisor/stall.py).
        self.watchdog = Watchdog(self.state, self.backends.supervisors)
        relisting = ModelRelisting(fleet.engines, fleet.clients, self.backends.engine_changed)
        self.state.relisting = relisting
        observer = self.state.observer
        metrics = observer.metrics
        metrics.registry.register(
            StatusCollector(
                self.state.snapshot,
                lambda: line_limiter().suppressed,
                metrics.tenant,
                lambda: observer.engine_samples,
            )
        )
        self.deployer = Deployer(self, store)
        self.reporter = ServiceReporter(Notifier(), config.supervisor.max_failed_boots)
        self.listeners = Listeners(lambda: self.config.server)
        # Reload is start-up again: the live config applies a config to every part.
        self.live_config = LiveConfig(
            self.state,
            self.backends,
            self.listeners,
            self.telemetry,
            self.reporter,
            self.deployer,
            file_tables,
            {"listen": listen, "runtime_dir": runtime_dir},
        )
        self.actions = OperatorActions(self.state, self.backends, self.live_config)
        self.actions.swapping = self.swapping if self.swapping.engines else None
        self.deployer.read_releases()
        for restoration in self.restorations:
            fleet.engines[restoration.engine].release_note = restoration.note
        self.housekeeping = Housekeeping(self.state, self.backends, self.reporter)
        self.exit_code = EXIT_OK
        self.gpu: GpuReport | None = None
        self._signals: asyncio.Queue[signal.Signals] = asyncio.Queue()
        self._lock: int | None = None

    async def serve(self) -> int:
        """Run until SIGTERM/SIGINT, or until every engine has given up and no upstream is
        left; the process exit code."""
        checked = await check_devices(self.config, self.swapping, self.reporter)
        if isinstance(checked, int):
            return checked
        self.gpu = checked
        await self.startup()
        try:
            await self.main_loop()
        finally:
            await self.shutdown()
        return self.exit_code

    async def startup(self) -> None:
        """Take the runtime directory, check that the state directory can be written, bind the
        sockets, start the proxy, the admin API and the engine. Raises OSError (PermissionError,
        EROFS, NotADirectoryError naming the directory), RuntimeDirInUse (another llmd runs
        with this directory)."""
        self.paths.create()
        check_writable(self.state_dir)
        self._lock = self.paths.claim()
        # A deploy the last llmd left open (killed mid-deploy) ends `interrupted` in the history.
        self.deployer.close_interrupted()
        loop = asyncio.get_running_loop()
        for sig in _SIGNALS:
            loop.add_signal_handler(sig, self._signals.put_nowait, sig)
        server = self.config.server
        public = bind_tcp(server.host, server.port, server.send_buffer_bytes)
        admin = bind_unix(self.paths.admin_socket, mode=0o660)
        self.listeners.start_proxy(
            build_app(self.state, ResponseStore(self.state_dir / STORE_FILE, self._responses)),
            public,
            http=limited_protocol(self.state, bounded_protocol(lambda: self.config.server)),
        )
        self.listeners.start(
            "admin", AdminApp(self.state, self.actions, self.deployer), admin, lifespan="off"
        )
        for restoration in self.restorations:
            say = log.info if restoration.restored else log.warning
            say(
                restoration.event,
                engine=restoration.engine,
                release=restoration.release,
                note=restoration.note,
            )
        await self.backends.stop_unclaimed()
        self.backends.start()
        self.live_config.apply(self.config)
        self.usage.start()
        self.watchdog.start()
        log.info(
            "llmd_started",
            listen=self.config.server.listen,
            runtime_dir=str(self.paths.root),
            engines={n: e.kind for n, e in self.config.engine_tables.items()},
            upstreams={n: u.url for n, u in self.config.upstreams.items()},
            models=list(self.state.admission.capacity.models()),
        )

    async def main_loop(self) -> None:
        """Wait for a signal, a dead part, an engine given up, or the next housekeeping
        tick."""
        while True:
            next_signal = asyncio.create_task(self._signals.get())
            done, _ = await asyncio.wait(
                {next_signal, *self.listeners.tasks.values(), *self.backends.tasks.values()},
                timeout=TICK_S,
                return_when=asyncio.FIRST_COMPLETED,
            )
            if next_signal not in done:
                next_signal.cancel()
            self.housekeeping.tick()
            for name, task in self.listeners.tasks.items():
                if task in done:
                    self.exit_code = _part_exit_code(name, task)
                    return
            for name, task in list(self.backends.tasks.items()):
                if task in done and self._engine_ended(name, task):
                    return
            if next_signal in done:
                sig = next_signal.result()
                if sig is signal.SIGHUP:
                    # Logged where refused; the config in use stays. A reload that fails
                    # otherwise (a bug) is logged too: a signal never stops llmd but TERM/INT.
                    try:
                        self.actions.reload()
                    except (ConfigError, ActionRefused):
                        pass
                    except Exception:
                        log.exception("reload_failed")
                    continue
                log.info("stop_requested", signal=sig.name)
                return

    async def shutdown(self) -> None:
        """Stop in order. Every step runs even if one before it failed: each is guarded, and a
        failure is logged (`shutdown_step_failed`) and makes the exit status 1."""
        # 1. Refuse new admissions (503 `draining`) and every operator action but cancel: the
        #    listener stays open so that clients get an answer with Retry-After rather than a
        #    refused connection.
        async with self._step("refuse_admissions"):
            self.actions.begin_shutdown()
            await self.deployer.stop()
            self.reporter.stopping(f"draining: {len(self.state.inflight)} in flight")
        # 2. Let in-flight requests finish, up to the drain deadline; a second signal cuts it
        #    short. What remains then is ended with an in-band error.
        async with self._step("drain"):
            if len(self.state.inflight):
                hurry = asyncio.Event()
                second_signal = asyncio.create_task(self._signals.get())
                second_signal.add_done_callback(lambda _: hurry.set())
                try:
                    await self.actions.wait_drained(self.config.server.drain_timeout_s, hurry)
                finally:
                    second_signal.cancel()
        # 3. Stop accepting: close the listeners and the idle keep-alive connections.
        async with self._step("close_listeners"):
            await self.listeners.close()
        # 4. Stop the engines, all at once: SIGTERM each group, SIGKILL it after the timeout,
        #    reap (an engine being spawned right now included).
        async with self._step("stop_engines"):
            self.swapping.close()
            await self.backends.stop_engines()
        # 5. Stop telemetry, the stall watchdog and the upstream probes, then close the
        #    backends' clients: the proxy's lifespan closed them at step 3, but a scrape or a
        #    probe since then opened a new session (left to the garbage collector, seen in CI
        #    as an unclosed session).
        async with self._step("stop_telemetry"):
            tasks = [*self.backends.probes.values()]
            for task in (self.telemetry.task, self.watchdog.task):
                if task is not None:
                    tasks.append(task)
            for task in tasks:
                task.cancel()
            if tasks:
                await asyncio.wait(tasks)
            await self.state.fleet.close()
            # Export the spans still batched (a no-op without an OTLP endpoint).
            await asyncio.to_thread(self.state.observer.tracing.shutdown)
        # 6. Write the usage and the budgets' state a last time (the drained requests settled).
        async with self._step("keep_usage"):
            await self.usage.close()
        # 7. Remove the sockets and the signal handlers.
        async with self._step("remove_sockets"):
            sockets = [self.paths.socket_of(name) for name in self.backends.supervisors]
            for path in (self.paths.admin_socket, *sockets):
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
        async with self._step("remove_signal_handlers"):
            loop = asyncio.get_running_loop()
            for sig in _SIGNALS:
                loop.remove_signal_handler(sig)
        # 8. Write the pending "suppressed N similar" lines (the log is otherwise written as it
        #    goes) and tell systemd.
        async with self._step("flush_logs"):
            line_limiter().flush(force=True)
            log.info("llmd_stopped", exit_code=self.exit_code)
            self.reporter.notifier.close()
        # 9. Let the next llmd have the runtime directory; give start-up's objects back to the
        #    garbage collector (an llmd run in-process, as the tests do, leaves nothing frozen).
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None
        self.housekeeping.unfreeze()

    @property
    def config(self) -> Config:
        """The config in use (`state.config`: a reload replaces it, `LiveConfig.apply`)."""
        return self.state.config

    @property
    def file_tables(self) -> dict[str, EngineConfig]:
        """The config file's engine tables as last read (`LiveConfig.file_tables`)."""
        return self.live_config.file_tables

    def _pause_engine(self, name: str, paused: bool) -> None:
        """The device pause's order for engine `name` (an upstream's name: nothing)."""
        supervisor = self.backends.supervisors.get(name)
        if supervisor is not None:
            supervisor.pause(paused)

    # -- helpers -----------------------------------------------------------------------------

    def _engine_ended(self, name: str, task: asyncio.Task[None]) -> bool:
        """Engine `name`'s supervisor ended on its own: it gave up (the others serve on), or
        failed. Whether llmd must stop: when it failed, or when every engine has given up
        and no upstream is configured (exit 79)."""
        del self.backends.tasks[name]
        exc = None if task.cancelled() else task.exception()
        if not isinstance(exc, EngineGaveUp):
            self.exit_code = _part_exit_code(f"engine:{name}", task)
            return True
        log.error("engine_given_up", engine=name, detail=str(exc))
        self.state.admission.pump()
        if not self.backends.running() and not self.state.fleet.upstreams:
            log.error("every_engine_given_up", exit_code=EXIT_ENGINE_GAVE_UP)
            self.exit_code = EXIT_ENGINE_GAVE_UP
            return True
        return False

    def _responses(self) -> ResponsesConfig:
        """The live `[responses]` table (a reload replaces the config)."""
        return self.state.config.responses

    @contextlib.asynccontextmanager
    async def _step(self, name: str) -> AsyncIterator[None]:
        """One shutdown step: an exception is logged and does not stop the next steps."""
        try:
            yield
        except Exception as exc:
            log.error("shutdown_step_failed", step=name, error=repr(exc))
            if self.exit_code == EXIT_OK:
                self.exit_code = EXIT_FAILURE


def _part_exit_code(name: str, task: asyncio.Task[None]) -> int:
    """The exit code when part `name` ended on its own (it should run until shutdown)."""
    if task.cancelled():
        return EXIT_FAILURE
    exc = task.exception()
    if isinstance(exc, EngineGaveUp):
        log.error("engine_given_up", detail=str(exc), exit_code=EXIT_ENGINE_GAVE_UP)
        return EXIT_ENGINE_GAVE_UP
    log.error("part_stopped", part=name, error=repr(exc) if exc else "ended without error")
    return EXIT_FAILURE
