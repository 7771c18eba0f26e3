"""Capacity per backend, grouped in pools: which backend of a request's pool can start it now.
Pure: the caller passes `now` (monotonic seconds).

- Admission stays one layer (tenants, classes, aging and fairness are global in the scheduler);
  the capacity gate (llmd/admission/capacity.py: seats, KV, engine waiting) is one per backend.
- An entry may start when at least one backend of its pool is available (serving, and its
  breaker lets a request through), its gate admits the entry and so does its batch pacing
  (llmd/admission/pacing.py; an overdue entry is not paced); among those, `choose` picks one
  (llmd/routing/choice.py: least load with prefix affinity under a bound). So a request waits in
  llmd only for capacity on its own pool.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Set
from typing import Protocol

from llmd.admission.capacity import CapacityGate
from llmd.admission.entries import Entry
from llmd.admission.pacing import IntakePace
from llmd.routing.backend import Backend, BackendKind, group_pools
from llmd.routing.breaker import CircuitBreaker
from llmd.routing.choice import AffinityPolicy, Choice, choose, only_candidate

# Retry-After for a pool none of whose backends is expected back (every engine gave up): the
# scheduler's cap on its own Retry-After estimates (llmd/admission/scheduler.py).
MAX_WAIT_S = 600.0
# Retry-After while an upstream awaits its first probe's answer (the probe's own timeout).
FIRST_PROBE_WAIT_S = 5.0


@dataclasses.dataclass
class _Slot:
    """One backend: its gate (llmd's accounting, the engine's load, serving), its breaker
    (upstreams), when a down engine should serve again (`back_at`, None: not expected), and
    whether an operator drained it (`drained_for`: the Retry-After it gives; None: not
    drained), and whether a deploy holds it (`held`: being replaced or smoke-tested; its
    pool's requests wait in the queue meanwhile)."""

    name: str
    kind: BackendKind
    models: tuple[str, ...]
    gate: CapacityGate
    breaker: CircuitBreaker | None
    back_at: float | None = None
    drained_for: float | None = None
    held: bool = False
    # An on-demand engine asleep or being woken: its pool's requests wait in the queue (None:
    # awake), with the seconds until it is likely to serve; `closed`: its swap group lets it
    # take no new request, so that it drains (llmd/admission/swap.py).
    dormant_s: float | None = None
    closed: bool = False
    # Its intake, as llmd's releases fill it: batch is let in at the rate it takes sequences.
    pace: IntakePace = dataclasses.field(default_factory=IntakePace)

    def available(self, now: float) -> bool:
        return (
            self.gate.serving
            and self.drained_for is None
            and not self.held
            and not self.closed
            and (self.breaker is None or self.breaker.available(now))
        )

    def view(self, now: float) -> Backend:
        gate, breaker = self.gate, self.breaker
        return Backend(
            name=self.name,
            kind=self.kind,
            models=self.models,
            seats=gate.max_in_flight,
            in_flight=gate.in_flight,
            reserved_tokens=gate.reserved_tokens,
            engine=gate.current_load(),
            serving=gate.serving,
            breaker=breaker.state(now) if breaker is not None else None,
            reachable=breaker is None or breaker.available(now),
        )

    def wait_s(self, now: float) -> float:
        """Seconds until it is likely available again (0: it is)."""
        wait = 0.0
        if self.dormant_s is not None:
            wait = self.dormant_s
        elif not self.gate.serving:
            wait = self.back_at - now if self.back_at is not None else MAX_WAIT_S
        if self.drained_for is not None:
            wait = max(wait, self.drained_for)
        if self.breaker is not None:
            wait = max(wait, self.breaker.retry_after_s(now))
        return wait


class Split(Protocol):
    """A canary's split of one pool (llmd/releases/canary.py): the backend a request of
    `tenant` in conversation `key` must run on."""

    def backend_for(self, tenant: str, key: str | None) -> str: ...


@dataclasses.dataclass(frozen=True)
class _Placement:
    """Where a released entry runs: the slot itself, so that it finishes there even after its
    backend was removed or replaced."""

    slot: _Slot
    model: str


class PoolCapacity:
    """Every backend's capacity gate, in pools by model name, and where released entries went.

    Single-threaded, like the scheduler. Backends come from the config and change on reload
    (`add`, `remove`); an upstream has a CircuitBreaker, an engine none (its supervisor sets
    `serving`).
    """

    def __init__(self, affinity: AffinityPolicy | None = None) -> None:
        self.affinity = affinity or AffinityPolicy()
        self._slots: dict[str, _Slot] = {}
        self._pools: dict[str, tuple[str, ...]] = {}
        self._placed: dict[Entry, _Placement] = {}
        # Pools a canary splits (by model): each request runs only on its split's backend.
        self.splits: dict[str, Split] = {}

    # -- membership and state ----------------------------------------------------------------

    def add(
        self,
        name: str,
        kind: BackendKind,
        models: Iterable[str],
        gate: CapacityGate,
        breaker: CircuitBreaker | None = None,
    ) -> None:
        """Add backend `name` serving `models` (none yet: an upstream whose models are read
        from it later, `set_models`). Raises ValueError for a name already added."""
        models = tuple(models)
        if name in self._slots:
            raise ValueError(f"backend {name!r} is already added")
        self._slots[name] = _Slot(name, kind, models, gate, breaker)
        self._regroup()

    def remove(self, name: str) -> None:
        """Take backend `name` out of its pools: no new request goes there; those running
        there finish there (and count in its old gate). Raises KeyError."""
        del self._slots[name]
        self._regroup()

    def set_models(self, name: str, models: Iterable[str]) -> None:
        """Backend `name` now serves `models` (an upstream's /v1/models changed): it joins
        and leaves pools; its gate and breaker stay. Raises KeyError."""
        self._slots[name].models = tuple(models)
        self._regroup()

    def names(self) -> tuple[str, ...]:
        """Every backend's name, in the order added."""
        return tuple(self._slots)

    def pool(self, model: str) -> tuple[str, ...] | None:
        """The backends serving `model` in config order, or None: an unknown model."""
        return self._pools.get(model)

    def models(self) -> tuple[str, ...]:
        """Every model name some backend serves."""
        return tuple(self._pools)

    def gate(self, backend: str) -> CapacityGate:
        """`backend`'s gate, to update its engine load (`gate.load`). Raises KeyError."""
        return self._slots[backend].gate

    def pace(self, backend: str) -> IntakePace:
        """`backend`'s batch pacing, to set its interval and burst. Raises KeyError."""
        return self._slots[backend].pace

    def paced_until(self, now: float) -> float | None:
        """The next time after `now` when a backend's pacing lets more batch in (None: none
        is pacing)."""
        return min(
            (at for slot in self._slots.values() if (at := slot.pace.ready_at(now)) is not None),
            default=None,
        )

    def breaker(self, backend: str) -> CircuitBreaker | None:
        """`backend`'s breaker (None for an engine), to record outcomes. Raises KeyError."""
        return self._slots[backend].breaker

    def set_serving(self, backend: str, serving: bool, back_at: float | None = None) -> None:
        """The supervisor's (or health probe's) word on `backend`; when not serving, `back_at`
        is when it should serve again (restart backoff + boot estimate; None: not expected,
        e.g. it gave up). Raises KeyError."""
        slot = self._slots[backend]
        slot.gate.serving = serving
        slot.back_at = None if serving else back_at

    def set_draining(self, backend: str, retry_after_s: float | None) -> None:
        """An operator drains `backend` (`retry_after_s`: what a request that finds its whole
        pool drained is told) or resumes it (None). A drained backend takes no new request;
        those running there finish. Raises KeyError."""
        self._slots[backend].drained_for = retry_after_s

    def set_held(self, backend: str, held: bool) -> None:
        """A deploy holds `backend` (True: it takes no request, and requests for its pool wait
        in the queue within their timeouts instead of a 503) or lets it go. Raises KeyError."""
        self._slots[backend].held = held

    def holding(self, model: str) -> bool:
        """Whether a backend of `model`'s pool is one its requests wait for in the queue: a
        deploy holds it, it sleeps on demand or is being woken (and no operator drained it), or
        its swap group closed it while it drains."""
        return any(
            slot.held or (slot.dormant_s is not None and slot.drained_for is None) or slot.closed
            for slot in (self._slots[name] for name in self._pools.get(model, ()))
        )

    def set_dormant(self, backend: str, wake_s: float | None) -> None:
        """`backend` sleeps on demand, or is being woken, and should serve in about `wake_s`
        seconds (None: it is awake). Raises KeyError."""
        self._slots[backend].dormant_s = wake_s

    def set_closed(self, backend: str, closed: bool) -> None:
        """Its swap group lets `backend` take no new request (True) or lets it again. Raises
        KeyError."""
        self._slots[backend].closed = closed

    def wake_s(self, model: str, now: float) -> float | None:
        """Seconds until `model`'s pool likely serves, when it waits only for engines asleep
        on demand or being woken (None: it can take requests now, or waits for something
        else)."""
        slots = [self._slots[name] for name in self._pools.get(model, ())]
        if not slots or any(slot.available(now) for slot in slots):
            return None
        waits = [
            slot.dormant_s
            for slot in slots
            if slot.dormant_s is not None and slot.drained_for is None
        ]
        return min(waits) if waits else None

    def draining(self, backend: str) -> bool:
        """Whether an operator drained `backend`. Raises KeyError."""
        return self._slots[backend].drained_for is not None

    def backends(self, now: float, model: str | None = None) -> list[Backend]:
        """Every backend (or `model`'s pool) as it is at `now`, in config order."""
        names = self._slots if model is None else self._pools.get(model, ())
        return [self._slots[name].view(now) for name in names]

    # -- decisions ----------------------------------------------------------------------------

    def admits(
        self,
        entry: Entry,
        overdue: bool,
        now: float,
        model: str,
        key: str | None,
        exclude: Set[str] = frozenset(),
    ) -> Choice | None:
        """The backend of `model`'s pool, not in `exclude`, that may start `entry` now
        (`overdue`: released by aging, and then not paced; `key`: its prefix key,
        llmd/routing/prefix.py), or None: none can yet."""
        names = self._pools.get(model, ())
        split = self.splits.get(model)
        if split is not None:
            names = (split.backend_for(entry.tenant.name, entry.conversation),)
        able = [
            slot
            for name in names
            if name not in exclude
            and (slot := self._slots[name]).available(now)
            and slot.gate.admits(entry, overdue)
            and (overdue or slot.pace.admits(entry, now))
        ]
        if len(able) == 1:  # nothing to choose between (a pool of one, most often): no views
            return only_candidate(able[0].name, key)
        return choose([slot.view(now) for slot in able], key, self.affinity)

    def on_release(self, entry: Entry, backend: str, now: float, model: str) -> None:
        """`entry` starts on `backend` (as `admits` chose): counted in its gate; for a
        half-open upstream it is the probe."""
        self._start(entry, self._slots[backend], now, model)

    def on_finish(self, entry: Entry) -> None:
        """`entry` has ended (any way): its backend's capacity is free again."""
        placement = self._placed.pop(entry, None)
        if placement is not None:
            placement.slot.gate.on_finish(entry)

    def backend_of(self, entry: Entry) -> str | None:
        """Where a released entry runs, or None (not released, or finished)."""
        placement = self._placed.get(entry)
        return placement.slot.name if placement is not None else None

    def reroute(self, entry: Entry, exclude: frozenset[str], now: float) -> str | None:
        """Move a released `entry` whose backend failed before the first byte to the
        least-filled available backend of its pool not in `exclude` (llmd/routing/retry.py),
        or None when there is none. Its gate's limits are not applied: the entry already
        waited its turn, and it retries once, so a backend is overcommitted by at most one
        request per failed one. Never during a canary of the pool."""
        placement = self._placed.get(entry)
        if placement is None or placement.model in self.splits:
            return None  # a canary's failure stays on its release, where it is counted
        candidates = [
            slot.view(now)
            for name in self._pools.get(placement.model, ())
            if name not in exclude and (slot := self._slots[name]).available(now)
        ]
        choice = choose(candidates, None, self.affinity)
        if choice is None:
            return None
        placement.slot.gate.on_finish(entry)
        self._start(entry, self._slots[choice.backend], now, placement.model)
        return choice.backend

    def kv_tokens(self, model: str) -> int | None:
        """The KV capacity of `model`'s pool, in tokens: what its backends' last scrapes
        reported, summed (None: none has reported one)."""
        loads = [self._slots[name].gate.load for name in self._pools.get(model, ())]
        total = sum(load.kv_tokens or 0 for load in loads if load is not None)
        return total or None

    def available(self, model: str, now: float) -> bool:
        """Whether some backend of `model`'s pool can take requests now (serving, not
        drained, reachable; its seats may still be full: then requests queue)."""
        return any(self._slots[name].available(now) for name in self._pools.get(model, ()))

    def retry_after_s(self, model: str, now: float) -> float:
        """Retry-After (1..600 s) for a pool with no available backend: the soonest any of
        them is expected back (a breaker's cooldown, an engine's restart backoff and boot, a
        drain's hint)."""
        waits = [self._slots[name].wait_s(now) for name in self._pools.get(model, ())]
        return min(max(1.0, min(waits, default=MAX_WAIT_S)), MAX_WAIT_S)

    def _start(self, entry: Entry, slot: _Slot, now: float, model: str) -> None:
        slot.gate.on_release(entry)
        slot.pace.on_release(entry, now)
        if slot.breaker is not None:
            slot.breaker.on_attempt(now)
        self._placed[entry] = _Placement(slot, model)

    def _regroup(self) -> None:
        self._pools = group_pools((slot.name, slot.models) for slot in self._slots.values())


class PoolGate:
    """The scheduler's `Gate` (llmd/admission/entries.py) over every pool at one `now`:
    `admits` picks a backend of the entry's pool (`entry.model`, less `exclude`) by its prefix
    key (`entry.affinity`), `on_release` starts the entry there. `choices` keeps each release's
    choice (affinity, spilled) for the caller to count."""

    def __init__(self, capacity: PoolCapacity, now: float) -> None:
        self.capacity = capacity
        self.now = now
        self.choices: dict[Entry, Choice] = {}
        self._offer: tuple[Entry, Choice] | None = None

    def admits(self, entry: Entry, overdue: bool, exclude: Set[str] = frozenset()) -> str | None:
        choice = self.capacity.admits(
            entry, overdue, self.now, entry.model, entry.affinity, exclude
        )
        self._offer = (entry, choice) if choice is not None else None
        return choice.backend if choice is not None else None

    def on_release(self, entry: Entry, backend: str) -> None:
        offer = self._offer
        if offer is None or offer[0] is not entry or offer[1].backend != backend:
            raise RuntimeError("on_release without a matching admits")
        self._offer = None
        self.choices[entry] = offer[1]
        self.capacity.on_release(entry, backend, self.now, entry.model)
