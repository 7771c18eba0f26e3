"""One upstream's circuit breaker: closed, open for a growing cooldown, half-open for one probe.
Pure, with the clock passed in (`now`, monotonic seconds).

    CLOSED --(failures in a row >= consecutive_failures,
              or failure ratio >= failure_ratio over >= min_calls in window_s)--> OPEN
    OPEN --(cooldown passed)--> HALF_OPEN      (cooldown_s x 2^(opens-1), capped at cooldown_max_s)
    HALF_OPEN: one probe at a time (another after probe_timeout_s if the first never reports)
    HALF_OPEN --probe succeeds--> CLOSED (the cooldown starts again from cooldown_s)
    HALF_OPEN --probe fails--> OPEN (with the next, longer cooldown)
    any --trip (a stall)--> OPEN (with the next cooldown)

- A failure is the caller's word: a refused or lost connection, a timeout, a 5xx before the first
  byte, a failed health probe. A 4xx is the request's fault, not the upstream's.
- Outcomes reported while the breaker is open belong to requests sent before it opened and are
  ignored.

Modelled on Hystrix's breaker (Netflix, `HystrixCircuitBreaker`: open on an error ratio over a
rolling window once a minimum volume was seen, then one trial request after a sleep window) and
Envoy's outlier detection (eject after `consecutive_5xx` = 5 failures in a row; each new
ejection lasts longer, up to a maximum).
"""

from __future__ import annotations

import collections
import dataclasses
import enum


class BreakerState(enum.StrEnum):
    """Where a breaker is: CLOSED passes everything, OPEN nothing, HALF_OPEN one probe."""

    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


@dataclasses.dataclass(frozen=True)
class BreakerPolicy:
    """When a breaker opens and for how long (counts, a ratio 0..1, seconds). Defaults: Envoy's
    consecutive_5xx (5); Hystrix's error threshold (50 %) and request volume (20), over 30 s
    rather than Hystrix's 10 s so that an upstream with little traffic can reach the volume;
    Hystrix's 5 s sleep window as the first cooldown, doubling on each re-open up to 60 s."""

    consecutive_failures: int = 5
    failure_ratio: float = 0.5
    min_calls: int = 20
    window_s: float = 30.0
    cooldown_s: float = 5.0
    cooldown_max_s: float = 60.0
    probe_timeout_s: float = 30.0


class CircuitBreaker:
    """One upstream's breaker. Single-threaded; every method takes the current time."""

    def __init__(self, policy: BreakerPolicy | None = None) -> None:
        self.policy = policy or BreakerPolicy()
        self._state = BreakerState.CLOSED
        self._in_a_row = 0
        self._window: collections.deque[tuple[float, bool]] = collections.deque()
        self._opens = 0  # opens since the last close: sets the cooldown
        self._open_until = 0.0
        self._probe_since: float | None = None

    def state(self, now: float) -> BreakerState:
        """The state at `now` (an OPEN breaker whose cooldown has passed is HALF_OPEN)."""
        if self._state is BreakerState.OPEN and now >= self._open_until:
            self._state = BreakerState.HALF_OPEN
            self._probe_since = None
        return self._state

    def available(self, now: float) -> bool:
        """Whether a request may be sent now: closed, or half-open with no probe out (or one
        out for longer than `probe_timeout_s`). Does not take the probe: see `on_attempt`."""
        state = self.state(now)
        if state is BreakerState.CLOSED:
            return True
        if state is BreakerState.OPEN:
            return False
        probe = self._probe_since
        return probe is None or now - probe >= self.policy.probe_timeout_s

    def on_attempt(self, now: float) -> None:
        """A request is being sent: in HALF_OPEN it is the probe, and no other goes until it
        reports (or times out)."""
        if self.state(now) is BreakerState.HALF_OPEN:
            self._probe_since = now

    def record_success(self, now: float) -> None:
        """A request or health probe succeeded: half-open closes; closed counts it."""
        state = self.state(now)
        if state is BreakerState.OPEN:
            return
        if state is BreakerState.HALF_OPEN:
            self._close()
            return
        self._in_a_row = 0
        self._count(now, failed=False)

    def record_failure(self, now: float) -> None:
        """A request or health probe failed: half-open re-opens (longer); closed may open."""
        state = self.state(now)
        if state is BreakerState.OPEN:
            return
        if state is BreakerState.HALF_OPEN:
            self._open(now)
            return
        self._in_a_row += 1
        self._count(now, failed=True)
        policy = self.policy
        calls = len(self._window)
        failures = sum(1 for _, failed in self._window if failed)
        if self._in_a_row >= policy.consecutive_failures or (
            calls >= policy.min_calls and failures >= policy.failure_ratio * calls
        ):
            self._open(now)

    def trip(self, now: float) -> None:
        """Open now, whatever the state (the upstream stalled: llmd/supervisor/stall.py), for
        the next cooldown."""
        self._open(now)

    def retry_after_s(self, now: float) -> float:
        """Seconds until a request may pass: the rest of the cooldown when open, up to the
        probe timeout while a half-open probe is out, 0 when available."""
        if self.available(now):
            return 0.0
        if self._state is BreakerState.OPEN:
            return self._open_until - now
        assert self._probe_since is not None
        return self._probe_since + self.policy.probe_timeout_s - now

    def _count(self, now: float, *, failed: bool) -> None:
        window = self._window
        window.append((now, failed))
        while window and window[0][0] <= now - self.policy.window_s:
            window.popleft()

    def _open(self, now: float) -> None:
        policy = self.policy
        self._opens += 1
        cooldown = min(policy.cooldown_max_s, policy.cooldown_s * 2 ** min(self._opens - 1, 16))
        self._state = BreakerState.OPEN
        self._open_until = now + cooldown
        self._probe_since = None
        self._in_a_row = 0
        self._window.clear()

    def _close(self) -> None:
        self._state = BreakerState.CLOSED
        self._opens = 0
        self._probe_since = None
        self._in_a_row = 0
        self._window.clear()
