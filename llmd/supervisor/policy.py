"""The restart policy: a pure function from the exit history to restart-now, back-off or give-up.

Modelled on gunicorn's arbiter and systemd's StartLimitBurst: exponential backoff between
restarts, and giving up after too many failed boots inside a window, so a broken model does not
crash-loop forever (llmd then exits with `EXIT_ENGINE_GAVE_UP` and systemd decides).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from llmd.config import SupervisorConfig


@dataclasses.dataclass(frozen=True)
class ExitRecord:
    """One engine exit llmd did not ask for: when (monotonic s) and whether it had become ready."""

    at: float
    was_ready: bool


@dataclasses.dataclass(frozen=True)
class Restart:
    """Restart after `delay_s` seconds; `attempt` counts consecutive failures (1-based)."""

    delay_s: float
    attempt: int


@dataclasses.dataclass(frozen=True)
class GiveUp:
    """Stop restarting: `failed_boots` boots failed within the window."""

    failed_boots: int


def decide_restart(
    policy: SupervisorConfig, history: Sequence[ExitRecord], now: float
) -> Restart | GiveUp:
    """Decide what to do after the last exit in `history` (oldest first, at least one record).

    Give up when `max_failed_boots` exits before readiness fall inside the last
    `failure_window_s`. Otherwise back off `backoff_initial_s * 2**(n-1)`, capped at
    `backoff_max_s`, where n is the number of exits inside the window, so an engine that served for
    long before one crash restarts at once-ish while a crash loop slows down.
    """
    recent = [record for record in history if now - record.at <= policy.failure_window_s]
    failed_boots = sum(1 for record in recent if not record.was_ready)
    if policy.max_failed_boots and failed_boots >= policy.max_failed_boots:
        return GiveUp(failed_boots=failed_boots)
    attempt = max(1, len(recent))
    delay = min(policy.backoff_max_s, policy.backoff_initial_s * 2 ** (attempt - 1))
    return Restart(delay_s=delay, attempt=attempt)
