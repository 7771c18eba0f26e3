"""The scheduler core: queues per class and tenant, and which request goes to a backend next.
Pure (no asyncio, no I/O): given the clock (`now`, seconds) and a capacity `Gate`, it decides
which entries to release (to the backend the gate chose) and which to reject (reason, Retry-After).

The rules, one layer over every pool (clocks kept per class and pool):
- **Pools**: an entry belongs to the pool of its model (`Entry.model`: every backend serving
  that name; one pool when llmd serves one model). The gate answers for that pool, so a request
  waits in llmd only for capacity on its own pool.
- **Between classes**: interactive before normal before batch, with aging by class and pool: a
  lower class overdue on a pool gets that pool's next release (`_overdue`).
- **A pick the gate refuses** (its seats or KV do not fit yet on any backend of its pool, the
  pool is busy or down) keeps its place and blocks its pool, for the rest of the pass, for its
  class and those below; the classes above and the other pools go on (`decide`). A class past
  its hold time on a pool (2 x its aging_s; the top class, which does not age: 2 x the shortest)
  is *held* there: its pick goes first, and while the gate refuses it nothing more is released
  on that pool (`_held`).
- **Within a class, between tenants**: deficit round-robin over token cost (`_pick_drr`); within
  a tenant and class, first in, first out among the entries whose pool is not blocked.
- **Limits**: a tenant at `max_concurrency` is skipped (its entries wait), and so is a tenant
  on a pool where its next entry would take it over its share of the pool's KV cache
  (llmd/admission/shares.py: it then holds at least one request there); a tenant with
  `max_queued` entries waiting, or a class with `queue_size` entries, rejects new ones (429); an
  entry past its class's `queue_timeout_s` (plus its `grace_s`) or its own deadline is rejected
  (503).

Guarantees, under continuous load on a pool:
- the pool's queue waits behind a held pick for at most one drain of a backend, and only after
  the others have passed it for its hold time minus its aging_s;
- the head of a class's queue for a pool waits at most aging_s plus one release opportunity of
  the pool when its pick fits as it comes and the pool's opportunities come more often than
  every aging_s (else a class above it, passed at one, may be held at the next and take it
  first);
- and in any case at most its hold time plus one drain per class held before it on that pool
  (its own included, at most three; batch defaults: 30 s plus the longest requests running on a
  backend of the pool);
- a request with k requests of its class and pool released before it waits at most k + 1 times
  that.

A *release opportunity* is the gate admitting a pick on a backend of the pool. *One drain*: a
backend with nothing in flight admits anything (and validation refuses a request that could not
fit a backend of its pool alone), so a held pick goes at the latest once the requests in flight
on one backend of its pool when it was first refused have ended.
"""

from __future__ import annotations

import collections
import dataclasses
import heapq
import itertools
import math
from collections.abc import Iterable, Iterator, Mapping, Set

from llmd.admission.classes import CLASSES, Priority
from llmd.admission.entries import ClassPolicy, Decisions, Entry, Gate, Reason, Rejection, State
from llmd.admission.rates import ReleaseRates, Scope
from llmd.admission.shares import KvShares
from llmd.admission.tenants import Tenant

# Deficit added to a tenant of weight 1 per round: about one large request. Larger quanta make
# rounds coarser; smaller ones only cost more loop turns (fast-forwarded, see _pick_drr).
QUANTUM_TOKENS = 4096

# What a pass starts from, and the classes a refused pick blocks (its own and those below),
# built once: a pass took 3-4 µs to build them again.
_NOTHING_BLOCKED: Mapping[Priority, Set[str]] = {cls: frozenset() for cls in CLASSES}
_AND_BELOW = {cls: tuple(c for c in CLASSES if c >= cls) for cls in CLASSES}


def _hold_times(policies: Mapping[Priority, ClassPolicy]) -> dict[Priority, float]:
    """Each class's hold time (seconds): 2 x its aging_s, or 2 x the shortest aging_s of any
    class for one that does not age (inf when none ages). See `Scheduler._held`."""
    shortest = min((p.aging_s for p in policies.values() if p.aging_s), default=math.inf)
    return {cls: 2 * (policies[cls].aging_s or shortest) for cls in Priority}


