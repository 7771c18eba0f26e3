"""What llmd tells systemd on each main-loop tick: READY, STATUS, EXTEND_TIMEOUT_USEC, WATCHDOG.

`status_line` and `fleet_line` are pure; `ServiceReporter` remembers what it sent so each
message goes once.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from llmd.supervisor.state import EnginePhase, EngineState
from llmd.systemd.notify import Notifier

# While the model loads, each tick extends systemd's start timeout by this much (µs): a long
# load never times out, and a stalled llmd stops extending and is timed out.
EXTEND_TIMEOUT_USEC = 30_000_000


def status_line(
    engine: EngineState, *, draining: bool, in_flight: int, max_failed_boots: int
) -> str:
    """The one-line STATUS= text, e.g. 'serving', 'restarting engine (2/5): oom'."""
    if draining:
        return f"draining: {in_flight} in flight"
    phase = engine.phase
    reason = engine.last_exit.kind if engine.last_exit else ""
    if phase is EnginePhase.STARTING and engine.boot_started_at is not None:
        return f"loading model ({time.monotonic() - engine.boot_started_at:.0f}s)"
    if phase is EnginePhase.RESTARTING:
        limit = f"/{max_failed_boots}" if max_failed_boots else ""
        return f"restarting engine ({engine.failed_boots + 1}{limit}): {reason}".rstrip(": ")
    if phase is EnginePhase.FAILED:
        return f"engine given up: {reason}"
    if phase is EnginePhase.SERVING:
        return f"serving {engine.model}: {in_flight} in flight"
    return phase.value


def fleet_line(
    engines: Mapping[str, EngineState], *, draining: bool, in_flight: int, max_failed_boots: int
) -> str:
    """STATUS= for any number of engines: one engine's line as `status_line` gives it; with
    several, how many serve and each one that does not, e.g. 'serving 2/3 engines: 4 in
    flight; small-b: restarting engine (2/5): oom'; without engines, the in-flight count."""
    if len(engines) == 1:
        (engine,) = engines.values()
        return status_line(
            engine, draining=draining, in_flight=in_flight, max_failed_boots=max_failed_boots
        )
    if draining:
        return f"draining: {in_flight} in flight"
    serving = sum(engine.serving for engine in engines.values())
    line = f"serving {serving}/{len(engines)} engines: {in_flight} in flight"
    if not engines:
        line = f"serving: {in_flight} in flight"
    for name, engine in engines.items():
        if not engine.serving:
            state = status_line(
                engine, draining=False, in_flight=in_flight, max_failed_boots=max_failed_boots
            )
            line += f"; {name}: {state}"
    return line


class ServiceReporter:
    """Sends the service state to systemd through `notifier`, once per change."""

    def __init__(self, notifier: Notifier, max_failed_boots: int) -> None:
        self.notifier = notifier
        self.max_failed_boots = max_failed_boots
        self._ready_sent = False
        self._last_status = ""

    def tick(
        self,
        engines: Mapping[str, EngineState],
        *,
        ready: bool,
        draining: bool,
        in_flight: int,
        making_progress: bool,
    ) -> None:
        """Report the state now: READY=1 once `ready`, start-timeout extensions before (while
        some engine has not given up); ping the watchdog only when `making_progress`."""
        line = fleet_line(
            engines, draining=draining, in_flight=in_flight, max_failed_boots=self.max_failed_boots
        )
        fields: dict[str, str | int] = {}
        if line != self._last_status:
            fields["STATUS"] = self._last_status = line
        if ready and not self._ready_sent:
            fields["READY"] = 1
            self._ready_sent = True
        elif not self._ready_sent and any(
            engine.phase is not EnginePhase.FAILED for engine in engines.values()
        ):
            fields["EXTEND_TIMEOUT_USEC"] = EXTEND_TIMEOUT_USEC
        if making_progress and self.notifier.watchdog_interval_s is not None:
            fields["WATCHDOG"] = 1
        if fields:
            self.notifier.notify(**fields)

    def reloading(self) -> None:
        """RELOADING=1 with MONOTONIC_USEC (systemd 253+ wants it), before a reload."""
        self.notifier.notify(
            RELOADING=1, MONOTONIC_USEC=time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        )

    def reloaded(self, ready: bool) -> None:
        """A reload has ended: READY=1 now when llmd is ready (its engines serve), else on the
        first tick that finds it ready (systemd keeps the unit in `reloading` until then)."""
        if ready:
            self.notifier.notify(READY=1, STATUS=self._last_status)
            self._ready_sent = True
        else:
            self._ready_sent = False

    def stopping(self, line: str) -> None:
        self._last_status = line
        self.notifier.notify(STOPPING=1, STATUS=line)
