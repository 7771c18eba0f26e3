"""The device hold: engines that compute on one device (a GPU, or a host's CPU cores) form a
group; while an interactive request on one of them waits for its first token, no new batch
request starts on another engine of the group, each batch request for at most `bound_s`; and
while interactive work is present there, batch runs at most `batch_seats` at a time on each
other engine of the group. Pure: engine names, waits and a gate in, the engines held and the
pass's gate out.

Why: the classes order the requests that wait for the same backend, but a burst on another
engine of the device slows an interactive prefill through the device itself (an embeddings
burst beside a chat on 2 CPU cores: docs/bench/embeddings.md).

The rule (property-tested in tests/admission/test_sharing.py):
- An engine is *held* while an interactive request waits for its first token on another
  engine of its group: queued in llmd for a pool that engine serves, or sent there with no
  byte back yet. Engines that share no device (upstreams, simulators without `device`) are
  never held, and a hold never reaches past a group.
- Only batch picks are held, and only those released without aging (`overdue` False) on a
  pool whose oldest queued batch request has waited less than `bound_s`. So no batch request
  is held past the bound, and the scheduler's own held pick (always overdue), which would stop
  its whole pool while refused, never is.
- A held pick may still start on an engine of its pool that is not held. Refused, it blocks
  only batch on its pool for the rest of the pass (the scheduler's rule for a refused pick):
  interactive and normal requests are never delayed by the hold. Requests already running are
  not touched.
- The seat limit: while an interactive request is queued for or running on an engine of the
  group, or was within the last `LINGER_S` (a chat's next turn), a batch pick (not overdue)
  starts on another engine of the group only while fewer than `batch_seats` batch requests run
  there. It has no time bound and needs none: it refuses only where a batch request runs, whose
  end lets the next one start, so batch keeps `batch_seats` running. What it buys: the work in
  flight on the device when a chat's prompt arrives is one batch request's, not a burst's (the
  hold alone keeps new ones back, not those already running: docs/bench/embeddings.md).
- The pause (`pause`): while an engine is held, if every request llmd runs on it is batch,
  its processes are stopped until the wait ends, each pause for at most `bound_s`; one that
  reached the bound is not begun again until the engine is no longer held. An engine running
  an interactive or normal request is never paused, so they are never delayed by it.
- Normal requests are not held: normal is the class of every request that names none (chat
  UIs, agents), so holding it would trade one user's latency for another's; batch is work a
  client marked as background.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Set

from llmd.admission.classes import Priority
from llmd.admission.entries import Entry
from llmd.admission.pools import PoolGate

# How long after an interactive request on an engine the seat limit still counts it present,
# seconds: a closed-loop chat's next turn comes within it, so the limit does not lapse (and
# let a burst start) between two turns.
LINGER_S = 2.0


def device_groups(devices: Mapping[str, Iterable[str]]) -> dict[str, frozenset[str]]:
    """Engine name -> its group: the engines linked to it by shared devices (transitively),
    itself included; only engines that share a device with another appear. `devices` maps
    each engine to what it computes on (`EngineConfig.shared_device`: `gpu:0`, `device:cpu`)."""
    parent = {name: name for name in devices}

    def root(name: str) -> str:
        while parent[name] != name:
            parent[name] = parent[parent[name]]
            name = parent[name]
        return name

    first_user: dict[str, str] = {}
    for name, keys in devices.items():
        for key in keys:
            other = first_user.setdefault(key, name)
            parent[root(name)] = root(other)
    members: dict[str, set[str]] = {}
    for name in devices:
        members.setdefault(root(name), set()).add(name)
    return {name: frozenset(group) for name in devices if len(group := members[root(name)]) > 1}


@dataclasses.dataclass(frozen=True)
class DeviceHold:
    """The rule: `groups` (`device_groups`), `bound_s`, the longest a batch request is held
    (0: no hold), and `batch_seats`, the most batch requests running on an engine while
    interactive work is present on another of its group (0: no limit); `pause`: held engines
    that run batch only are stopped, for at most `bound_s` at a time."""

    groups: Mapping[str, frozenset[str]] = dataclasses.field(default_factory=dict)
    bound_s: float = 0.0
    batch_seats: int = 0
    pause: bool = False

    @property
    def active(self) -> bool:
        """Whether it can hold anything: some engines share a device and the bound is > 0."""
        return bool(self.groups) and self.bound_s > 0

    @property
    def limits(self) -> bool:
        """Whether the seat limit can apply: some engines share a device, batch_seats > 0."""
        return bool(self.groups) and self.batch_seats > 0

    def held(self, waiting: Iterable[str]) -> dict[str, str]:
        """The engines held -> the engine of their group where an interactive request waits
        for its first token (the first by name when several). `waiting`: the engines where
        one waits (repeats allowed)."""
        return self._others(waiting) if self.active else {}

    def paused(
        self,
        held: Iterable[str],
        busy: Set[str],
        began: Mapping[str, float],
        spent: Set[str],
        now: float,
    ) -> dict[str, float]:
        """The engines to keep stopped at `now` -> when their pause began: those `held` that
        run no request but batch (`busy`: the engines running an interactive or normal one),
        whose pause (begun at `began`, now if new) is under `bound_s`, and whose pause did not
        reach it already in this hold (`spent`)."""
        if not (self.pause and self.active):
            return {}
        out: dict[str, float] = {}
        for engine in held:
            start = began.get(engine, now)
            if engine not in busy and engine not in spent and now - start < self.bound_s:
                out[engine] = start
        return out

    def limited(self, present: Iterable[str]) -> dict[str, str]:
        """The engines whose batch seats are limited -> the engine of their group where
        interactive work is present (the first by name when several). `present`: the engines
        where it is (repeats allowed)."""
        return self._others(present) if self.limits else {}

    def _others(self, engines: Iterable[str]) -> dict[str, str]:
        out: dict[str, str] = {}
        for engine in sorted(set(engines)):
            for other in self.groups.get(engine, ()):
                if other != engine:
                    out.setdefault(other, engine)
        return out

    def applies(self, cls: Priority, overdue: bool, oldest_wait_s: float) -> bool:
        """Whether a pick of class `cls` (`overdue`: released by aging) may be kept off held
        engines, on a pool whose oldest queued batch request has waited `oldest_wait_s`."""
        return (
            self.active and cls is Priority.BATCH and not overdue and oldest_wait_s < self.bound_s
        )


class HoldGate:
    """The scheduler's Gate (llmd/admission/entries.py) for one pass: `inner`, with each pick
    the hold applies to (`DeviceHold.applies`; `waits`: each pool's oldest queued batch wait,
    s) started only on an engine not in `held`, and each batch pick not overdue started only on
    an engine with a seat left in `seats_left` (engine -> batch requests it may still start;
    engines not in it: no limit), counted down as the pass releases batch there. `refused`
    lists the picks refused for the hold or the limit alone (another engine of the pool could
    have taken them)."""

    def __init__(
        self,
        inner: PoolGate,
        hold: DeviceHold,
        held: Set[str],
        waits: Mapping[str, float],
        seats_left: Mapping[str, int] | None = None,
    ) -> None:
        self.inner = inner
        self.hold = hold
        self.held = frozenset(held)
        self.waits = waits
        self.seats_left = dict(seats_left or {})
        self.refused: list[Entry] = []

    def admits(self, entry: Entry, overdue: bool) -> str | None:
        if entry.cls is not Priority.BATCH or overdue:
            return self.inner.admits(entry, overdue)
        exclude = {name for name, left in self.seats_left.items() if left <= 0}
        wait = self.waits.get(entry.model, math.inf)
        if self.held and self.hold.applies(entry.cls, overdue, wait):
            exclude |= self.held
        if not exclude:
            return self.inner.admits(entry, overdue)
        backend = self.inner.admits(entry, overdue, exclude=frozenset(exclude))
        if backend is None and self.inner.admits(entry, overdue) is not None:
            self.refused.append(entry)
        return backend

    def on_release(self, entry: Entry, backend: str) -> None:
        self.inner.on_release(entry, backend)
        if entry.cls is Priority.BATCH and backend in self.seats_left:
            self.seats_left[backend] -= 1
