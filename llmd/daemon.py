"""The daemon: owns the event loop, the signals and the lifecycle of llmd's parts.

serve() → startup() → main_loop() → shutdown(), as uvicorn's Server reads. Signal handlers only
queue the signal; the main loop acts on it. uvicorn runs embedded with its own signal capture
disabled, so signals are handled here alone. Reload is start-up again (gunicorn's arbiter):
`apply` configures every part from a config, at start-up and on each reload alike.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import signal
import socket
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Literal

import structlog
import uvicorn

from llmd.actions import OperatorActions
from llmd.admin.server import AdminApp
from llmd.admission.waiters import Admission
from llmd.config import Config, EngineConfig, config_path, load_config
from llmd.engine.client import EngineClient
from llmd.errors import ActionRefused, ConfigError, EngineGaveUp
from llmd.gpu.preflight import GpuReport, PreflightError, run_preflight
from llmd.listeners import bind_tcp, bind_unix, set_send_buffer
from llmd.logs import configure_logging, line_limiter
from llmd.proxy.app import build_app
from llmd.proxy.connections import limited_protocol
from llmd.proxy.protocol import bounded_protocol
from llmd.reload import ReloadPlan, changed_engine_keys, plan_reload
from llmd.runtime import RuntimePaths
from llmd.state import DaemonState
from llmd.supervisor.state import EngineState
from llmd.supervisor.supervisor import Supervisor
from llmd.systemd.notify import Notifier
from llmd.systemd.reporter import ServiceReporter
from llmd.telemetry.observer import Observer
from llmd.telemetry.scraper import Scraper, run_quietly
from llmd.telemetry.status_metrics import StatusCollector
from llmd.validation.validator import Validator

log = structlog.get_logger("llmd.daemon")

EXIT_OK = 0
EXIT_FAILURE = 1
# The engine failed to boot `supervisor.max_failed_boots` times within the window. Listed in the
# unit's RestartPreventExitStatus: restarting llmd would not fix a broken model or a full GPU.
EXIT_ENGINE_GAVE_UP = 79
# sysexits.h EX_CONFIG: the configuration cannot work (also: a GPU engine on a host without one).
EXIT_CONFIG = 78
TICK_S = 1.0
_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class _EmbeddedServer(uvicorn.Server):
    """uvicorn without its own signal handlers: the daemon stops it through `should_exit`."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class Daemon:
    """One llmd instance: the public proxy, the admin API and the supervised engine.

    `listen` and `runtime_dir` are the command line's overrides of the config file's values;
    a reload keeps them.
    """

    def __init__(
        self, config: Config, *, listen: str | None = None, runtime_dir: str | None = None
    ) -> None:
        self.config = config
        self.overrides = {"listen": listen, "runtime_dir": runtime_dir}
        self.paths = RuntimePaths(Path(config.server.runtime_dir))
        engine = EngineState(model=config.engine.model_name)
        upstream = EngineClient(self.paths.engine_socket)
        self.state = DaemonState(
            config=config,
            paths=self.paths,
            engine=engine,
            admission=Admission(config, engine),
            validator=Validator(config, engine, upstream.session),
            observer=Observer(config.telemetry.top_tenants, config.logging.requests),
            upstream=upstream,
        )
        metrics = self.state.observer.metrics
        metrics.registry.register(
            StatusCollector(self.state.snapshot, lambda: line_limiter().suppressed, metrics.tenant)
        )
        self.supervisor = Supervisor(config, self.paths, self.state.engine)
        self.actions = OperatorActions(self.state, self.supervisor, self)
        self.reporter = ServiceReporter(Notifier(), config.supervisor.max_failed_boots)
        # The engine table of a reload, kept for the next `llmd restart` (None: none pending).
        self.pending_engine: EngineConfig | None = None
        self.exit_code = EXIT_OK
        self.gpu: GpuReport | None = None
        self.scraper: Scraper | None = None
        self.public: socket.socket | None = None
        self._signals: asyncio.Queue[signal.Signals] = asyncio.Queue()
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._servers: list[_EmbeddedServer] = []
        self._proxy: _EmbeddedServer | None = None
        self._telemetry: asyncio.Task[None] | None = None
        self._lock: int | None = None

    async def serve(self) -> int:
        """Run until SIGTERM/SIGINT or until the engine is given up; the process exit code."""
        try:
            self.gpu = await asyncio.to_thread(run_preflight, self.config.engine)
        except PreflightError as exc:
            log.error("gpu_preflight_failed", error=str(exc))
            self.reporter.stopping(f"GPU preflight failed: {exc}")
            return EXIT_CONFIG if exc.permanent else EXIT_FAILURE
        log.info(
            "gpu_preflight_passed",
            driver=self.gpu.driver_version,
            cuda=self.gpu.cuda_version,
            devices=list(self.gpu.devices),
            note=self.gpu.note,
        )
        await self.startup()
        try:
            await self.main_loop()
        finally:
            await self.shutdown()
        return self.exit_code

    async def startup(self) -> None:
        """Take the runtime directory, bind the sockets, start the proxy, the admin API and the
        engine. Raises OSError, RuntimeDirInUse (another llmd runs with this directory)."""
        self.paths.create()
        self._lock = self.paths.claim()
        loop = asyncio.get_running_loop()
        for sig in _SIGNALS:
            loop.add_signal_handler(sig, self._signals.put_nowait, sig)
        server = self.config.server
        self.public = bind_tcp(server.host, server.port, server.send_buffer_bytes)
        admin = bind_unix(self.paths.admin_socket, mode=0o660)
        self._start_server(
            "proxy",
            build_app(self.state),
            self.public,
            lifespan="on",
            http=limited_protocol(self.state, bounded_protocol(lambda: self.config.server)),
        )
        self._start_server("admin", AdminApp(self.state, self.actions), admin, lifespan="off")
        self._tasks["engine"] = asyncio.create_task(self.supervisor.run(), name="supervisor")
        self.apply(self.config)
        log.info(
            "llmd_started",
            listen=self.config.server.listen,
            runtime_dir=str(self.paths.root),
            engine=self.config.engine.kind,
            model=self.config.engine.model_name,
        )

    async def main_loop(self) -> None:
        """Wait for a signal, a dead part, or the next housekeeping tick."""
        while True:
            next_signal = asyncio.create_task(self._signals.get())
            done, _ = await asyncio.wait(
                {next_signal, *self._tasks.values()},
                timeout=TICK_S,
                return_when=asyncio.FIRST_COMPLETED,
            )
            if next_signal not in done:
                next_signal.cancel()
            self._tick()
            for name, task in self._tasks.items():
                if task in done:
                    self.exit_code = _part_exit_code(name, task)
                    return
            if next_signal in done:
                sig = next_signal.result()
                if sig is signal.SIGHUP:
                    # Logged where refused; the config in use stays.
                    with contextlib.suppress(ConfigError, ActionRefused):
                        self.actions.reload()
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
            for server in self._servers:
                server.should_exit = True
            servers = [self._tasks[n] for n in ("proxy", "admin") if n in self._tasks]
            if servers:
                await asyncio.wait(servers)
        # 4. Stop the engine: SIGTERM the group, SIGKILL it after the timeout, reap (an engine
        #    being spawned right now included).
        async with self._step("stop_engine"):
            await self.supervisor.stop()
            if "engine" in self._tasks:
                await asyncio.wait({self._tasks["engine"]})
        # 5. Stop telemetry.
        async with self._step("stop_telemetry"):
            if self._telemetry is not None:
                self._telemetry.cancel()
                await asyncio.wait({self._telemetry})
        # 6. Remove the sockets and the signal handlers.
        async with self._step("remove_sockets"):
            for path in (self.paths.admin_socket, self.paths.engine_socket):
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
        async with self._step("remove_signal_handlers"):
            loop = asyncio.get_running_loop()
            for sig in _SIGNALS:
                loop.remove_signal_handler(sig)
        # 7. Write the pending "suppressed N similar" lines (the log is otherwise written as it
        #    goes) and tell systemd.
        async with self._step("flush_logs"):
            line_limiter().flush(force=True)
            log.info("llmd_stopped", exit_code=self.exit_code)
            self.reporter.notifier.close()
        # 8. Let the next llmd have the runtime directory.
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None

    # -- configuration: start-up and reload alike ----------------------------------------------

    def apply(self, config: Config) -> None:
        """Configure every part from `config`: at start-up and on each reload alike. Tenants
        are read again, admission's classes and limits, validation's policy and tokenizer,
        the observer, the restart policy, logging, the listener's send buffer and connection
        limit and telemetry's intervals all take the new values, and the engine client its API
        key (of the engine table in use). Raises ConfigError (the tenants file) before any part
        has changed."""
        self.state.admission.configure(config)  # first: it alone can still fail
        self.config = self.state.config = self.supervisor.config = config
        self.state.upstream.configure(config.engine)
        self.state.validator.configure(config)
        self.state.observer.configure(config.telemetry.top_tenants, config.logging.requests)
        self.reporter.max_failed_boots = config.supervisor.max_failed_boots
        configure_logging(config.logging)
        if self.public is not None:
            set_send_buffer(self.public, config.server.send_buffer_bytes)
        if self._proxy is not None:
            # uvicorn reads it for each new connection, and counts that connection too: a
            # request is refused once `limit_concurrency` connections are open with it.
            limit = config.server.max_connections
            self._proxy.config.limit_concurrency = limit + 1 if limit else None
        if self.scraper is None or self.scraper.config != config.telemetry:
            self._start_telemetry(config)

    def reload(self) -> ReloadPlan:
        """SIGHUP or the admin API: read the config file again and `apply` it. Keys that
        cannot change in a running llmd are left as they are and listed in the plan; a new
        engine table is kept for the next `llmd restart`. Raises ConfigError, logged, when the
        file does not validate: then nothing changes."""
        self.reporter.reloading()
        try:
            new = load_config(config_path(self.config.source), **self.overrides)
            plan = plan_reload(self.config, new)
            self.apply(plan.config)
        except ConfigError as exc:
            log.error("reload_rejected", error=str(exc))
            raise
        finally:
            self.reporter.reloaded(serving=self.state.engine.serving)
        self.pending_engine = plan.engine
        log.info(
            "config_reloaded",
            needs_llmd_restart=plan.llmd_restart,
            engine_pending=plan.engine_keys,
        )
        return plan

    def apply_pending_engine(self) -> list[str]:
        """Apply the engine table a reload kept pending (before the engine restarts); the
        `engine.*` keys it changed."""
        if self.pending_engine is None:
            return []
        keys = changed_engine_keys(self.config.engine, self.pending_engine)
        self.apply(dataclasses.replace(self.config, engine=self.pending_engine))
        self.pending_engine = None
        log.info("engine_config_applied", keys=keys)
        return keys

    # -- helpers -----------------------------------------------------------------------------

    def _start_telemetry(self, config: Config) -> None:
        """(Re)start the telemetry task with `config.telemetry`'s intervals. Telemetry is not a
        part whose end stops llmd: it logs its own failures and is cancelled at shutdown."""
        if self._telemetry is not None:
            self._telemetry.cancel()
        self.scraper = Scraper(
            self.state.observer,
            self.state.engine,
            self.paths.engine_socket,
            config.telemetry,
            on_sample=self.state.admission.engine_sampled,
            headers=lambda: self.state.upstream.auth,
        )
        self._telemetry = asyncio.create_task(run_quietly(self.scraper), name="telemetry")

    def _start_server(
        self,
        name: str,
        app: object,
        sock: socket.socket,
        lifespan: Literal["on", "off"],
        http: type[asyncio.Protocol] | None = None,
    ) -> None:
        config = uvicorn.Config(
            app,  # type: ignore[arg-type]
            lifespan=lifespan,
            log_config=None,
            access_log=False,
            # httptools, with the request head bounded by [server] (llmd/proxy/protocol.py)
            http=http or bounded_protocol(lambda: self.config.server),
            timeout_graceful_shutdown=5,
        )
        server = _EmbeddedServer(config)
        self._servers.append(server)
        if name == "proxy":
            self._proxy = server
        self._tasks[name] = asyncio.create_task(server.serve(sockets=[sock]), name=name)

    def _tick(self) -> None:
        """Housekeeping once a tick: the service state to systemd, the watchdog ping, the
        summaries of rate-limited log lines."""
        line_limiter().flush()
        stall_limit = self.config.engine.stop_timeout_s + 15.0
        self.reporter.tick(
            self.state.engine,
            draining=self.state.draining,
            in_flight=len(self.state.inflight),
            making_progress=_age(self.supervisor.last_progress) < stall_limit,
        )

    @contextlib.asynccontextmanager
    async def _step(self, name: str) -> AsyncIterator[None]:
        """One shutdown step: an exception is logged and does not stop the next steps."""
        try:
            yield
        except Exception as exc:
            log.error("shutdown_step_failed", step=name, error=repr(exc))
            if self.exit_code == EXIT_OK:
                self.exit_code = EXIT_FAILURE


def _age(monotonic_s: float) -> float:
    return time.monotonic() - monotonic_s


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
