"""llmd-top's connection to the daemon as the header shows it: up or lost (since when, why),
whether the last snapshot could be shown, and what changed across the last two snapshots that
the operator must be told about."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from llmd.admin.status_text import drained_backends

Snapshot = dict[str, Any]


@dataclasses.dataclass
class Link:
    """The state of the connection to the admin socket. `lost_since` is Unix time (s) of the
    first failed fetch in a row; None while connected. `fault` says why the last snapshot
    fetched could not be shown (a snapshot llmd-top cannot read, a fault in llmd-top itself);
    None from the next fetch on."""

    socket: str
    interval_s: float
    connected: bool = False
    lost_since: float | None = None
    error: str | None = None
    fetched: int = 0
    fault: str | None = None

    def up(self) -> None:
        self.connected = True
        self.lost_since = None
        self.error = None
        self.fault = None
        self.fetched += 1

    def lost(self, error: str) -> None:
        if self.connected or self.lost_since is None:
            self.lost_since = time.time()
        self.connected = False
        self.error = error

    def not_shown(self, error: str) -> None:
        self.fault = error


def changes(before: Snapshot | None, after: Snapshot) -> list[str]:
    """Plain sentences for what happened between two snapshots that the panels alone would not
    make plain: llmd itself restarted (a new `started_at`), the engine restarted (more
    `restarts`, or a new pid), draining began or ended (of llmd, or of a backend by name)."""
    if before is None:
        return []
    notes = []
    if before.get("started_at") != after.get("started_at"):
        notes.append("llmd restarted: this is a new daemon process")
        return notes
    old, new = before["engine"], after["engine"]
    if new["restarts"] > old["restarts"]:
        reason = new.get("last_exit_reason") or "unknown reason"
        notes.append(f"engine restarted ({reason}); pid {old['pid']} → {new['pid']}")
    if after["draining"] != before["draining"]:
        notes.append("llmd is draining" if after["draining"] else "llmd admits requests again")
    was, now = set(drained_backends(before)), set(drained_backends(after))
    notes += [f"engine {name} drained: it takes no new request" for name in sorted(now - was)]
    notes += [f"engine {name} takes requests again" for name in sorted(was - now)]
    return notes
