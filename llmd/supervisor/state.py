"""The engine's state as the supervisor publishes it, read by the proxy and the status snapshot."""

from __future__ import annotations

import collections
import dataclasses
import enum
import statistics
import time
from typing import Any

from llmd.engine.metrics import EngineSample
from llmd.engine.versions import ASSUMED, EngineApi
from llmd.errors import EngineUnavailable
from llmd.status import EngineStatus
from llmd.supervisor.exits import ExitReason
from llmd.supervisor.findings import Finding


class EnginePhase(enum.StrEnum):
    """Where the engine is in its life: only SERVING takes requests."""

    STARTING = "starting"
    SERVING = "serving"
    RESTARTING = "restarting"
    STOPPING = "stopping"
    STOPPED = "stopped"
    FAILED = "failed"
    # An on-demand engine (llmd/supervisor/sleeping.py): put to sleep, asleep, being woken.
    FALLING_ASLEEP = "falling_asleep"
    ASLEEP = "asleep"
    WAKING = "waking"


# The wakes an engine's predicted wake time is the median of (its latest ones).
WAKES_KEPT = 5


class WakeTimes:
    """An on-demand engine's last wakes (seconds each, from the decision to its first token);
    its prediction is their median."""

    def __init__(self, default_s: float | None = None) -> None:
        self.default_s = default_s
        self._last: collections.deque[float] = collections.deque(maxlen=WAKES_KEPT)

    def record(self, seconds: float) -> None:
        """A wake took `seconds`."""
        self._last.append(seconds)

    def predicted_s(self) -> float | None:
        """The median of the last WAKES_KEPT wakes, else `default_s`."""
        return statistics.median(self._last) if self._last else self.default_s


def model_ids(listing: Any) -> tuple[str, ...]:
    """The `id`s of an OpenAI model list (`{"data": [{"id": ...}, ...]}`), in order; () when
    the listing has none."""
    return tuple(model_cards(listing))


def model_cards(listing: Any) -> dict[str, dict[str, Any]]:
    """Each card of an OpenAI model list by its `id`, in order ({} when it has none)."""
    data = listing.get("data") if isinstance(listing, dict) else None
    if not isinstance(data, list):
        return {}
    return {c["id"]: c for c in data if isinstance(c, dict) and isinstance(c.get("id"), str)}


@dataclasses.dataclass
class EngineState:
    """Mutable, single-writer (the supervisor) view of the engine.
    Times are `time.monotonic()` seconds; a field's note sits beside it.
    """

    phase: EnginePhase = EnginePhase.STARTING
    pid: int | None = None
    model: str = ""  # the name clients use (set from the config before the first boot)
    engine_version: str = ""
    # Every name the serving boot answers to, as its /v1/models lists them (its served names
    # and LoRA adapters; empty before the first ready boot).
    served_models: tuple[str, ...] = ()
    # The vLLM release the engine answers as (its GET /version, read when it becomes ready),
    # where llmd must mirror what differs between releases.
    api: EngineApi = ASSUMED
    max_model_len: int | None = None
    # What this boot stamps as `system_fingerprint` (one string per vLLM process), as its
    # warm-up's answer gave it: the JSON member's bytes (`"system_fingerprint":"vllm-..."`),
    # b"" when it stamps none; None until a warm-up of this boot was read (or with warm-up
    # off). llmd/endpoints/stream_usage.py puts it back on streams whose usage llmd asked for.
    fingerprint: bytes | None = None
    boot_started_at: float | None = None
    ready_at: float | None = None
    # How long the last successful boot took, used to estimate `Retry-After` while a boot is
    # under way.
    boot_s: float | None = None
    restarts: int = 0
    # Boots that never became ready within the supervisor's failure window.
    failed_boots: int = 0
    last_exit: ExitReason | None = None
    # The exits llmd did not ask for, by `ExitReason.kind` (each one is followed by a restart or
    # by giving up).
    exits_by_reason: dict[str, int] = dataclasses.field(default_factory=dict)
    restart_at: float | None = None
    # The engine's own `/v1/models` entries by id (its served names, its LoRA adapters with
    # their `parent` and `root`), read when it became ready and when its models are read again.
    cards: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    # What `llmd.supervisor.diagnosis` found in the engine's output at its last boot or
    # unrequested exit (slow paths at boot; the cause of a failure).
    diagnosis: tuple[Finding, ...] = ()
    # The release it runs (llmd/releases/position.py; None: no recorded release), set by deploys.
    release: str | None = None
    # Why, when llmd chose the release at start-up (llmd/releases/restore.py).
    release_note: str | None = None
    # An on-demand engine's wake under way or last: when it began (monotonic s) and how long
    # it took (s); `wakes`: its last wakes, whose median predicts the next.
    wake_started_at: float | None = None
    wake_s: float | None = None
    wakes: WakeTimes = dataclasses.field(default_factory=WakeTimes)

    @property
    def serving(self) -> bool:
        return self.phase is EnginePhase.SERVING

    def retry_after_s(self, default_boot_s: float = 60.0) -> float:
        """Seconds until the engine is likely to serve again (>= 1), for `Retry-After`."""
        now = time.monotonic()
        remaining = 0.0
        if self.phase in (EnginePhase.ASLEEP, EnginePhase.FALLING_ASLEEP, EnginePhase.WAKING):
            expected = self.predicted_wake_s(default_boot_s)
            started = self.wake_started_at if self.phase is EnginePhase.WAKING else None
            remaining = expected - (now - started) if started is not None else expected
        elif self.restart_at is not None and self.restart_at > now:
            remaining = self.restart_at - now + (self.boot_s or default_boot_s)
        elif self.boot_started_at is not None:
            remaining = (self.boot_s or default_boot_s) - (now - self.boot_started_at)
        return max(1.0, remaining)

    def predicted_wake_s(self, default_boot_s: float = 60.0) -> float:
        """How long its next wake should take: the median of its last wakes, else its last
        boot, else `default_boot_s`."""
        return self.wakes.predicted_s() or self.boot_s or default_boot_s

    def unavailable_error(self) -> EngineUnavailable:
        """The 503 for a request while the engine is not serving, with its Retry-After."""
        return EngineUnavailable(
            f"the engine is {self.phase.value}; retry later", retry_after_s=self.retry_after_s()
        )

    def uptime_s(self) -> float | None:
        """Seconds since the engine became ready, or None when it is not serving."""
        return time.monotonic() - self.ready_at if self.serving and self.ready_at else None

    def as_snapshot(self, sample: EngineSample | None, now: float) -> EngineStatus:
        """The engine's part of the Status: its phase, pid, model, uptime, restarts and exits,
        with the running and waiting gauges of its latest scrape `sample` (None: unknown)
        and that scrape's age against `now` (monotonic s)."""
        uptime = self.uptime_s()
        return EngineStatus(
            state=self.phase.value,
            pid=self.pid,
            model=self.model,
            version=self.engine_version,
            max_model_len=self.max_model_len,
            uptime_s=round(uptime, 1) if uptime is not None else None,
            restarts=self.restarts,
            last_exit_reason=self.last_exit.kind if self.last_exit else None,
            last_exit_detail=self.last_exit.detail if self.last_exit else None,
            exits_by_reason=dict(self.exits_by_reason),
            running=sample.running if sample else None,
            waiting=sample.waiting if sample else None,
            metrics_age_s=round(now - sample.taken_at, 2) if sample else None,
            diagnosis=tuple(finding.to_dict() for finding in self.diagnosis),
            release=self.release,
            release_note=self.release_note,
        )
