"""An on-demand engine's sleep and wake, the part of its supervisor the swap group drives
(llmd/daemon/swapping.py): by vLLM's sleep mode (`POST /sleep`, `POST /wake_up`, vLLM 0.32), or
by stopping its process group and booting it again (`SleepMechanism.STOP`); a woken engine
serves only once a one-token generation succeeds (llmd/supervisor/sleeping.py)."""

from __future__ import annotations

import abc
import asyncio
import time
from collections.abc import Callable

import structlog

from llmd.config import EngineConfig
from llmd.engine.sleep import SleepMechanism
from llmd.engine.wire import Pool
from llmd.supervisor.exits import ExitReason
from llmd.supervisor.process import EngineProcess
from llmd.supervisor.sleeping import call_sleep, call_wake_up, first_token
from llmd.supervisor.state import EnginePhase, EngineState


class OnDemand(abc.ABC):
    """Sleep and wake for the Supervisor (its base class): the state that says where a sleep
    or wake stands, and the calls that move it. The supervisor's boot loop reads
    `_sleep_requested` (the exit under way is a `stop` sleep: park, don't restart) and
    `_waking` (the boot under way is a wake) and `_wake_boot` (the restart under way is a
    wake that boots a new table). The two hooks it calls back, `_started` and `_serve`, are
    abstract: a class that lacks one cannot be made (TypeError), rather than fail mid-sleep."""

    # Set by the Supervisor.
    engine: EngineConfig
    state: EngineState
    log: structlog.stdlib.BoundLogger
    on_change: Callable[[], None]
    _process: EngineProcess | None
    _restart_requested: bool
    _probe: Pool | None
    _served: asyncio.Event
    _stopping: asyncio.Event

    def _init_on_demand(self, mechanism: SleepMechanism | None, start_asleep: bool) -> None:
        """How it sleeps (None: never), and whether its first boot ends asleep (it boots once
        so that llmd knows its models and context length)."""
        self.mechanism = mechanism
        self._start_asleep = start_asleep
        self._sleep_requested = False  # a `stop` sleep: the exit it causes parks the engine
        self._wake_requested = asyncio.Event()
        self._waking = False  # the boot under way is a wake
        self._cancel_wake = False  # a sleep came while a sleep-mode wake was under way
        self._boot_on_wake = False  # the next wake boots the table afresh (a deploy's)
        self._wake_boot = False  # the restart under way is such a wake

    @abc.abstractmethod
    def _started(self) -> None:
        """The first boot is over (the Supervisor releases its swap group's start lock)."""

    @abc.abstractmethod
    def _serve(self) -> None:
        """Publish the ready engine serving (the Supervisor's)."""

    async def _parked(self) -> None:
        """A `stop` sleep: asleep with no process until `wake()` (or a stop)."""
        self._sleep_requested = False
        self._started()
        self.state.phase = EnginePhase.ASLEEP
        self.on_change()
        self.log.info("engine_asleep", mechanism=SleepMechanism.STOP.value)
        waits = [asyncio.ensure_future(e.wait()) for e in (self._wake_requested, self._stopping)]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waits:
                waiter.cancel()
        self._wake_requested.clear()

    async def sleep(self) -> bool:
        """Put the serving engine to sleep by its mechanism (the caller made sure nothing runs
        there), or cancel a wake under way; False when it is neither serving nor waking, or
        not on demand. Returns once asleep (a sleep-mode sleep) or once its group is being
        stopped."""
        phase, mechanism = self.state.phase, self.mechanism
        if mechanism is None or phase not in (EnginePhase.SERVING, EnginePhase.WAKING):
            return False
        if phase is EnginePhase.WAKING and mechanism.level is not None:
            self._cancel_wake = True  # `wake()` puts it back to sleep once awake
            return True
        self.state.phase = EnginePhase.FALLING_ASLEEP
        self.on_change()
        if mechanism.level is None:
            self._sleep_requested = True
            process = self._process
            if process is not None and process.running:
                await process.stop_group(self.engine.stop_timeout_s)
            return True
        return await self._sleep_mode(mechanism.level)

    async def _sleep_mode(self, level: int) -> bool:
        """POST /sleep: ASLEEP when the engine said yes, else it goes on serving."""
        assert self._probe is not None
        slept = await call_sleep(self._probe, self.engine, level)
        self._started()
        self.state.phase = EnginePhase.ASLEEP if slept else EnginePhase.SERVING
        self.on_change()
        if slept:
            self.log.info("engine_asleep", mechanism=f"level{level}")
        else:
            self.log.warning("engine_sleep_refused", level=level)
        return slept

    async def wake(self) -> bool:
        """Wake the asleep engine: it serves again once a one-token generation succeeded
        (`state.wake_s` then says how long the wake took). False when it is not asleep. A
        `stop` sleeper's wake is a boot, and returns when the boot has begun."""
        if self.mechanism is None or self.state.phase is not EnginePhase.ASLEEP:
            return False
        self.state.phase = EnginePhase.WAKING
        self.state.wake_started_at = time.monotonic()
        self.on_change()
        if self.mechanism.level is None:
            self._waking = True
            self._wake_requested.set()
            return True
        if self._boot_on_wake:
            return await self._wake_by_boot()
        assert self._probe is not None
        woke = await call_wake_up(self._probe, self.engine) and await first_token(
            self._probe, self.engine, self.engine.start_timeout_s
        )
        if self._cancel_wake:
            self._cancel_wake = False
            self.log.info("engine_wake_cancelled")
            return await self._sleep_mode(self.mechanism.level)
        if not woke:
            self.state.phase = EnginePhase.ASLEEP
            self.on_change()
            self.log.error("engine_wake_failed", mechanism=self.mechanism.value)
            return False
        self._woken()
        return True

    def boot_on_wake(self) -> bool:
        """The asleep engine's next wake boots its table (`engine`, which a deploy just
        replaced) instead of waking the process that sleeps with the old one; False when it is
        not asleep on demand. A `stop` sleeper's wake is a boot of its table anyway."""
        if self.mechanism is None or self.state.phase is not EnginePhase.ASLEEP:
            return False
        self._boot_on_wake = self.mechanism.level is not None
        return True

    async def _wake_by_boot(self) -> bool:
        """Stop the sleeping process group; the supervisor's loop then boots the table as a
        wake (serving once a one-token generation succeeded). Returns once it is stopped."""
        self._boot_on_wake = False
        self._wake_boot = self._restart_requested = True
        process = self._process
        if process is not None and process.running:
            await process.stop_group(self.engine.stop_timeout_s)
        return True

    async def _ready_on_demand(self, probe: Pool) -> ExitReason | None:
        """The ready engine's first boot (`_start_asleep`) goes to sleep, and a boot that is a
        wake (`_waking`) serves once a one-token generation succeeded; the exit to force
        (None: asleep, or serving)."""
        if self._start_asleep:  # its first boot: known now, asleep until wanted
            self._start_asleep = False
            assert self.mechanism is not None
            if self.mechanism.level is None:
                self._sleep_requested = True
                return ExitReason("slept", "put to sleep after its first boot")
            if not await self._sleep_mode(self.mechanism.level):
                self._serve()  # the engine refused to sleep: it serves
            return None
        if not await first_token(probe, self.engine, self.engine.start_timeout_s):
            return ExitReason("start_timeout", "woken, but no token came")
        self._waking = False
        self._woken()
        return None

    def _woken(self) -> None:
        """The wake under way has ended with a first token: the engine serves."""
        now = time.monotonic()
        started = self.state.wake_started_at or now
        self.state.wake_s = now - started
        self.state.wakes.record(self.state.wake_s)
        self.state.ready_at = now
        self.state.phase = EnginePhase.SERVING
        self._served.set()
        self.on_change()
        assert self.mechanism is not None
        self.log.info(
            "engine_woken", mechanism=self.mechanism.value, wake_s=round(self.state.wake_s, 3)
        )
