"""The device hold: engines that compute on one device (a GPU, or a host's CPU cores) form a
group; while an interactive request on one of them waits for its first token, no new batch
request starts on another engine of the group, each batch request for at most `bound_s`. Pure:
engine names, waits and a gate in, the engines held and the pass's gate out.

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
    """The rule: `groups` (`device_groups`) and `bound_s`, the longest a batch request is held
    (0: no hold)."""

    groups: Mapping[str, frozenset[str]] = dataclasses.field(default_factory=dict)
    bound_s: float = 0.0

    @property
    def active(self) -> bool:
        """Whether it can hold anything: some engines share a device and the bound is > 0."""
        return bool(self.groups) and self.bound_s > 0

    def held(self, waiting: Iterable[str]) -> dict[str, str]:
        """The engines held -> the engine of their group where an interactive request waits
        for its first token (the first by name when several). `waiting`: the engines where
        one waits (repeats allowed)."""
        out: dict[str, str] = {}
        if not self.active:
            return out
        for engine in sorted(set(waiting)):
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
    s) started only on an engine not in `held`. `refused` lists the picks refused for the
    hold alone (another engine of the pool could have taken them)."""

    def __init__(
        self, inner: PoolGate, hold: DeviceHold, held: Set[str], waits: Mapping[str, float]
    ) -> None:
        self.inner = inner
        self.hold = hold
        self.held = frozenset(held)
        self.waits = waits
        self.refused: list[Entry] = []

    def admits(self, entry: Entry, overdue: bool) -> str | None:
        wait = self.waits.get(entry.model, math.inf)
        if not self.held or not self.hold.applies(entry.cls, overdue, wait):
            return self.inner.admits(entry, overdue)
        backend = self.inner.admits(entry, overdue, exclude=self.held)
        if backend is None and self.inner.admits(entry, overdue) is not None:
            self.refused.append(entry)
        return backend

    def on_release(self, entry: Entry, backend: str) -> None:
        self.inner.on_release(entry, backend)
