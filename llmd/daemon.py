"""The daemon: owns the event loop, the signals and the lifecycle of llmd's parts.

serve() → startup() → main_loop() → shutdown(), as uvicorn's Server reads. Signal handlers only
queue the signal; the main loop acts on it. uvicorn runs embedded with its own signal capture
disabled, so signals are handled here alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import structlog
import uvicorn

from llmd.admin.server import AdminApp
from llmd.config import Config, config_path, load_config, reload_config
from llmd.control import Controller
from llmd.errors import ConfigError, EngineGaveUp
from llmd.gpu.preflight import GpuReport, PreflightError, run_preflight
from llmd.logs import configure_logging, line_limiter
from llmd.proxy.app import build_app
from llmd.proxy.context import ProxyContext
from llmd.runtime import RuntimePaths
from llmd.status import take_snapshot
from llmd.supervisor.state import EngineState
from llmd.supervisor.supervisor import Supervisor
from llmd.systemd.notify import Notifier
from llmd.systemd.reporter import ServiceReporter
from llmd.telemetry.observer import Observer
from llmd.telemetry.scraper import Scraper, run_quietly

log = structlog.get_logger("llmd.daemon")

EXIT_OK = 0
EXIT_FAILURE = 1
# The engine failed to boot `supervisor.max_failed_boots` times within the window. Listed in the
# unit's RestartPreventExitStatus: restarting llmd would not fix a broken model or a full GPU.
EXIT_ENGINE_GAVE_UP = 79
# sysexits.h EX_CONFIG: the configuration cannot work (also: a GPU engine on a host without one).
EXIT_CONFIG = 78
TICK_S = 1.0


class _EmbeddedServer(uvicorn.Server):
    """uvicorn without its own signal handlers: the daemon stops it through `should_exit`."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class Daemon:
    """One llmd instance: the public proxy, the admin API and the supervised engine."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.paths = RuntimePaths(Path(config.server.runtime_dir))
        self.ctx = ProxyContext(
            config=config,
            paths=self.paths,
            engine=EngineState(),
            observer=Observer(config.telemetry.top_tenants, config.logging.requests),
        )
        self.supervisor = Supervisor(config, self.paths, self.ctx.engine)
        self.control = Controller(self.ctx, self.supervisor, self._reload)
        self.exit_code = EXIT_OK
        self.gpu: GpuReport | None = None
        self.reporter = ServiceReporter(Notifier(), config.supervisor.max_failed_boots)
        self._signals: asyncio.Queue[signal.Signals] = asyncio.Queue()
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._servers: list[_EmbeddedServer] = []
        self._telemetry: asyncio.Task[None] | None = None

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
        """Bind the sockets, start the proxy, the admin API and the engine. Raises OSError."""
        self.paths.create()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.add_signal_handler(sig, self._signals.put_nowait, sig)
        server = self.config.server
        public = _bind_tcp(server.host, server.port, server.send_buffer_bytes)
        admin = _bind_unix(self.paths.admin_socket, mode=0o660)
        self._start_server("proxy", build_app(self.ctx), public, lifespan="on")
        self._start_server(
            "admin", AdminApp(lambda: take_snapshot(self.ctx), self.control), admin, lifespan="off"
        )
        self._tasks["engine"] = asyncio.create_task(self.supervisor.run(), name="supervisor")
        # Telemetry is not a part whose end stops llmd: it logs its own failures and is
        # cancelled at shutdown.
        scraper = Scraper(
            self.ctx.observer,
            self.ctx.engine,
            self.paths.engine_socket,
            self.config.telemetry,
            on_sample=self.ctx.admission.engine_sampled,
        )
        self._telemetry = asyncio.create_task(run_quietly(scraper), name="telemetry")
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
                    with contextlib.suppress(ConfigError):  # logged; the old config stays
                        self._reload()
                    continue
                log.info("stop_requested", signal=sig.name)
                return

    async def shutdown(self) -> None:
        """Stop in order; every step runs even if the one before it failed."""
        # 1. Refuse new admissions (503 `draining`): the listener stays open so that clients get
        #    an answer with Retry-After rather than a refused connection.
        self.ctx.draining = True
        self.reporter.stopping(f"draining: {len(self.ctx.inflight)} in flight")
        # 2. Let in-flight requests finish, up to the drain deadline; a second signal cuts it
        #    short. What remains then is ended with an in-band error.
        if len(self.ctx.inflight):
            self.control.drain()
            hurry = asyncio.Event()
            second_signal = asyncio.create_task(self._signals.get())
            second_signal.add_done_callback(lambda _: hurry.set())
            await self.control.wait_drained(self.config.server.drain_timeout_s, hurry)
            second_signal.cancel()
        # 3. Stop accepting: close the listeners and the idle keep-alive connections.
        for server in self._servers:
            server.should_exit = True
        for name in ("proxy", "admin"):
            if name in self._tasks:
                await asyncio.wait({self._tasks[name]})
        # 4. Stop the engine: SIGTERM the group, SIGKILL it after the timeout, reap.
        await self.supervisor.stop()
        if "engine" in self._tasks:
            await asyncio.wait({self._tasks["engine"]})
        # 5. Stop telemetry; remove the sockets and the signal handlers; write the pending
        #    "suppressed N similar" lines (the log is otherwise written as it goes).
        if self._telemetry is not None:
            self._telemetry.cancel()
            await asyncio.wait({self._telemetry})
        for path in (self.paths.admin_socket, self.paths.engine_socket):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.remove_signal_handler(sig)
        line_limiter().flush(force=True)
        log.info("llmd_stopped", exit_code=self.exit_code)
        self.reporter.notifier.close()

    def _start_server(
        self, name: str, app: object, sock: socket.socket, lifespan: Literal["on", "off"]
    ) -> None:
        config = uvicorn.Config(
            app,  # type: ignore[arg-type]
            lifespan=lifespan,
            log_config=None,
            access_log=False,
            http="httptools",
            timeout_graceful_shutdown=5,
        )
        server = _EmbeddedServer(config)
        self._servers.append(server)
        self._tasks[name] = asyncio.create_task(server.serve(sockets=[sock]), name=name)

    def _tick(self) -> None:
        """Housekeeping once a tick: the service state to systemd, the watchdog ping, the
        summaries of rate-limited log lines."""
        line_limiter().flush()
        stall_limit = self.config.engine.stop_timeout_s + 15.0
        self.reporter.tick(
            self.ctx.engine,
            draining=self.ctx.draining,
            in_flight=len(self.ctx.inflight),
            making_progress=_age(self.supervisor.last_progress) < stall_limit,
        )

    def _reload(self) -> list[str]:
        """SIGHUP or the admin API: re-read the config; what can change live applies now. The
        changed keys that need a restart (reported, not applied). Raises ConfigError, logged,
        when the file is invalid: then nothing changes."""
        self.reporter.reloading()
        try:
            new = load_config(
                config_path(self.config.source),
                listen=self.config.server.listen,
                runtime_dir=self.config.server.runtime_dir,
            )
        except ConfigError as exc:
            log.error("reload_rejected", error=str(exc))
            raise
        finally:
            self.reporter.reloaded()
        applied, pending = reload_config(self.config, new)
        self.config = self.ctx.config = self.supervisor.config = applied
        self.ctx.observer.log_requests = applied.logging.requests
        self.reporter.max_failed_boots = applied.supervisor.max_failed_boots
        configure_logging(applied.logging)
        log.info("config_reloaded", needs_restart=pending)
        return pending


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


def _bind_tcp(host: str, port: int, send_buffer_bytes: int = 0) -> socket.socket:
    """The public listener. `send_buffer_bytes` (SO_SNDBUF; 0: the kernel's autotuned default)
    is inherited by each accepted connection: it bounds what a slow client can leave buffered."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if send_buffer_bytes:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send_buffer_bytes)
    sock.bind((host, port))
    sock.set_inheritable(False)
    return sock


def _bind_unix(path: Path, mode: int) -> socket.socket:
    """A Unix socket at `path` with `mode` (0660 for the admin API: root and llmd's group, the
    group being the daemon's own, `Group=llmd` under systemd). It is created under umask 0177,
    so it never exists with more than 0600 before the chmod."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old_umask = os.umask(0o177)
    try:
        sock.bind(str(path))
    finally:
        os.umask(old_umask)
    os.chmod(path, mode)
    return sock
