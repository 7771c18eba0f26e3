"""The supervisor: keeps one engine serving, restarting it by policy, and stops it cleanly.

Lifecycle of one engine: spawn → wait for `/health` 200 (or exit, or start timeout) → serve,
probing `/health` → exit (classified) → restart after backoff, or give up.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterable

import aiohttp
import structlog

from llmd.config import Config
from llmd.doctor.diagnosis import diagnose
from llmd.engine.args import engine_auth_headers, without_secrets
from llmd.engine.launch import engine_launch, installed_engine_build
from llmd.engine.versions import ASSUMED, EngineApi
from llmd.errors import EngineGaveUp
from llmd.runtime import RuntimePaths
from llmd.supervisor.exits import ExitReason, classify_exit
from llmd.supervisor.leftovers import forget_engine, record_engine, stop_leftover
from llmd.supervisor.policy import ExitRecord, GiveUp, decide_restart
from llmd.supervisor.process import EngineProcess
from llmd.supervisor.state import EnginePhase, EngineState, model_ids

log = structlog.get_logger("llmd.supervisor")

# Consecutive failed health probes (engine dead while HTTP stays up, vLLM answers 503) before
# llmd stops the engine itself: one probe can fail under a heavy prefill on a CPU engine.
UNHEALTHY_PROBES = 3


class Supervisor:
    """Runs the engine described by `config.engine` and publishes its state into `state`."""

    def __init__(self, config: Config, paths: RuntimePaths, state: EngineState) -> None:
        self.config = config
        self.paths = paths
        self.state = state
        self._stopping = asyncio.Event()
        self._served = asyncio.Event()  # the engine of this boot serves
        self._done = asyncio.Event()  # run() is not running
        self._done.set()
        self._process: EngineProcess | None = None
        self._history: list[ExitRecord] = []
        self._restart_requested = False
        # Monotonic time of the supervisor's last loop turn: the daemon pings systemd's
        # watchdog only while this moves.
        self.last_progress = time.monotonic()

    async def run(self) -> None:
        """Keep the engine up until `stop()`. Raises `EngineGaveUp` when the policy gives up."""
        self._done.clear()
        try:
            await self._stop_leftover()
            connector = aiohttp.UnixConnector(path=str(self.paths.engine_socket))
            async with aiohttp.ClientSession(connector=connector) as probe:
                while not self._stopping.is_set():
                    reason, was_ready = await self._run_once(probe)
                    if self._stopping.is_set():
                        break
                    if reason.kind == "restart_requested":
                        self.state.restarts += 1
                        continue
                    await self._back_off(reason, was_ready)
            self.state.phase = EnginePhase.STOPPED
        finally:
            self._done.set()

    async def _stop_leftover(self) -> None:
        """Stop what an llmd killed before it could stop its engine left in this runtime
        directory (llmd.supervisor.leftovers), before this llmd starts its own."""
        pids = await asyncio.to_thread(
            stop_leftover, self.paths.engine_pid_file, self.config.engine.stop_timeout_s
        )
        if pids:
            log.warning("engine_leftover_stopped", pids=pids)

    async def _back_off(self, reason: ExitReason, was_ready: bool) -> None:
        """Wait as the restart policy says after an unrequested exit. Raises EngineGaveUp."""
        now = time.monotonic()
        self._history.append(ExitRecord(at=now, was_ready=was_ready))
        window = self.config.supervisor.failure_window_s
        self.state.failed_boots = sum(
            1 for record in self._history if not record.was_ready and now - record.at <= window
        )
        decision = decide_restart(self.config.supervisor, self._history, now)
        if isinstance(decision, GiveUp):
            self.state.phase = EnginePhase.FAILED
            log.error("engine_gave_up", failed_boots=decision.failed_boots, reason=reason.kind)
            raise EngineGaveUp(
                f"engine failed to boot {decision.failed_boots} times within {window:g}s; "
                f"last: {reason.detail}"
            )
        self.state.phase = EnginePhase.RESTARTING
        restart_at = self.state.restart_at = now + decision.delay_s
        log.warning(
            "engine_restart_scheduled",
            delay_s=decision.delay_s,
            attempt=decision.attempt,
            reason=reason.kind,
        )
        while time.monotonic() < restart_at and not self._stopping.is_set():
            self.last_progress = time.monotonic()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), timeout=1.0)
        self.state.restart_at = None
        self.state.restarts += 1

    async def restart(self) -> bool:
        """Stop the serving engine's group and boot a fresh one at once (no backoff, not counted
        as a failure). False when no engine is running to restart."""
        process = self._process
        if process is None or not process.running or self._stopping.is_set():
            return False
        self._restart_requested = True
        self.state.phase = EnginePhase.RESTARTING
        self._served.clear()  # wait_serving() now waits for the next engine
        log.warning("engine_restart_requested", pid=process.pid)
        await process.stop_group(self.config.engine.stop_timeout_s)
        return True

    async def wait_serving(self, timeout_s: float) -> bool:
        """Wait until the engine serves (True), or until the supervisor stops, gives up or
        `timeout_s` seconds pass (False)."""
        waits = [
            asyncio.ensure_future(event.wait())
            for event in (self._served, self._stopping, self._done)
        ]
        try:
            await asyncio.wait(waits, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waits:
                waiter.cancel()
        return self.state.serving and not self._stopping.is_set()

    async def stop(self) -> None:
        """Stop the engine group (SIGTERM, SIGKILL after `engine.stop_timeout_s`, reap) and
        wait for `run()` to end. An engine being spawned at this moment is stopped as soon as
        it exists (`_run_once`), before `stop()` returns."""
        self._stopping.set()
        if self.state.phase is not EnginePhase.STOPPED:
            self.state.phase = EnginePhase.STOPPING
        if self._process is not None:
            await self._process.stop_group(self.config.engine.stop_timeout_s)
        await self._done.wait()
        self.state.phase = EnginePhase.STOPPED

    async def _run_once(self, probe: aiohttp.ClientSession) -> tuple[ExitReason, bool]:
        """Boot one engine and serve until it exits; return why, and whether it became ready."""
        launch = engine_launch(self.config.engine, self.paths.engine_socket)
        self._served.clear()
        self.state.boot_started_at = time.monotonic()
        self.state.ready_at = None
        self.state.phase = (
            EnginePhase.STARTING if not self.state.restarts else EnginePhase.RESTARTING
        )
        try:
            process = await EngineProcess.spawn(launch, self._forward_output)
        except OSError as exc:
            failed = ExitReason("exit_code", f"cannot start {launch.argv[0]}: {exc.strerror}")
            self._record_exit(failed, ())
            return failed, False
        self._process = process
        self.state.pid = process.pid
        log.info("engine_started", pid=process.pid, argv=" ".join(without_secrets(launch.argv)))
        pid_file = self.paths.engine_pid_file
        record = await asyncio.to_thread(record_engine, pid_file, process.pgid)
        exited = asyncio.create_task(process.wait(), name="engine-wait")
        ready = await self._wait_ready(probe, exited)
        forced: ExitReason | None = None
        if ready:
            self.state.diagnosis = diagnose(process.output.recent)  # slow paths seen at boot
            await self._mark_serving(probe)
            forced = await self._watch_health(probe, exited)
        elif not exited.done() and not self._stopping.is_set():
            forced = ExitReason(
                "start_timeout", f"not ready after {self.config.engine.start_timeout_s:g}s"
            )
        if self._stopping.is_set() or self._restart_requested:
            # stop() or restart() is taking the group down; a stop that came while this engine
            # was being spawned found no process to stop, so this stop is the one that does.
            await process.stop_group(self.config.engine.stop_timeout_s)
            returncode = await exited
        elif forced is not None:
            await process.stop_group(self.config.engine.stop_timeout_s)
            returncode = await exited
        else:
            returncode = await exited
            self.state.phase = EnginePhase.RESTARTING  # stop routing to it before the cleanup
            # The leader died on its own: its engine-core and workers may survive it (vllm#55510).
            await process.stop_group(timeout_s=5.0)
        if self._restart_requested:
            self._restart_requested = False
            reason = ExitReason("restart_requested", "restarted by the operator")
        else:
            reason = forced or classify_exit(
                returncode,
                stop_requested=self._stopping.is_set(),
                was_ready=ready,
                recent_lines=list(process.output.recent),
            )
        self.state.pid = None
        forget_engine(pid_file, record)  # its group is stopped: nothing is left to find
        self._record_exit(reason, process.output.recent)
        return reason, ready

    async def _wait_ready(self, probe: aiohttp.ClientSession, exited: asyncio.Task[int]) -> bool:
        deadline = time.monotonic() + self.config.engine.start_timeout_s
        while time.monotonic() < deadline and not exited.done() and not self._stopping.is_set():
            self.last_progress = time.monotonic()
            if await self._healthy(probe):
                return True
            await asyncio.wait({exited}, timeout=0.5)
        return False

    async def _watch_health(
        self, probe: aiohttp.ClientSession, exited: asyncio.Task[int]
    ) -> ExitReason | None:
        failures = 0
        while not self._stopping.is_set():
            self.last_progress = time.monotonic()
            await asyncio.wait({exited}, timeout=self.config.engine.health_interval_s)
            if exited.done() or self._stopping.is_set():
                return None
            failures = 0 if await self._healthy(probe) else failures + 1
            if failures >= UNHEALTHY_PROBES:
                log.error("engine_unhealthy", probes=failures)
                self.state.phase = EnginePhase.RESTARTING
                return ExitReason("engine_dead", f"/health failed {failures} times in a row")
        return None

    async def _healthy(self, probe: aiohttp.ClientSession) -> bool:
        try:
            async with probe.get(
                "http://engine/health",
                headers=engine_auth_headers(self.config.engine),
                timeout=aiohttp.ClientTimeout(total=5),
            ) as r:
                return r.status == 200
        except (TimeoutError, aiohttp.ClientError, OSError):
            return False

    async def _mark_serving(self, probe: aiohttp.ClientSession) -> None:
        now = time.monotonic()
        assert self.state.boot_started_at is not None
        self.state.boot_s = now - self.state.boot_started_at
        self.state.ready_at = now
        self.state.model = self.config.engine.model_name
        self.state.engine_version = (
            installed_engine_build(self.config.engine.python)
            if self.config.engine.kind == "vllm"
            else "sim"
        )
        with contextlib.suppress(
            aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError, KeyError, IndexError
        ):
            async with probe.get(
                "http://engine/v1/models",
                headers=engine_auth_headers(self.config.engine),
                timeout=aiohttp.ClientTimeout(total=5),
            ) as r:
                models = await r.json()
            self.state.served_models = model_ids(models)
            self.state.max_model_len = int(models["data"][0]["max_model_len"])
        self.state.api = ASSUMED
        with contextlib.suppress(
            aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError, KeyError, TypeError
        ):
            async with probe.get(
                "http://engine/version", timeout=aiohttp.ClientTimeout(total=5)
            ) as r:
                self.state.api = EngineApi.parse((await r.json())["version"])
        self.state.phase = EnginePhase.SERVING
        self._served.set()
        log.info(
            "engine_ready",
            pid=self.state.pid,
            boot_s=round(self.state.boot_s, 1),
            max_model_len=self.state.max_model_len,
            vllm_release=".".join(map(str, self.state.api.release)),
        )

    def _record_exit(self, reason: ExitReason, lines: Iterable[str]) -> None:
        self.state.last_exit = reason
        if reason.kind not in ("stopped", "restart_requested"):
            self.state.diagnosis = diagnose(list(lines), reason.kind, reason.detail)
        if reason.kind != "stopped":
            counts = self.state.exits_by_reason
            counts[reason.kind] = counts.get(reason.kind, 0) + 1
        level = log.info if reason.kind == "stopped" else log.error
        level("engine_exited", reason=reason.kind, detail=reason.detail)

    def _forward_output(self, level: str, message: str) -> None:
        if self.state.phase is EnginePhase.STOPPING:
            # vLLM logs an EngineDeadError traceback even on a shutdown llmd asked for.
            log.info("engine_output", level=level.lower(), line=message)
            return
        method = {"CRITICAL": log.critical, "ERROR": log.error}.get(level, log.warning)
        method("engine_output", level=level.lower(), line=message)