@dataclasses.dataclass
class _ClassQueue:
    """One class: a FIFO per tenant, the DRR ring of tenants with entries, and per pool its
    entries' count and aging clock (its last release there, or when its queue for that pool
    last became non-empty)."""

    policy: ClassPolicy
    queues: dict[str, collections.deque[Entry]] = dataclasses.field(default_factory=dict)
    ring: collections.deque[str] = dataclasses.field(default_factory=collections.deque)
    deficit: dict[str, float] = dataclasses.field(default_factory=dict)
    credited: bool = False  # ring[0] got its quantum for this visit
    size: int = 0
    pools: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    waiting_since: dict[str, float] = dataclasses.field(default_factory=dict)
    # Per tenant, its queued entries by pool: whether it has work a pass may release.
    tenant_pools: dict[str, collections.Counter[str]] = dataclasses.field(default_factory=dict)


class Scheduler:
    """Queues and the release order. Single-threaded; every method takes the current time."""

    def __init__(self, policies: Mapping[Priority, ClassPolicy]) -> None:
        self.classes = {cls: _ClassQueue(policies[cls]) for cls in Priority}
        self._hold_s = _hold_times(policies)
        self.in_flight: collections.Counter[str] = collections.Counter()
        self.queued_by_tenant: collections.Counter[str] = collections.Counter()
        self._size = 0  # entries queued, over every class
        self.shares = KvShares()  # what each tenant's running requests hold of each pool's KV
        self.rates = ReleaseRates()
        self._expiry: list[tuple[float, int, Entry]] = []
        self._seq = itertools.count(1)

    def set_policies(self, policies: Mapping[Priority, ClassPolicy]) -> None:
        """New class policies (a reload). They apply to what is decided from now on: a
        smaller queue_size refuses new entries, entries already queued stay; a new
        queue_timeout_s applies to entries queued from now (each keeps the expiry it got)."""
        for cls in Priority:
            self.classes[cls].policy = policies[cls]
        self._hold_s = _hold_times(policies)

    # -- entries in and out ----------------------------------------------------------------

    def submit(self, entry: Entry, now: float) -> Rejection | None:
        """Queue `entry` (its `enqueued_at` becomes `now`), or reject it at once (429)."""
        queue = self.classes[entry.cls]
        tenant = entry.tenant
        entry.enqueued_at = now
        entry.seq = next(self._seq)
        if tenant.max_queued and self.queued_by_tenant[tenant.name] >= tenant.max_queued:
            position = self.queued_by_tenant[tenant.name]
            return self._reject(entry, Reason.RATE_LIMITED, (tenant.name, None), position, now)
        if queue.size >= queue.policy.queue_size:
            position = self._ahead(entry.cls)
            return self._reject(entry, Reason.QUEUE_FULL, (None, entry.cls), position, now)
        fifo = queue.queues.get(tenant.name)
        if fifo is None:
            fifo = queue.queues[tenant.name] = collections.deque()
            queue.tenant_pools[tenant.name] = collections.Counter()
        if not fifo:
            queue.ring.append(tenant.name)
            queue.deficit[tenant.name] = 0.0
        fifo.append(entry)
        if not queue.pools[entry.model]:
            queue.waiting_since[entry.model] = now
        queue.pools[entry.model] += 1
        queue.tenant_pools[tenant.name][entry.model] += 1
        queue.size += 1
        self._size += 1
        self.queued_by_tenant[tenant.name] += 1
        expires = now + queue.policy.queue_timeout_s + entry.grace_s
        if entry.deadline is not None:
            expires = min(expires, entry.deadline)
        heapq.heappush(self._expiry, (expires, entry.seq, entry))
        return None

    def cancel(self, entry: Entry) -> bool:
        """Remove a queued `entry` (its client left); False if it was not queued any more."""
        if entry.state is not State.QUEUED:
            return False
        self._remove(entry)
        entry.state = State.CANCELLED
        return True

    def finish(self, entry: Entry) -> None:
        """A released `entry` has ended: its tenant's concurrency slot is free again."""
        if entry.state is State.RELEASED:
            entry.state = State.FINISHED
            self.in_flight[entry.tenant.name] -= 1
            self.shares.give(entry)

    # -- decisions -------------------------------------------------------------------------

    def decide(self, now: float, gate: Gate) -> Decisions:
        """Reject what expired, then release in order what `gate` admits. A refused pick blocks
        its pool, for the rest of this pass, for its class and those below (the classes above,
        and the other pools, pass it); a refused held pick blocks its pool for every class
        (module docstring). So one refused pick never stalls the classes above it, nor another
        pool. The pass ends as soon as nothing is queued (at a request's finish, or once the
        one entry waiting was released, it looks for no pick)."""
        # Each list given: the fields' default factories cost a call each, every pass.
        decisions = Decisions(released=[], rejected=self._expire(now), refused=[], held=[])
        blocked: dict[Priority, set[str]] = {}  # filled at the first refused pick
        while self._size:
            picked = self._next(now, blocked or _NOTHING_BLOCKED)
            if picked is None:
                break
            entry, overdue, held = picked
            backend = gate.admits(entry, overdue)
            if backend is None:
                decisions.refused.append(entry)
                if held:
                    decisions.held.append(entry)
                if not blocked:
                    blocked.update((cls, set()) for cls in CLASSES)
                for cls in CLASSES if held else _AND_BELOW[entry.cls]:
                    blocked[cls].add(entry.model)
                continue
            self._charge(entry)
            self._remove(entry)
            entry.state = State.RELEASED
            entry.released_at = now
            entry.backend = backend
            self.classes[entry.cls].waiting_since[entry.model] = now
            self.in_flight[entry.tenant.name] += 1
            self.shares.take(entry)
            self.rates.record(entry.tenant.name, entry.cls, now)
            gate.on_release(entry, backend)
            decisions.released.append(entry)
        return decisions

    def next_expiry(self) -> float | None:
        """When the next queued entry times out (caller's clock), or None."""
        while self._expiry and self._expiry[0][2].state is not State.QUEUED:
            heapq.heappop(self._expiry)
        return self._expiry[0][0] if self._expiry else None

    def queued(self, cls: Priority | None = None) -> int:
        """Entries waiting (in class `cls`, or in all)."""
        if cls is not None:
            return self.classes[cls].size
        return self._size

    def oldest(self, cls: Priority) -> float | None:
        """When the longest-waiting entry of class `cls` was queued (caller's clock), or None."""
        return min((f[0].enqueued_at for f in self.classes[cls].queues.values() if f), default=None)

    def queued_pools(self, cls: Priority) -> list[str]:
        """The pools where class `cls` has entries waiting."""
        return [pool for pool, count in self.classes[cls].pools.items() if count]

    def oldest_in(self, cls: Priority, pool: str) -> float | None:
        """When the longest-waiting entry of class `cls` for `pool` was queued (caller's
        clock), or None: each tenant's first entry of the pool, its FIFO walked to it."""
        queue = self.classes[cls]
        return min(
            (
                next(entry.enqueued_at for entry in fifo if entry.model == pool)
                for name, fifo in queue.queues.items()
                if queue.tenant_pools[name][pool]
            ),
            default=None,
        )

    def entries(self) -> Iterator[Entry]:
        """Every queued entry (any order)."""
        for queue in self.classes.values():
            for fifo in queue.queues.values():
                yield from fifo

    # -- internals -------------------------------------------------------------------------

    def _expire(self, now: float) -> list[Rejection]:
        rejected = []
        while self._expiry and self._expiry[0][0] <= now:
            _, _, entry = heapq.heappop(self._expiry)
            if entry.state is not State.QUEUED:
                continue
            scope = (entry.tenant.name, entry.cls)
            position = len(self.classes[entry.cls].queues[entry.tenant.name]) - 1
            self._remove(entry)
            by_deadline = entry.deadline is not None and entry.deadline <= now
            reason = Reason.DEADLINE if by_deadline else Reason.QUEUE_TIMEOUT
            rejected.append(self._reject(entry, reason, scope, position, now))
        return rejected

    def _reject(
        self, entry: Entry, reason: Reason, scope: Scope, position: int, now: float
    ) -> Rejection:
        """`entry` refused; Retry-After from `scope`'s release rate with `position` ahead."""
        entry.state = State.REJECTED
        return Rejection(entry, reason, self.rates.wait_s(scope, position, now))

    def _ahead(self, cls: Priority) -> int:
        """Entries served before a new one of class `cls`: its class and every higher one."""
        return sum(self.classes[c].size for c in CLASSES if c <= cls)

    def _eligible(
        self, tenant_name: str, queue: _ClassQueue, blocked: Set[str], only: str | None = None
    ) -> bool:
        """Whether the tenant is under its concurrency limit and has an entry in a pool not
        `blocked` (and in pool `only`, when given) where its KV share lets it start."""
        fifo = queue.queues[tenant_name]
        tenant = fifo[0].tenant
        if tenant.max_concurrency and self.in_flight[tenant_name] >= tenant.max_concurrency:
            return False
        pools = queue.tenant_pools[tenant_name]
        if only is not None:
            return (
                bool(pools[only]) and only not in blocked and self._within_share(tenant, fifo, only)
            )
        for pool, count in pools.items():  # a loop, not any(): every decision calls this
            if count and pool not in blocked and self._within_share(tenant, fifo, pool):
                return True
        return False

    def _within_share(self, tenant: Tenant, fifo: Iterable[Entry], pool: str) -> bool:
        """Whether the tenant's first entry for `pool` fits its KV share there
        (llmd/admission/shares.py)."""
        if not (tenant.max_kv_tokens or tenant.max_kv_share):
            return True
        head = next(entry for entry in fifo if entry.model == pool)
        return self.shares.fits(tenant, pool, head.cost)

    def _next(
        self, now: float, blocked: Mapping[Priority, Set[str]]
    ) -> tuple[Entry, bool, bool] | None:
        """The entry to release next, whether it goes as overdue (aging), and whether its class
        is held on its pool (see the module docstring); `blocked` names, per class, the pools
        not considered. A held (class, pool) goes first, then an overdue one, then the top
        class's DRR pick among its pools not blocked. Of several held (or overdue), the one
        longest without a release goes, the first in class and pool order on a tie. One walk
        over the ready (class, pool) pairs finds all three (it runs several times a decision)."""
        top: Priority | None = None
        held: tuple[Priority, str] | None = None
        held_since = math.inf
        aged: tuple[Priority, str] | None = None
        aged_since = math.inf
        for cls in CLASSES:
            queue = self.classes[cls]
            if not queue.size:  # an empty class has no ready pool
                continue
            for pool in self._ready_pools(queue, blocked[cls]):
                since = queue.waiting_since[pool]
                if since < held_since and self._held(cls, pool, now):
                    held, held_since = (cls, pool), since
                if top is None:
                    top = cls
                elif cls > top and since < aged_since and self._overdue(cls, pool, now):
                    aged, aged_since = (cls, pool), since
        if top is None:
            return None
        if held is not None:
            cls, pool = held
            return self._pick_drr(self.classes[cls], blocked[cls], pool), True, True
        if aged is not None:
            cls, pool = aged
            return self._pick_drr(self.classes[cls], blocked[cls], pool), True, False
        return self._pick_drr(self.classes[top], blocked[top]), False, False

    def _ready_pools(self, queue: _ClassQueue, blocked: Set[str]) -> list[str]:
        """The pools, not `blocked`, where the class of `queue` has an entry of an eligible
        tenant."""
        ready = []
        for pool, count in queue.pools.items():
            if count and pool not in blocked:
                for name in queue.ring:
                    if self._eligible(name, queue, blocked, pool):
                        ready.append(pool)
                        break
        return ready

    def _overdue(self, cls: Priority, pool: str, now: float) -> bool:
        """Whether class `cls` has gone its aging_s without a release on `pool` (never, with
        none).

        Aging: a lower class that has had work waiting for a pool and no release there for its
        `aging_s` (since its last release on that pool, or since its queue for that pool last
        became non-empty) is overdue on that pool: it gets that pool's next release (its DRR
        pick among its entries for the pool), which restarts the clock. That gives a starved
        class a minimum rate per pool (one release per aging_s), not a share: a batch flood's
        own backlog does not make it overdue while it is being served, so interactive work
        keeps the rest. Releases on other pools do not reset a pool's clock, so a class served
        on one pool is not starved on another.
        """
        queue = self.classes[cls]
        aging = queue.policy.aging_s
        return bool(aging) and now - queue.waiting_since[pool] >= aging

    def _held(self, cls: Priority, pool: str, now: float) -> bool:
        """Whether class `cls` has gone its hold time without a release on `pool`: 2 x its
        aging_s, or 2 x the shortest aging_s for a class that does not age (the top one).

        Holding bounds the passing of a refused pick, so it does not starve in turn: a held
        class's pick for the pool goes first, ahead of overdue and higher classes, and if the
        gate refuses it nothing more is released on that pool until it is (other pools go on).
        """
        return now - self.classes[cls].waiting_since[pool] >= self._hold_s[cls]

    def _head(
        self, tenant_name: str, queue: _ClassQueue, blocked: Set[str], only: str | None
    ) -> Entry:
        """The tenant's first entry in a pool not `blocked` (in pool `only`, when given) whose
        KV share lets it start; the tenant must be eligible for them."""
        fifo = queue.queues[tenant_name]
        tenant = fifo[0].tenant
        limited = bool(tenant.max_kv_tokens or tenant.max_kv_share)
        over: set[str] = set()  # pools whose first entry is over the tenant's share
        for entry in fifo:
            pool = entry.model
            if pool in blocked or pool in over or (only is not None and pool != only):
                continue
            if not limited or self.shares.fits(tenant, pool, entry.cost):
                return entry
            over.add(pool)
        raise AssertionError("the tenant has no entry it may start")

    def _pick_drr(self, queue: _ClassQueue, blocked: Set[str], only: str | None = None) -> Entry:
        """Deficit round-robin over the class's tenants: the head the ring now points at
        (among the entries of pools not `blocked`, of pool `only` when given).

        DRR (Shreedhar & Varghese, SIGCOMM 1995) over token cost (KV tokens,
        llmd/admission/cost.py), each tenant's quantum scaled by its weight, so backlogged
        tenants get tokens in proportion to their weights, within one maximum request cost.

        Leaves the ring where it is, so a pick the gate refuses is picked again next time.
        The class must have an eligible tenant.
        """
        ring = queue.ring
        turns = 0
        while True:
            name = ring[0]
            if self._eligible(name, queue, blocked, only):
                head = self._head(name, queue, blocked, only)
                if not queue.credited:
                    queue.deficit[name] += QUANTUM_TOKENS * head.tenant.weight
                    queue.credited = True
                if queue.deficit[name] >= head.cost:
                    return head
            ring.rotate(-1)
            queue.credited = False
            turns += 1
            if turns % len(ring) == 0:
                self._fast_forward(queue, blocked, only)

    def _fast_forward(self, queue: _ClassQueue, blocked: Set[str], only: str | None) -> None:
        """After a whole round with no pick, add the rounds that would pass with none at once."""
        rounds = math.inf
        eligible = [name for name in queue.ring if self._eligible(name, queue, blocked, only)]
        for name in eligible:
            head = self._head(name, queue, blocked, only)
            need = head.cost - queue.deficit[name]
            rounds = min(rounds, math.ceil(need / (QUANTUM_TOKENS * head.tenant.weight)))
        if rounds is math.inf:
            raise AssertionError("no eligible tenant in the DRR ring")
        for name in eligible:
            if rounds > 1:
                weight = queue.queues[name][0].tenant.weight
                queue.deficit[name] += (rounds - 1) * QUANTUM_TOKENS * weight

    def _charge(self, entry: Entry) -> None:
        """Take a released entry's cost from its tenant's deficit (every release, overdue ones
        too, so aging does not let a tenant exceed its share in the long run)."""
        queue = self.classes[entry.cls]
        name = entry.tenant.name
        if name in queue.deficit:
            queue.deficit[name] -= entry.cost

    def _remove(self, entry: Entry) -> None:
        """Take a queued entry out of its FIFO; drop the tenant from the ring when empty."""
        queue = self.classes[entry.cls]
        name = entry.tenant.name
        fifo = queue.queues[name]
        fifo.remove(entry)
        queue.size -= 1
        self._size -= 1
        queue.pools[entry.model] -= 1
        queue.tenant_pools[name][entry.model] -= 1
        self.queued_by_tenant[name] -= 1
        if fifo:
            return
        del queue.queues[name]
        del queue.tenant_pools[name]
        if queue.ring and queue.ring[0] == name:
            queue.credited = False
        queue.ring.remove(name)
        queue.deficit.pop(name, None)
