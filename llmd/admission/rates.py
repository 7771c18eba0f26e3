"""Release rates by scope (a tenant, a class, a tenant in a class, all), for Retry-After.

A 429 or a queue timeout tells the client when to come back: `(position + 1) / rate`, between
1 s and 10 minutes, where:
- `rate` is the measured releases per second of the scope the request waits on (its tenant's
  for a tenant limit, its class's for a full class queue), over the last 30 s. A scope with no
  release in the window has the rate of one release since its last one (a slot busy for 14 s
  reads as one release per 14 s); one never released waits one second per position.
- `position` is how many of that scope's requests go first.
"""

from __future__ import annotations

import collections

from llmd.admission.classes import Priority

WINDOW_S = 30.0
MIN_WAIT_S = 1.0
MAX_WAIT_S = 600.0

# (tenant, class); None stands for any: (name, None) is a tenant in every class, (None, None)
# every release.
Scope = tuple[str | None, Priority | None]


class ReleaseRates:
    """Release times per scope over the last `WINDOW_S` seconds (caller's clock, seconds)."""

    def __init__(self) -> None:
        self._times: dict[Scope, collections.deque[float]] = {}
        self._last: dict[Scope, float] = {}

    def record(self, tenant: str, cls: Priority, now: float) -> None:
        """A request of `tenant` in class `cls` was released at `now`."""
        for scope in ((tenant, cls), (tenant, None), (None, cls), (None, None)):
            times = self._times.get(scope)
            if times is None:  # not setdefault: its new deque cost every release a build
                times = self._times[scope] = collections.deque()
            times.append(now)
            self._last[scope] = now
            _prune(times, now)

    def per_s(self, scope: Scope, now: float) -> float | None:
        """Releases per second of `scope` (see the module docstring), or None: never one."""
        times = self._times.get(scope)
        if times:
            _prune(times, now)
            if times:
                return len(times) / max(now - times[0], 1.0)
        last = self._last.get(scope)
        return None if last is None else 1.0 / max(now - last, 1.0)

    def wait_s(self, scope: Scope, position: int, now: float) -> float:
        """Seconds until `position` requests of `scope` ahead and then this one are released,
        between 1 s and 10 minutes."""
        rate = self.per_s(scope, now)
        estimate = (position + 1) / rate if rate else float(position + 1)
        return min(max(MIN_WAIT_S, estimate), MAX_WAIT_S)


def _prune(times: collections.deque[float], now: float) -> None:
    while times and times[0] < now - WINDOW_S:
        times.popleft()
