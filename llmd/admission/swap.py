"""The swap core: which engine of a swap group to wake, which to put to sleep, and which takes
no new request so that it drains. Pure (no asyncio, no I/O): the caller passes `now`
(monotonic seconds) and each engine's view; the daemon carries the actions out
(llmd/daemon/swapping.py).

Guarantees (tests/admission/test_swap.py pins each, property-tested):
- an engine with requests in flight is never put to sleep;
- a pinned engine is never evicted, nor one awake for less than `min_residence_s` unless it has
  been idle (nothing in flight or waiting) for its predicted wake time: keeping it longer costs
  the requests waiting for another model more than waking it again would (the ski-rental rule);
- at most `max_resident` engines are resident (awake, waking or falling asleep) at once; or,
  with `device_bytes` set (a group fit by memory), an engine is woken only when its awake
  footprint fits in `device_bytes` beside what the others hold (a resident one its awake
  footprint, an asleep one what it keeps asleep), or when no other engine is resident (so that
  a footprint guessed too large never leaves its requests waiting for good);
- no engine is evicted to make room while those already falling asleep will make enough, nor
  when evicting every engine that may go would not make enough beside the pinned ones;
- while requests wait for an asleep engine, the resident engine to evict still takes new
  requests for `max_wait_s` from when the first of them began waiting (A B A A C runs as
  A A A B C), then none (`closed`), so that it drains;
- the evicted engine is the one with the lowest cost, its predicted wake time x its recent
  demand (requests per minute), ties to the one awake longest;
- a wake no request waits for any more is cancelled; an engine is woken only for a request,
  and runs the requests it was woken for before it may be evicted.
"""

from __future__ import annotations

import bisect
import dataclasses
import enum
from collections.abc import Iterable, Mapping, Sequence

from llmd.supervisor.state import WakeTimes

__all__ = ["Demand", "EngineView", "GroupPolicy", "Plan", "Residency", "SwapGroup", "WakeTimes"]

# The window demand is counted over, seconds: an agent's turn alternates models within it.
DEMAND_WINDOW_S = 60.0


class Residency(enum.StrEnum):
    """Where an on-demand engine is, as the core sees it."""

    ASLEEP = "asleep"
    WAKING = "waking"
    AWAKE = "awake"
    FALLING_ASLEEP = "falling_asleep"  # still holds its memory


class SleepReason(enum.StrEnum):
    """Why an engine is put to sleep (the `reason` label of llmd_engine_evictions_total)."""

    EVICTED = "evicted"  # to make room for a model requests wait for
    IDLE = "idle"  # no request for its idle_sleep_s


@dataclasses.dataclass(frozen=True)
class GroupPolicy:
    """A swap group's settings (llmd/config/swap.py): seconds, and engines awake at once; or,
    when `device_bytes` > 0, no count: engines are awake while their footprints fit in
    `device_bytes` (the device's memory, bytes), and `max_resident` is ignored."""

    max_resident: int = 1
    min_residence_s: float = 20.0
    max_wait_s: float = 2.0
    device_bytes: int = 0

    def awake_size(self, view: EngineView) -> int:
        """What `view` takes of the group's room awake: one engine, or its footprint."""
        return view.awake_bytes if self.device_bytes else 1

    def asleep_size(self, view: EngineView) -> int:
        """What `view` takes of the group's room asleep: nothing, or what it keeps asleep."""
        return view.asleep_bytes if self.device_bytes else 0

    @property
    def room(self) -> int:
        """The group's room: engines (max_resident) or bytes (device_bytes)."""
        return self.device_bytes or self.max_resident


@dataclasses.dataclass(frozen=True)
class EngineView:
    """One engine of the group at `now`: where it is, llmd's requests in flight there and
    waiting in the queue for its model, since when it is awake (monotonic s; None: not
    awake), its last request's arrival, its idle_sleep_s (0: never idle-sleeps), its
    predicted wake time (s), its recent demand (requests per minute), and (for a group fit by
    memory) the device memory it holds awake and asleep, bytes."""

    name: str
    residency: Residency
    in_flight: int = 0
    waiting: int = 0
    pinned: bool = False
    awake_since: float | None = None
    last_request_at: float | None = None
    idle_sleep_s: float = 0.0
    wake_s: float = 1.0
    demand: float = 0.0
    awake_bytes: int = 0
    asleep_bytes: int = 0

    @property
    def resident(self) -> bool:
        return self.residency is not Residency.ASLEEP

    @property
    def cost(self) -> float:
        """What evicting it costs: its wake time x its demand (requests per minute)."""
        return self.wake_s * self.demand


