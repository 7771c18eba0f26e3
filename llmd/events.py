"""Recent events: a small bounded list of the notable log events, for the Status snapshot.
`llmd-top` shows it; `GET /status` serves it as `events`.

A structlog processor placed after the rate limiter keeps the last `capacity` events an operator
wants to see at a glance:
- every warning and error (engine exits and restarts, suppressed-line summaries, drain
  deadlines, operator cancels);
- a few info events (the engine started or became ready, drains, reloads);
- requests refused or failed.
A storm of one event is already collapsed by the limiter into its "suppressed N similar" line,
so the list is never flooded by one key.
"""

from __future__ import annotations

import collections
import dataclasses
import threading
import time
from collections.abc import Callable, MutableMapping
from typing import Any

CAPACITY = 50
MESSAGE_CHARS = 200
# Info events worth an operator's eye (an exit llmd asked for is one); warnings and errors are
# always kept.
NOTABLE_INFO = frozenset(
    {"llmd_started", "engine_started", "engine_ready", "drain_started", "drain_ended",
     "config_reloaded", "stop_requested", "engine_restart_requested", "engine_exited"}
)  # fmt: skip
# request_finished lines kept: refused before the engine, ended by llmd, or failed.
NOTABLE_OUTCOMES = frozenset({"rejected", "aborted", "error"})
# Fields that are noise in a one-line summary.
_SKIPPED = frozenset({"event", "timestamp", "level", "logger", "argv"})
_LEVEL_NAMES = {"warn": "warning", "exception": "error", "fatal": "critical"}
_ALWAYS_KEPT = frozenset({"warning", "error", "critical"})


@dataclasses.dataclass(frozen=True)
class Event:
    """One notable event: `at` is Unix time (s), `level` the log level name, `event` the log
    event's name, `message` its other fields as `key=value` text (at most 200 characters)."""

    at: float
    level: str
    event: str
    message: str


class RecentEvents:
    """A structlog processor that records notable events (see the module docstring) into a
    ring of `capacity` and passes every event on unchanged."""

    def __init__(self, capacity: int = CAPACITY, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._events: collections.deque[Event] = collections.deque(maxlen=capacity)
        self._lock = threading.Lock()

    def __call__(
        self, logger: Any, method_name: str, event: MutableMapping[str, Any]
    ) -> MutableMapping[str, Any]:
        name = str(event.get("event"))
        level = _LEVEL_NAMES.get(method_name, method_name)
        if _notable(name, level, event):
            message = " ".join(
                f"{k}={v}" for k, v in event.items() if k not in _SKIPPED and v is not None
            )
            record = Event(self.clock(), level, name, message[:MESSAGE_CHARS])
            with self._lock:
                self._events.append(record)
        return event

    def recent(self) -> tuple[Event, ...]:
        """The recorded events, oldest first."""
        with self._lock:
            return tuple(self._events)


def _notable(name: str, level: str, event: MutableMapping[str, Any]) -> bool:
    if level in _ALWAYS_KEPT:
        return True
    if name == "request_finished":
        return event.get("outcome") in NOTABLE_OUTCOMES
    return name in NOTABLE_INFO


_recent = RecentEvents()


def recent_events() -> RecentEvents:
    """The process's one recorder (kept across `configure_logging` calls)."""
    return _recent
