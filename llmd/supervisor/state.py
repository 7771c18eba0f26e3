"""The engine's state as the supervisor publishes it, read by the proxy and the status snapshot."""

from __future__ import annotations

import dataclasses
import enum
import time

from llmd.doctor.findings import Finding
from llmd.supervisor.exits import ExitReason


class EnginePhase(enum.StrEnum):
    """Where the engine is in its life: only SERVING takes requests."""

    STARTING = "starting"
    SERVING = "serving"
    RESTARTING = "restarting"
    STOPPING = "stopping"
    STOPPED = "stopped"
    FAILED = "failed"


@dataclasses.dataclass
class EngineState:
    """Mutable, single-writer (the supervisor) view of the engine.

    Times are `time.monotonic()` seconds; `boot_s` is how long the last successful boot took,
    used to estimate `Retry-After` while a boot is under way. `failed_boots` counts boots that
    never became ready within the supervisor's failure window. `exits_by_reason` counts the
    exits llmd did not ask for, by `ExitReason.kind` (each one is followed by a restart or by
    giving up). `diagnosis` is what `llmd.doctor.diagnosis` found in the engine's output at its
    last boot or unrequested exit (slow paths at boot; the cause of a failure).
    """

    phase: EnginePhase = EnginePhase.STARTING
    pid: int | None = None
    model: str = ""
    engine_version: str = ""
    max_model_len: int | None = None
    boot_started_at: float | None = None
    ready_at: float | None = None
    boot_s: float | None = None
    restarts: int = 0
    failed_boots: int = 0
    last_exit: ExitReason | None = None
    exits_by_reason: dict[str, int] = dataclasses.field(default_factory=dict)
    restart_at: float | None = None
    diagnosis: tuple[Finding, ...] = ()

    @property
    def serving(self) -> bool:
        return self.phase is EnginePhase.SERVING

    def retry_after_s(self, default_boot_s: float = 60.0) -> float:
        """Seconds until the engine is likely to serve again (>= 1), for `Retry-After`."""
        now = time.monotonic()
        remaining = 0.0
        if self.restart_at is not None and self.restart_at > now:
            remaining = self.restart_at - now + (self.boot_s or default_boot_s)
        elif self.boot_started_at is not None:
            remaining = (self.boot_s or default_boot_s) - (now - self.boot_started_at)
        return max(1.0, remaining)

    def uptime_s(self) -> float | None:
        """Seconds since the engine became ready, or None when it is not serving."""
        return time.monotonic() - self.ready_at if self.serving and self.ready_at else None
