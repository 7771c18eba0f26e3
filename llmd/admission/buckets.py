"""A token bucket: a budget of tokens that refills at a steady rate, spent by reservations
that are settled when the request ends. Pure: every call takes `now` (seconds on any clock
that does not go back; llmd uses Unix time, so a bucket's state saved to the state directory
means the same after a restart).

A `take` reserves tokens; `settle` spends what the request used of them and gives the rest
back, `refund` gives them all back. Reserved tokens are out of the bucket and, until settled,
keep their room in it (the level refills to `capacity - reserved`), so a reservation given back
restores the bucket exactly.

Guarantees (property-tested in tests/admission/test_buckets.py):
- **Never past the budget**: the tokens requests are settled for (their use, at most what they
  reserved) over any window of `w` seconds sum to at most `capacity + rate x w`; a take never
  reserves more than the bucket holds.
- **Refunds are exact**: a reservation refunded leaves the bucket where a twin that never saw
  it stands; settled, `used` below that twin.
- **The refill rate holds**: an empty bucket with nothing reserved has `min(capacity, rate x
  t)` after `t` seconds; a take of `n` fails before `wait_s(n)` and succeeds from then on.
"""

from __future__ import annotations

import dataclasses
import math

# Float slack when a take comes exactly at `wait_s`: (n - level) / rate x rate is not always n.
EPSILON = 1e-6


@dataclasses.dataclass
class TokenBucket:
    """`capacity` tokens, refilled at `rate` tokens/s; `level` the tokens there at time `at`
    (s), `reserved` those taken and not yet settled. A new bucket is full."""

    capacity: float
    rate: float
    level: float = math.nan  # nan: full (set in __post_init__)
    at: float = 0.0
    reserved: float = 0.0

    def __post_init__(self) -> None:
        if math.isnan(self.level):
            self.level = self.capacity

    def level_at(self, now: float) -> float:
        """The tokens there at `now` (a `now` before `at` counts as `at`)."""
        room = self.capacity - self.reserved
        return min(room, self.level + max(0.0, now - self.at) * self.rate)

    def _advance(self, now: float) -> None:
        self.level, self.at = self.level_at(now), max(now, self.at)

    def fits(self, tokens: float, now: float) -> bool:
        """Whether `take(tokens, now)` would succeed."""
        return tokens <= self.level_at(now) + EPSILON

    def take(self, tokens: float, now: float) -> bool:
        """Reserve `tokens` if they are there at `now` (True), else nothing (False)."""
        if not self.fits(tokens, now):
            return False
        self._advance(now)
        self.level -= tokens
        self.reserved += tokens
        return True

    def refund(self, reserved: float, now: float) -> None:
        """Give back all of a reservation of `reserved` tokens (its request never ran)."""
        self.settle(reserved, 0.0, now)

    def settle(self, reserved: float, used: float, now: float) -> None:
        """A request that reserved `reserved` tokens ended having used `used`: the rest comes
        back; what it used past its reservation is taken too (the level may then fall below
        0, and later takes wait for the refill)."""
        self._advance(now)
        self.reserved = max(0.0, self.reserved - reserved)
        self.level += reserved - used

    def wait_s(self, tokens: float, now: float) -> float:
        """Seconds from `now` until the refill brings `tokens` (0: there now; inf: more than
        `capacity`). With reservations out it is a lower bound: they come back when settled."""
        if tokens > self.capacity + EPSILON:
            return math.inf
        missing = tokens - self.level_at(now)
        return max(0.0, missing / self.rate) if self.rate > 0 else math.inf

    def reset_s(self, now: float) -> float:
        """Seconds from `now` until the bucket is full again, counting what is reserved as
        spent (OpenAI's `x-ratelimit-reset-*`: the time until the limit resets to its
        initial state)."""
        missing = self.capacity - self.level_at(now)
        return max(0.0, missing / self.rate) if self.rate > 0 else math.inf

    def resize(self, capacity: float, rate: float, now: float) -> None:
        """New limits (a reload): the level so far is kept, never past the new capacity."""
        self._advance(now)
        self.capacity, self.rate = capacity, rate
        self.level = min(self.level, capacity - self.reserved)