@dataclasses.dataclass(frozen=True)
class Plan:
    """What to do now: engines to wake, to put to sleep (with why), wakes to cancel, the
    engines that take no new request (`closed`: draining for an eviction), and when to decide
    again at the latest (None: on the next change only)."""

    wake: tuple[str, ...] = ()
    sleep: tuple[tuple[str, SleepReason], ...] = ()
    cancel: tuple[str, ...] = ()
    closed: frozenset[str] = frozenset()
    next_at: float | None = None


class SwapGroup:
    """One group's decisions over time. Single-threaded; `decide` is called on every change
    (a request queued, released or finished, an engine's residency changed) and at
    `Plan.next_at`. It remembers only since when each asleep engine's requests wait."""

    def __init__(self, policy: GroupPolicy) -> None:
        self.policy = policy
        self._waiting_since: dict[str, float] = {}
        # The awake engines that have had requests in flight since they woke: one woken for
        # requests runs them before it may be evicted (else it could be put back to sleep
        # with the requests it was woken for still waiting).
        self._ran: set[str] = set()
        # Since when each awake engine has had nothing in flight or waiting (monotonic s).
        self._idle_since: dict[str, float] = {}

    def decide(self, engines: Sequence[EngineView], now: float) -> Plan:
        """The plan for `engines` (the whole group) at `now`."""
        policy = self.policy
        for view in engines:
            if view.waiting and not view.resident:
                self._waiting_since.setdefault(view.name, now)
            else:
                self._waiting_since.pop(view.name, None)
            if view.residency is not Residency.AWAKE:
                self._ran.discard(view.name)
            elif view.in_flight:
                self._ran.add(view.name)
            if view.residency is Residency.AWAKE and not view.in_flight and not view.waiting:
                self._idle_since.setdefault(view.name, now)
            else:
                self._idle_since.pop(view.name, None)
        wake: list[str] = []
        sleep: list[tuple[str, SleepReason]] = []
        cancel = [
            v.name
            for v in engines
            if v.residency is Residency.WAKING and not v.waiting and not v.in_flight
        ]
        times: list[float] = []
        for view in engines:  # idle sleep, whatever else waits
            if _idle(view, now, policy):
                sleep.append((view.name, SleepReason.IDLE))
            elif _may_idle(view) and view.last_request_at is not None:
                times.append(view.last_request_at + view.idle_sleep_s)
        # An engine put to sleep or whose wake is cancelled holds its memory until it is
        # asleep: the next pass after that wakes another in its place.
        used = sum(_held(policy, v) for v in engines)
        # What those already on their way to sleep will give back once asleep.
        leaving = {v.name for v in engines if v.residency is Residency.FALLING_ASLEEP}
        leaving |= {name for name, _ in sleep} | set(cancel)
        freed = sum(
            policy.awake_size(v) - policy.asleep_size(v) for v in engines if v.name in leaving
        )
        woken: set[str] = set()
        wanting = sorted(
            (v for v in engines if v.name in self._waiting_since),
            key=lambda v: (self._waiting_since[v.name], v.name),
        )
        closed: set[str] = set()
        for want in wanting:
            grow = policy.awake_size(want) - policy.asleep_size(want)
            alone = not any(v.resident or v.name in woken for v in engines if v is not want)
            if used + grow <= policy.room or alone:
                wake.append(want.name)
                woken.add(want.name)
                used += grow
                continue
            if used - freed + grow <= policy.room:
                break  # the room comes once those falling asleep are asleep
            if _pinned_in_the_way(policy, engines, want, used - freed + grow, leaving):
                break  # evicting all that may go would not make room beside the pinned
            since = self._waiting_since[want.name]
            busy = {name for name, _ in sleep} | set(cancel) | closed
            owed = {v.name for v in engines if v.waiting and v.name not in self._ran}
            others = [v for v in engines if v.name not in busy | owed]
            victim = _victim(others, now, policy, self._idle_since)
            if victim is None:
                times += _eligible_at(others, policy, self._idle_since)
                break  # the oldest waits first: the others wait behind it
            if now - since >= policy.max_wait_s:
                closed.add(victim.name)
            else:
                times.append(since + policy.max_wait_s)
            if not victim.in_flight and (not victim.waiting or victim.name in closed):
                sleep.append((victim.name, SleepReason.EVICTED))
                closed.discard(victim.name)
            break  # one eviction at a time: the next pass sees its effect
        future = [t for t in times if t > now]
        return Plan(
            wake=tuple(wake),
            sleep=tuple(sleep),
            cancel=tuple(cancel),
            closed=frozenset(closed),
            next_at=min(future) if future else None,
        )


