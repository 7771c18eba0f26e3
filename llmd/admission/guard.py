"""The SLO guard's level machine: how far llmd degrades while a class misses its first-token
budget, and how it recovers. Pure: readings and a clock in, a level and its reason out.

The levels, in the one order they are taken (each keeps the measures of the levels below it):

    0  normal
    1  hold batch releases (batch waits in llmd, within its queue timeout)
    2  cap max_tokens of newly released normal and batch requests
    3  shed new batch requests (503 `overloaded`, Retry-After from the expected recovery)
    4  shed new normal requests

Invariants (property-tested in tests/admission/test_guard.py):
- The level moves by at most one step per change, and two changes are at least `dwell_s` apart.
- It rises only while some class with a budget is over it (measured or predicted), and falls
  only while every such class is under `recover_ratio` x its budget (hysteresis): between the
  two it holds.
- Interactive requests are never held, capped or shed, at any level or override.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping

from llmd.admission.classes import Priority
from llmd.numerals import ascii_int


class Level(enum.IntEnum):
    """How far the guard has degraded service; each level keeps the measures below it."""

    NORMAL = 0
    HOLD_BATCH = 1
    CAP_MAX_TOKENS = 2
    SHED_BATCH = 3
    SHED_NORMAL = 4


# The level from which each class is shed; interactive has none.
_SHED_FROM = {Priority.BATCH: Level.SHED_BATCH, Priority.NORMAL: Level.SHED_NORMAL}


@dataclasses.dataclass(frozen=True)
class GuardPolicy:
    """The guard's settings: `budgets_s` maps each class with a budget to its time-to-first-
    token p95 budget (seconds); a p95 counts once it rests on `min_samples` requests; levels
    change at most every `dwell_s` seconds; recovery needs every class under `recover_ratio` x
    its budget; at level 2 and above, normal and batch requests get at most `max_tokens_cap`."""

    budgets_s: Mapping[Priority, float]
    min_samples: int = 20
    dwell_s: float = 10.0
    recover_ratio: float = 0.8
    max_tokens_cap: int = 256


@dataclasses.dataclass(frozen=True)
class ClassReading:
    """What the guard sees of one class: its TTFT p95 over the recent window (seconds; None
    when no request finished) and how many requests it rests on; `predicted_s`, the first-token
    time the oldest request queued in the class can expect (its wait so far plus the engine's
    recent prefill time; None when nothing waits)."""

    p95_s: float | None = None
    samples: int = 0
    predicted_s: float | None = None


@dataclasses.dataclass(frozen=True)
class GuardState:
    """The level, when it last changed (monotonic seconds), why, and an operator override:
    None (automatic), `Level.NORMAL` with `enabled` False (guard off), or a fixed level."""

    level: Level = Level.NORMAL
    since: float = float("-inf")
    reason: str = ""
    enabled: bool = True
    pinned: Level | None = None


def next_state(
    state: GuardState, readings: Mapping[Priority, ClassReading], policy: GuardPolicy, now: float
) -> GuardState:
    """The guard's state after one evaluation at `now` (monotonic seconds).

    Off or pinned by the operator: unchanged. Otherwise one step up when a class is over its
    budget, one step down when every class is under its recovery line, each only once `dwell_s`
    has passed since the last change; else unchanged.
    """
    if not state.enabled or state.pinned is not None:
        return state
    over = _over_budget(readings, policy)
    settled = now - state.since >= policy.dwell_s
    if over and state.level < Level.SHED_NORMAL and settled:
        return dataclasses.replace(state, level=Level(state.level + 1), since=now, reason=over)
    if not over and state.level > Level.NORMAL and settled and _recovered(readings, policy):
        return dataclasses.replace(
            state, level=Level(state.level - 1), since=now, reason="every class within budget"
        )
    return state


def _over_budget(readings: Mapping[Priority, ClassReading], policy: GuardPolicy) -> str:
    """Why some class is over its budget ('' when none is): measured p95 (enough samples) or
    the prediction for its oldest queued request."""
    for cls, budget in sorted(policy.budgets_s.items()):
        reading = readings.get(cls, ClassReading())
        p95 = reading.p95_s or 0.0
        if reading.samples >= policy.min_samples and p95 > budget:
            return (
                f"{cls.label} TTFT p95 {p95 * 1000:.0f} ms over its budget "
                f"{budget * 1000:.0f} ms ({reading.samples} requests)"
            )
        if reading.predicted_s is not None and reading.predicted_s > budget:
            return (
                f"{cls.label} predicted TTFT {reading.predicted_s * 1000:.0f} ms over its budget "
                f"{budget * 1000:.0f} ms (queued request)"
            )
    return ""


def _recovered(readings: Mapping[Priority, ClassReading], policy: GuardPolicy) -> bool:
    """Every class with a budget is under `recover_ratio` x budget, measured and predicted
    (a p95 on too few samples does not hold recovery back)."""
    for cls, budget in policy.budgets_s.items():
        line = budget * policy.recover_ratio
        reading = readings.get(cls, ClassReading())
        if reading.samples >= policy.min_samples and (reading.p95_s or 0.0) > line:
            return False
        if reading.predicted_s is not None and reading.predicted_s > line:
            return False
    return True


def overridden(state: GuardState, mode: str, now: float) -> GuardState:
    """The state after an operator's `llmd guard off|on|level N`: `off` stops the guard (level
    0 in force, nothing held or shed), `on` returns to automatic from level 0, `level N` pins
    level N (0-4) until `on`, `off` or a reload. Raises ValueError for another mode."""
    if mode == "off":
        return GuardState(since=now, reason="turned off by the operator", enabled=False)
    if mode == "on":
        return GuardState(since=now, reason="turned on by the operator")
    name, _, number = mode.partition(" ")
    index = ascii_int(number.strip())
    if name == "level" and index is not None and index <= Level.SHED_NORMAL:
        level = Level(index)
        return GuardState(level=level, since=now, reason="pinned by the operator", pinned=level)
    raise ValueError(f"guard mode must be off, on or 'level N' (N 0-4), got {mode!r}")


def effective_level(state: GuardState) -> Level:
    """The level in force: the operator's pin, NORMAL when the guard is off, else the state's."""
    if not state.enabled:
        return Level.NORMAL
    return state.pinned if state.pinned is not None else state.level


def holds_release(state: GuardState, cls: Priority) -> bool:
    """Whether a queued request of `cls` is held in llmd (batch from level 1)."""
    return cls is Priority.BATCH and effective_level(state) >= Level.HOLD_BATCH


def max_tokens_cap(state: GuardState, cls: Priority, policy: GuardPolicy) -> int | None:
    """The max_tokens cap for a request of `cls` released now (normal and batch from level
    2), or None."""
    if cls is Priority.INTERACTIVE or effective_level(state) < Level.CAP_MAX_TOKENS:
        return None
    return policy.max_tokens_cap


def sheds(state: GuardState, cls: Priority) -> bool:
    """Whether a new request of `cls` is turned away (batch from level 3, normal from 4;
    interactive never)."""
    shed_from = _SHED_FROM.get(cls)
    return shed_from is not None and effective_level(state) >= shed_from


def retry_after_s(state: GuardState, cls: Priority, policy: GuardPolicy, now: float) -> float:
    """When a request of `cls` shed now can expect to be admitted (seconds, at least 1): the
    rest of the current dwell plus one dwell per further step down to below `cls`'s shed
    level, assuming recovery from now on. A pinned level gives one dwell (the operator decides)."""
    shed_from = _SHED_FROM.get(cls)
    level = effective_level(state)
    if shed_from is None or level < shed_from:
        return 1.0
    if state.pinned is not None:
        return max(1.0, policy.dwell_s)
    rest = max(0.0, state.since + policy.dwell_s - now)
    return max(1.0, rest + (level - shed_from) * policy.dwell_s)
