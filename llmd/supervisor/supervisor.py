"""The supervisor: keeps one engine serving, restarting it by policy, and stops it cleanly.

    spawn → wait for `/health` 200 (or exit, or start timeout) → one short request (the
          warm-up) → serve, probing `/health` → exit (classified) → restart after backoff,
          or give up

- One supervisor per engine, each with its own process group, socket, pid file, exit history,
  backoff and give-up: one engine's crash loop never touches another.
- An on-demand engine sleeps and wakes when told (`sleep`, `wake`, from its base class in
  llmd/supervisor/ondemand.py; the swap group decides, llmd/daemon/swapping.py).
- Engines that share a GPU boot one after the other (`boot_locks`: held from the spawn until the
  engine serves or exits), since vLLM checks a device's free memory while it boots
  (vllm#10533).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from pathlib import Path

import structlog

from llmd.config import EngineConfig, SupervisorConfig
from llmd.engine.args import without_secrets
from llmd.engine.client import KEEPALIVE_S
from llmd.engine.launch import engine_launch, installed_engine_build
from llmd.engine.sleep import SleepMechanism
from llmd.engine.wire import Pool
from llmd.errors import EngineGaveUp
from llmd.runtime import RuntimePaths
from llmd.supervisor.diagnosis import diagnose
from llmd.supervisor.exits import ExitReason, classify_exit
from llmd.supervisor.leftovers import forget_engine, record_engine, stop_leftover
from llmd.supervisor.ondemand import OnDemand
from llmd.supervisor.policy import ExitRecord, GiveUp, decide_restart
from llmd.supervisor.probes import healthy, read_served
from llmd.supervisor.process import EngineProcess
from llmd.supervisor.state import EnginePhase, EngineState
from llmd.supervisor.warmup import warm_up

log = structlog.get_logger("llmd.supervisor")

# Consecutive failed health probes (engine dead while HTTP stays up, vLLM answers 503) before
# llmd stops the engine itself: one probe can fail under a heavy prefill on a CPU engine.
UNHEALTHY_PROBES = 3
# How often a booting engine's /health is asked, seconds: a refused connect to its socket costs
# microseconds, and the simulator is up in about 0.4 s (a 0.5 s poll kept it waiting 1 s).
BOOT_PROBE_S = 0.1
# Exits llmd asked for (a stop, an operator's restart): logged at info, with no diagnosis.
ASKED_FOR = frozenset({"stopped", "restart_requested", "slept"})


class Supervisor(OnDemand):
    """Runs engine `name` as `engine` describes it, restarting it by `policy`, and publishes
    its state into `state`; `on_change()` is called when it starts or stops serving (admission
    pumps then). `engine` and `policy` may be replaced while it runs: the policy applies to
    the next decision, the engine table to the next boot."""

    def __init__(
        self,
        name: str,
        engine: EngineConfig,
        policy: SupervisorConfig,
        paths: RuntimePaths,
        state: EngineState,
        boot_locks: Sequence[asyncio.Lock] = (),
        on_change: Callable[[], None] = lambda: None,
        mechanism: SleepMechanism | None = None,
        start_asleep: bool = False,
        start_lock: asyncio.Lock | None = None,
    ) -> None:
        self.name = name
        self.engine = engine
        self.policy = policy
        self.paths = paths
        self.state = state
        self.boot_locks = boot_locks
        self.on_change = on_change
        self.log = log.bind(engine=name)
        self._stopping = asyncio.Event()
        self._served = asyncio.Event()  # the engine of this boot serves
        self._done = asyncio.Event()  # run() is not running
        self._done.set()
        self._process: EngineProcess | None = None
        self._history: list[ExitRecord] = []
        self._restart_requested = False
        self._warmup_s: float | None = None  # how long this boot's warm-up took
        self._stall: ExitReason | None = None  # set by `stalled()` for the exit it causes
        self._init_on_demand(mechanism, start_asleep)
        self._probe: Pool | None = None  # its own connections to the engine's socket
        # A swap group's start-up: its engines' first boots one at a time, each held until the
        # engine serves or is asleep again (their memory is never needed at once).
        self._start_lock = start_lock
        self._start_held = False
        # Monotonic time of the supervisor's last loop turn: the daemon pings systemd's
        # watchdog only while this moves.
        self.last_progress = time.monotonic()

    @property
    def socket(self) -> Path:
        """The engine's Unix socket in the runtime directory."""
        return self.paths.socket_of(self.name)

    def recent_output(self, lines: int = 20) -> str:
        """The engine's last `lines` output lines (of its current or last boot)."""
        recent = list(self._process.output.recent) if self._process is not None else []
        return "\n".join(recent[-lines:])

    async def run(self) -> None:
        """Keep the engine up until `stop()`. Raises `EngineGaveUp` when the policy gives up.
        May run again after giving up (an operator's restart): with a fresh history."""
        self._done.clear()
        self._history.clear()
        try:
            if self._start_lock is not None:  # the first run only: `_started` forgets it
                await self._start_lock.acquire()
                self._start_held = True
            await self._stop_leftover()
            self._probe = probe = Pool(socket_path=self.socket, keepalive_s=KEEPALIVE_S)
            try:
                while not self._stopping.is_set():
                    reason, was_ready = await self._run_once(probe)
                    if self._stopping.is_set():
                        break
                    if reason.kind == "restart_requested":
                        # A wake that boots a new table (llmd/supervisor/ondemand.py) is no
                        # restart: its boot is the wake.
                        self._waking, self._wake_boot = self._wake_boot, False
                        self.state.restarts += not self._waking
                        continue
                    if reason.kind == "slept":
                        await self._parked()
                        continue
                    await self._back_off(reason, was_ready)
            finally:
                probe.close()
            self.state.phase = EnginePhase.STOPPED
        finally:
            self._started()
            self._done.set()

    def _started(self) -> None:
        """The first boot is over (serving, asleep, or given up): the next engine of the swap
        group may boot."""
        if self._start_held and self._start_lock is not None:
            self._start_held = False
            self._start_lock.release()
        self._start_lock = None

    async def _stop_leftover(self) -> None:
        """Stop what an llmd killed before it could stop its engine left in this runtime
        directory (llmd.supervisor.leftovers), before this llmd starts its own."""
        pids = await asyncio.to_thread(
            stop_leftover, self.paths.pid_file_of(self.name), self.engine.stop_timeout_s
        )
        if pids:
            self.log.warning("engine_leftover_stopped", pids=pids)

    async def _back_off(self, reason: ExitReason, was_ready: bool) -> None:
        """Wait as the restart policy says after an unrequested exit. Raises EngineGaveUp."""
        now = time.monotonic()
        self._history.append(ExitRecord(at=now, was_ready=was_ready))
        window = self.policy.failure_window_s
        self.state.failed_boots = sum(
            1 for record in self._history if not record.was_ready and now - record.at <= window
        )
        decision = decide_restart(self.policy, self._history, now)
        if isinstance(decision, GiveUp):
            self.state.phase = EnginePhase.FAILED
            self.on_change()
            self.log.error("engine_gave_up", failed_boots=decision.failed_boots, reason=reason.kind)
            raise EngineGaveUp(
                f"engine {self.name} failed to boot {decision.failed_boots} times within "
                f"{window:g}s; last: {reason.detail}"
            )
        self.state.phase = EnginePhase.RESTARTING
        restart_at = self.state.restart_at = now + decision.delay_s
        self.log.warning(
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
        self.on_change()
        self.log.info("engine_restart_requested", pid=process.pid)
        await process.stop_group(self.engine.stop_timeout_s)
        return True

    async def stalled(self, detail: str) -> bool:
        """The serving engine is stalled (llmd/supervisor/stall.py says why, in `detail`): kill
        its group at once (SIGKILL: a stopped process would hold a SIGTERM pending) and restart
        it with the usual backoff, the exit classified `stalled`. False when no engine is
        running, or it is being stopped or restarted already."""
        process = self._process
        if (
            process is None
            or not process.running
            or self._stopping.is_set()
            or self._restart_requested
            or self._stall is not None
        ):
            return False
        self._stall = ExitReason("stalled", detail)
        self.state.phase = EnginePhase.RESTARTING
        self._served.clear()
        self.on_change()
        self.log.error("engine_stalled", pid=process.pid, detail=detail)
        await process.stop_group(0.0)
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

    def pause(self, paused: bool) -> None:
        """Stop the running engine's processes, or let them go on (`EngineProcess.pause`);
        nothing while none runs (a later one starts running)."""
        if self._process is not None:
            self._process.pause(paused)

    async def stop(self) -> None:
        """Stop the engine group (SIGTERM, SIGKILL after `engine.stop_timeout_s`, reap) and
        wait for `run()` to end. An engine being spawned at this moment is stopped as soon as
        it exists (`_run_once`), before `stop()` returns."""
        self._stopping.set()
        if self.state.phase is not EnginePhase.STOPPED:
            self.state.phase = EnginePhase.STOPPING
        if self._process is not None:
            await self._process.stop_group(self.engine.stop_timeout_s)
        await self._done.wait()
        self.state.phase = EnginePhase.STOPPED

    async def _run_once(self, probe: Pool) -> tuple[ExitReason, bool]:
        """Boot one engine and serve until it exits; return why, and whether it became ready."""
        engine = self.engine
        launch = engine_launch(engine, self.socket, self.paths.rpc_dir_of(self.name))
        self._served.clear()
        self.state.boot_started_at = time.monotonic()
        self.state.ready_at = None
        self.state.fingerprint = None  # this boot's is read from its warm-up
        self.state.phase = (
            EnginePhase.WAKING
            if self._waking
            else EnginePhase.STARTING
            if not self.state.restarts
            else EnginePhase.RESTARTING
        )
        async with self._booting():
            try:
                process = await EngineProcess.spawn(launch, self._forward_output)
            except OSError as exc:
                failed = ExitReason("exit_code", f"cannot start {launch.argv[0]}: {exc.strerror}")
                self._record_exit(failed, ())
                return failed, False
            self._process = process
            self.state.pid = process.pid
            self.log.info(
                "engine_started", pid=process.pid, argv=" ".join(without_secrets(launch.argv))
            )
            pid_file = self.paths.pid_file_of(self.name)
            record = await asyncio.to_thread(record_engine, pid_file, process.pgid)
            exited = asyncio.create_task(process.wait(), name=f"engine-wait-{self.name}")
            # The leader's exit alone, not its last output too: routing stops at once.
            gone = asyncio.create_task(process.leader_exited(), name=f"engine-gone-{self.name}")
            ready = await self._wait_ready(probe, gone)
            forced = await self._warm_up(probe, gone) if ready else None
            ready = ready and forced is None
        if ready:
            self.state.diagnosis = diagnose(process.output.recent)  # slow paths seen at boot
            forced = await self._mark_serving(probe)
            if forced is None:
                forced = await self._watch_health(probe, gone)
        elif (
            forced is None
            and not gone.done()
            and not self._stopping.is_set()
            and not self._sleep_requested
        ):
            forced = ExitReason("start_timeout", f"not ready after {engine.start_timeout_s:g}s")
        self._waking = False
        if self._stopping.is_set() or self._restart_requested or self._sleep_requested:
            # stop(), restart() or sleep() is taking the group down; a stop that came while this
            # engine was being spawned found no process to stop, so this stop is the one that
            # does.
            await process.stop_group(engine.stop_timeout_s)
            returncode = await exited
        elif forced is not None:
            await process.stop_group(engine.stop_timeout_s)
            returncode = await exited
        else:
            await gone
            self.state.phase = EnginePhase.RESTARTING  # stop routing to it before the cleanup
            self.on_change()
            returncode = await exited  # and its last lines, for the exit's reason
            # The leader died on its own: its engine-core and workers may survive it (vllm#55510).
            await process.stop_group(timeout_s=5.0)
        if self._restart_requested:
            self._restart_requested = False
            why = "woken with a new table" if self._wake_boot else "restarted by the operator"
            reason = ExitReason("restart_requested", why)
        elif self._sleep_requested:
            reason = ExitReason("slept", "put to sleep (its process group stopped)")
        elif self._stall is not None:
            reason, self._stall = self._stall, None
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

    @contextlib.asynccontextmanager
    async def _booting(self) -> AsyncIterator[None]:
        """Hold the boot locks of the GPUs this engine shares (in a fixed order, so that two
        engines never hold one each) for the body of the `async with`."""
        async with contextlib.AsyncExitStack() as stack:
            for lock in self.boot_locks:
                await stack.enter_async_context(lock)
            yield

    async def _wait_ready(self, probe: Pool, exited: asyncio.Task[int]) -> bool:
        deadline = time.monotonic() + self.engine.start_timeout_s
        while (
            time.monotonic() < deadline
            and not exited.done()
            and not self._stopping.is_set()
            and not self._sleep_requested
        ):
            self.last_progress = time.monotonic()
            if await healthy(probe, self.engine):
                return True
            await asyncio.wait({exited}, timeout=BOOT_PROBE_S)
        return False

    async def _warm_up(self, probe: Pool, exited: asyncio.Task[int]) -> ExitReason | None:
        """One short request through the engine before it serves (llmd/supervisor/warmup.py),
        within what is left of the start timeout; the reason to stop it when that failed
        (None: it succeeded, or `engine.warmup` is off, or the engine exited meanwhile: its
        exit says why)."""
        self._warmup_s = None
        if not self.engine.warmup or self._stopping.is_set():
            return None
        assert self.state.boot_started_at is not None
        left = self.state.boot_started_at + self.engine.start_timeout_s - time.monotonic()
        self._warmup_s, failure, self.state.fingerprint = await warm_up(probe, self.engine, left)
        if failure is None or exited.done() or self._stopping.is_set():
            return None
        self.log.error("engine_warmup_failed", error=failure)
        return ExitReason("warmup_failed", failure)

    async def _watch_health(self, probe: Pool, exited: asyncio.Task[int]) -> ExitReason | None:
        failures = 0
        while not self._stopping.is_set():
            self.last_progress = time.monotonic()
            await asyncio.wait({exited}, timeout=self.engine.health_interval_s)
            if exited.done() or self._stopping.is_set():
                return None
            failures = 0 if await healthy(probe, self.engine) else failures + 1
            if failures >= UNHEALTHY_PROBES:
                self.log.error("engine_unhealthy", probes=failures)
                self.state.phase = EnginePhase.RESTARTING
                self.on_change()
                return ExitReason("engine_dead", f"/health failed {failures} times in a row")
        return None

    async def _mark_serving(self, probe: Pool) -> ExitReason | None:
        """Read the ready engine's models and release, then publish it serving; an on-demand
        engine's first boot instead puts it to sleep, and a boot that is a wake serves only
        once a one-token generation succeeded (else the exit to force)."""
        now = time.monotonic()
        assert self.state.boot_started_at is not None
        self.state.boot_s = now - self.state.boot_started_at
        self.state.ready_at = now
        self.state.model = self.engine.model_name
        self.state.engine_version = (
            installed_engine_build(self.engine.python) if self.engine.kind == "vllm" else "sim"
        )
        await read_served(probe, self.engine, self.state)
        if self._start_asleep or self._waking:
            return await self._ready_on_demand(probe)
        self._serve()
        return None

    def _serve(self) -> None:
        """Publish the ready engine serving."""
        self.state.phase = EnginePhase.SERVING
        self._started()
        self._served.set()
        self.on_change()
        self.log.info(
            "engine_ready",
            pid=self.state.pid,
            boot_s=None if self.state.boot_s is None else round(self.state.boot_s, 1),
            warmup_s=None if self._warmup_s is None else round(self._warmup_s, 2),
            max_model_len=self.state.max_model_len,
            vllm_release=".".join(map(str, self.state.api.release)),
        )

    def _record_exit(self, reason: ExitReason, lines: Iterable[str]) -> None:
        self.state.last_exit = reason
        if reason.kind not in ASKED_FOR:
            self.state.diagnosis = diagnose(list(lines), reason.kind, reason.detail)
        if reason.kind != "stopped":
            counts = self.state.exits_by_reason
            counts[reason.kind] = counts.get(reason.kind, 0) + 1
        # An exit llmd asked for (a stop, an operator's restart) is no error.
        level = self.log.info if reason.kind in ASKED_FOR else self.log.error
        level("engine_exited", reason=reason.kind, detail=reason.detail)

    def _forward_output(self, level: str, message: str) -> None:
        if self.state.phase is EnginePhase.STOPPING or self._restart_requested:
            # vLLM logs an EngineDeadError traceback even on a shutdown llmd asked for.
            self.log.info("engine_output", level=level.lower(), line=message)
            return
        logger = self.log
        method = {"CRITICAL": logger.critical, "ERROR": logger.error}.get(level, logger.warning)
        method("engine_output", level=level.lower(), line=message)