def _pinned_in_the_way(
    policy: GroupPolicy,
    engines: Sequence[EngineView],
    want: EngineView,
    need: int,
    leaving: set[str],
) -> bool:
    """Whether `want`, needing `need` of the room, could not wake even with every unpinned
    resident engine asleep, because pinned ones stay resident."""
    others = [v for v in engines if v is not want and v.resident and v.name not in leaving]
    if not any(v.pinned for v in others):
        return False  # with the others evicted it would wake alone
    movable = sum(policy.awake_size(v) - policy.asleep_size(v) for v in others if not v.pinned)
    return need - movable > policy.room


def _held(policy: GroupPolicy, view: EngineView) -> int:
    """What `view` holds of the group's room now."""
    return policy.awake_size(view) if view.resident else policy.asleep_size(view)


def _may_idle(view: EngineView) -> bool:
    return view.residency is Residency.AWAKE and view.idle_sleep_s > 0 and not view.pinned


def _idle(view: EngineView, now: float, policy: GroupPolicy) -> bool:
    """Awake, with nothing in flight or waiting for its idle_sleep_s."""
    return (
        _may_idle(view)
        and not view.in_flight
        and not view.waiting
        and view.last_request_at is not None
        and now - view.last_request_at >= view.idle_sleep_s
    )


def _eligible_at_one(
    view: EngineView, policy: GroupPolicy, idle_since: Mapping[str, float]
) -> float | None:
    """When awake, unpinned `view` may be evicted: at the end of its minimum residence, or
    once idle for its predicted wake if that comes first (None: never, or not awake)."""
    if view.residency is not Residency.AWAKE or view.pinned or view.awake_since is None:
        return None
    at = view.awake_since + policy.min_residence_s
    idle = idle_since.get(view.name)
    return at if idle is None else min(at, idle + view.wake_s)


def _victim(
    engines: Iterable[EngineView],
    now: float,
    policy: GroupPolicy,
    idle_since: Mapping[str, float],
) -> EngineView | None:
    """The awake engine to evict: the lowest cost among those that may be, ties to the one
    awake longest (None: none may be yet)."""
    candidates = []
    for view in engines:
        at = _eligible_at_one(view, policy, idle_since)
        if at is not None and now >= at:
            candidates.append(view)
    if not candidates:
        return None
    return min(candidates, key=lambda v: (v.cost, v.awake_since, v.name))


def _eligible_at(
    engines: Iterable[EngineView], policy: GroupPolicy, idle_since: Mapping[str, float]
) -> list[float]:
    """When each awake, unpinned engine may be evicted (`_eligible_at_one`)."""
    times = (_eligible_at_one(v, policy, idle_since) for v in engines)
    return [t for t in times if t is not None]


class Demand:
    """Requests for an engine's model over the last DEMAND_WINDOW_S seconds."""

    def __init__(self) -> None:
        self._times: list[float] = []

    def record(self, now: float) -> None:
        """A request for the model arrived at `now` (times only go forward)."""
        self._times.append(now)

    def per_minute(self, now: float) -> float:
        """Requests per minute over the window ending at `now`."""
        del self._times[: bisect.bisect_left(self._times, now - DEMAND_WINDOW_S)]
        return len(self._times) * 60.0 / DEMAND_WINDOW_S


def has_room(policy: GroupPolicy, engines: Sequence[EngineView], name: str) -> bool:
    """Whether asleep engine `name` of `engines` (its group) may wake now as `SwapGroup.decide`
    would let it: it fits in the group's room beside what the others hold, or none of them is
    resident."""
    want = next(v for v in engines if v.name == name)
    used = sum(_held(policy, v) for v in engines)
    grow = policy.awake_size(want) - policy.asleep_size(want)
    alone = not any(v.resident for v in engines if v.name != name)
    return used + grow <= policy.room or alone
