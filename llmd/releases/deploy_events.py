"""The deploy state machine's vocabulary: its plan, the events it takes, the actions it asks
for, and its state. Pure data; the transitions are in llmd/releases/deploy.py.

Contract with the executor (the daemon): it runs the actions of one transition in order, each
finished before the next (`StopEngine` returns when the engine's process group is gone;
`SetShare` resets both releases' figures, so `Observed` always covers the current step), while
`BootEngine`, `RunSmoke` and `Drain` only start work whose end comes back as an event.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

from llmd.config.release import ReleaseConfig
from llmd.releases.compare import Verdict
from llmd.releases.figures import Figures


class Strategy(enum.StrEnum):
    """`canary`: the new release runs beside the old and takes rising shares of traffic;
    `replace`: the old is drained and stopped, then the new is booted in its place."""

    CANARY = "canary"
    REPLACE = "replace"


class DeployPhase(enum.StrEnum):
    BOOTING_NEW = "booting_new"
    SMOKING_NEW = "smoking_new"
    CANARY = "canary"
    DRAINING_OLD = "draining_old"
    BOOTING_OLD = "booting_old"
    SMOKING_OLD = "smoking_old"
    PROMOTED = "promoted"
    ROLLED_BACK = "rolled_back"
    FAILED = "failed"


TERMINAL = frozenset({DeployPhase.PROMOTED, DeployPhase.ROLLED_BACK, DeployPhase.FAILED})


@dataclasses.dataclass(frozen=True)
class DeployPlan:
    """One deploy of release `new` over `old` on engine `engine`. `steps` (percent, rising to
    100), `step_s` and `max_step_s` are the canary's; `rules` gives the comparison thresholds;
    `old_boot_attempts` is how often a `replace` tries to bring the old release back."""

    deploy_id: str
    engine: str
    old: str
    new: str
    strategy: Strategy
    steps: tuple[int, ...] = (5, 25, 50, 100)
    step_s: float = 300.0
    max_step_s: float = 1800.0
    rules: ReleaseConfig = dataclasses.field(default_factory=ReleaseConfig)
    old_boot_attempts: int = 3

    def history_line(self, event: str, **details: Any) -> dict[str, Any]:
        """A history line of this deploy: its identity, `event`, and the `details` that are
        not None."""
        line: dict[str, Any] = {
            "deploy": self.deploy_id,
            "engine": self.engine,
            "strategy": str(self.strategy),
            "old": self.old,
            "new": self.new,
            "event": event,
        }
        line.update({k: v for k, v in details.items() if v is not None})
        return line


# Events: what happened. `at` is the executor's monotonic clock, seconds.


@dataclasses.dataclass(frozen=True)
class Booted:
    """An engine with `release` finished booting (`ok`) or failed (exit, boot timeout)."""

    release: str
    ok: bool
    at: float
    detail: str = ""


@dataclasses.dataclass(frozen=True)
class SmokeDone:
    """The smoke gate of `release` ran; `failed_check` names the first failed check."""

    release: str
    passed: bool
    at: float
    failed_check: str = ""
    detail: str = ""


@dataclasses.dataclass(frozen=True)
class Drained:
    """The engine serving `release` has nothing in flight (or its drain deadline passed)."""

    release: str
    at: float


@dataclasses.dataclass(frozen=True)
class Observed:
    """Both releases' figures since the current step began (sent every few seconds)."""

    at: float
    old: Figures
    new: Figures


@dataclasses.dataclass(frozen=True)
class Abort:
    """An operator aborted the deploy (`llmd rollback`, llmd-top): go back to the old."""

    at: float
    reason: str


@dataclasses.dataclass(frozen=True)
class StepFailed:
    """The executor's work for a step (`step`: boot, smoke or drain) of `release` raised
    `error` instead of reporting its event: the deploy goes back to the old release."""

    step: str
    release: str
    at: float
    error: str


Event = Booted | SmokeDone | Drained | Observed | Abort | StepFailed


# Actions: what the executor must do.


@dataclasses.dataclass(frozen=True)
class BootEngine:
    """Start an engine of `release` for `engine` (beside the old one in a canary); answer
    with `Booted`."""

    engine: str
    release: str


@dataclasses.dataclass(frozen=True)
class RunSmoke:
    """Run the smoke gate against the engine of `release`; answer with `SmokeDone`."""

    engine: str
    release: str


@dataclasses.dataclass(frozen=True)
class SetShare:
    """Send `percent` of the engine's traffic (sticky, llmd/routing/canary.py) to `release`,
    the rest to the old release; reset both releases' figures."""

    engine: str
    release: str
    percent: int


@dataclasses.dataclass(frozen=True)
class Drain:
    """Stop releasing requests to the engine of `release` (they wait in llmd's queues within
    their timeouts) and wait for its in-flight ones; answer with `Drained`."""

    engine: str
    release: str


@dataclasses.dataclass(frozen=True)
class Resume:
    """Release queued and new requests of `engine` to the engine of `release`."""

    engine: str
    release: str


@dataclasses.dataclass(frozen=True)
class StopEngine:
    """Stop the engine of `release` (after its in-flight requests when `drain`)."""

    engine: str
    release: str
    drain: bool


@dataclasses.dataclass(frozen=True)
class RecordHistory:
    """Append `line` to the deploy history (llmd/releases/store.py stamps the time)."""

    line: dict[str, Any]


Action = BootEngine | RunSmoke | SetShare | Drain | Resume | StopEngine | RecordHistory


@dataclasses.dataclass(frozen=True)
class DeployState:
    """Where a deploy stands. `step` indexes `plan.steps` (-1 before the canary); `share` is
    the new release's percent of traffic; `serving` the release the rest goes to (None while a
    `replace` holds requests in the queues); `baseline` the old release's figures of the last
    step it had traffic in (what a 100% step is judged against); `verdict` the last one;
    `reason` why the deploy ended (terminal phases)."""

    plan: DeployPlan
    phase: DeployPhase
    step: int = -1
    share: int = 0
    serving: str | None = None
    step_began: float = 0.0
    baseline: Figures | None = None
    verdict: Verdict | None = None
    old_boots: int = 0
    reason: str = ""

    @property
    def done(self) -> bool:
        return self.phase in TERMINAL

    def as_snapshot(self) -> dict[str, Any]:
        """What status and llmd-top show of a deploy in progress."""
        plan = self.plan
        return {
            "deploy": plan.deploy_id,
            "engine": plan.engine,
            "strategy": str(plan.strategy),
            "old": plan.old,
            "new": plan.new,
            "phase": str(self.phase),
            "step": self.step + 1 if self.step >= 0 else None,
            "steps": list(plan.steps),
            "share": self.share,
            "verdict": self.verdict.to_dict() if self.verdict else None,
            "reason": self.reason or None,
        }
