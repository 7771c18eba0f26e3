"""Release rates by scope (a tenant, a class, a tenant in a class, all), for Retry-After.

A 429 or a queue timeout tells the client when to come back: `(position + 1) / rate`, between
1 s and 10 minutes, where:
- `rate` is the measured releases per second of the scope the request waits on (its tenant's
  for a tenant limit, its class's for a full class queue), over the last 30 s: the releases
  counted by the second, in each second any of which is within the window, over the time from
  the first of them to now (30 to 31 s once the scope has released for that long). A scope
  with no release in the window has the rate of one release since its last one (a slot busy
  for 14 s reads as one release per 14 s); one never released waits one second per position.
- Counting by the second keeps at most 31 counts a scope, whatever the rate (a time kept for
  each release held 240,000 floats at 2,000 releases a second, issue 37 item 3).
- `position` is how many of that scope's requests go first.
"""

from __future__ import annotations

import collections
import math

from llmd.admission.classes import Priority

WINDOW_S = 30.0
MIN_WAIT_S = 1.0
MAX_WAIT_S = 600.0

# (tenant, class); None stands for any: (name, None) is a tenant in every class, (None, None)
# every release.
Scope = tuple[str | None, Priority | None]


class ReleaseRates:
    """Releases per scope over the last `WINDOW_S` seconds (caller's clock, seconds), counted
    by the second of the clock."""

    def __init__(self) -> None:
        self._scopes: dict[Scope, _Releases] = {}
        # The four scopes a release of (tenant, class) counts in, found once per pair: every
        # release records (built per release, the scope keys were most of its cost).
        self._counted_in: dict[tuple[str, Priority], tuple[_Releases, ...]] = {}

    def record(self, tenant: str, cls: Priority, now: float) -> None:
        """A request of `tenant` in class `cls` was released at `now`."""
        counted_in = self._counted_in.get((tenant, cls))
        if counted_in is None:
            scopes = ((tenant, cls), (tenant, None), (None, cls), (None, None))
            counted_in = tuple(self._scopes.setdefault(s, _Releases()) for s in scopes)
            self._counted_in[(tenant, cls)] = counted_in
        second = math.floor(now)
        for releases in counted_in:
            seconds = releases.seconds
            if seconds and seconds[-1].second == second:
                seconds[-1].count += 1
            else:
                seconds.append(_Second(second, now))
                _prune(seconds, now)
            releases.last = now

    def per_s(self, scope: Scope, now: float) -> float | None:
        """Releases per second of `scope` (see the module docstring), or None: never one."""
        releases = self._scopes.get(scope)
        if releases is None:
            return None
        seconds = releases.seconds
        if seconds:
            _prune(seconds, now)
            if seconds:
                return sum(s.count for s in seconds) / max(now - seconds[0].first, 1.0)
        return 1.0 / max(now - releases.last, 1.0)

    def wait_s(self, scope: Scope, position: int, now: float) -> float:
        """Seconds until `position` requests of `scope` ahead and then this one are released,
        between 1 s and 10 minutes."""
        rate = self.per_s(scope, now)
        estimate = (position + 1) / rate if rate else float(position + 1)
        return min(max(MIN_WAIT_S, estimate), MAX_WAIT_S)


class _Releases:
    """One scope's releases: counted by the second, oldest first (`seconds`), and when the
    last was released (`last`, s)."""

    __slots__ = ("last", "seconds")

    def __init__(self) -> None:
        self.seconds: collections.deque[_Second] = collections.deque()
        self.last = 0.0


class _Second:
    """The releases of one scope in one second of the clock: `second` (its start, s), `count`,
    `first` (when the first of them was released, s)."""

    __slots__ = ("count", "first", "second")

    def __init__(self, second: int, first: float) -> None:
        self.second = second
        self.count = 1
        self.first = first


def _prune(seconds: collections.deque[_Second], now: float) -> None:
    """Forget the seconds wholly before the window (the window is `now - WINDOW_S` to `now`)."""
    edge = now - WINDOW_S
    while seconds and seconds[0].second + 1 <= edge:
        seconds.popleft()
