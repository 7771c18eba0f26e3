"""Each tenant's token budgets: up to three token buckets (llmd/admission/buckets.py) from its
`input_tokens_per_minute`, `output_tokens_per_minute` and `tokens_per_day`. Pure: every call
takes `now` (Unix time, s).

A request is charged as it reaches admission: its exact prompt tokens (validation's count) to
the input budget, its `max_tokens` over every sequence to the output budget, both to the day's;
all or nothing, reserved until it ends. It is refunded whole if it never reaches a backend
(rejected or cancelled in the queue), and settled when it ends: the output it did not use
comes back (`settle`). A
request that needs more than a budget's whole size is `never` admitted (a 400, not a 429).
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Iterable

from llmd.admission.buckets import TokenBucket
from llmd.admission.tenants import Tenant
from llmd.usage.records import BucketState


class Budget(enum.StrEnum):
    """A budget: its value is the tenants file's key that sets it."""

    INPUT = "input_tokens_per_minute"
    OUTPUT = "output_tokens_per_minute"
    DAY = "tokens_per_day"

    @property
    def period_s(self) -> float:
        """The seconds its whole size refills over."""
        return 86_400.0 if self is Budget.DAY else 60.0


@dataclasses.dataclass(frozen=True)
class Charge:
    """What a request of `tenant` took: `input_tokens` and `output_tokens` (the day's budget
    took both). Zero for a tenant without budgets."""

    tenant: str
    input_tokens: int = 0
    output_tokens: int = 0


@dataclasses.dataclass(frozen=True)
class Refusal:
    """A request refused by `budget` of size `limit`: it needs `needed` tokens there, `left`
    are there now, and they will be in `wait_s` (inf: `never`, it needs more than `limit`)."""

    budget: Budget
    limit: int
    needed: int
    left: int
    wait_s: float

    @property
    def never(self) -> bool:
        return math.isinf(self.wait_s)


@dataclasses.dataclass(frozen=True)
class Standing:
    """Where a tenant stands in one budget: its size (`limit`), the tokens `remaining` (whole,
    never below 0) and the seconds until it is full again (`reset_s`)."""

    budget: Budget
    limit: int
    remaining: int
    reset_s: float


def _limits(tenant: Tenant) -> dict[Budget, int]:
    """The budgets `tenant` has, by size."""
    sizes = {
        Budget.INPUT: tenant.input_tokens_per_minute,
        Budget.OUTPUT: tenant.output_tokens_per_minute,
        Budget.DAY: tenant.tokens_per_day,
    }
    return {budget: size for budget, size in sizes.items() if size}


def _amounts(charge: Charge) -> dict[Budget, int]:
    """What `charge` takes from each budget."""
    total = charge.input_tokens + charge.output_tokens
    return {
        Budget.INPUT: charge.input_tokens,
        Budget.OUTPUT: charge.output_tokens,
        Budget.DAY: total,
    }


class Budgets:
    """Every tenant's buckets by name (tenants without budgets have none)."""

    def __init__(self) -> None:
        self._buckets: dict[str, dict[Budget, TokenBucket]] = {}

    def configure(self, tenants: Iterable[Tenant], now: float) -> None:
        """Take the tenants' budgets (start-up, each reload): a budget kept keeps its level
        (never past its new size), a new one starts full, one removed goes."""
        buckets: dict[str, dict[Budget, TokenBucket]] = {}
        for tenant in tenants:
            kept = self._buckets.get(tenant.name, {})
            mine: dict[Budget, TokenBucket] = {}
            for budget, size in _limits(tenant).items():
                bucket = kept.get(budget)
                rate = size / budget.period_s
                if bucket is None:
                    bucket = TokenBucket(size, rate, at=now)
                else:
                    bucket.resize(size, rate, now)
                mine[budget] = bucket
            if mine:
                buckets[tenant.name] = mine
        self._buckets = buckets

    def charge(
        self, tenant: str, input_tokens: int, output_tokens: int, now: float
    ) -> Charge | Refusal:
        """Take a request's tokens from every budget of `tenant`, or none (the Refusal of the
        budget it waits longest for)."""
        charge = Charge(tenant, input_tokens, output_tokens)
        mine = self._buckets.get(tenant)
        if not mine:
            return Charge(tenant)
        amounts = _amounts(charge)
        refusals = [
            Refusal(
                budget,
                int(bucket.capacity),
                amounts[budget],
                max(0, math.floor(bucket.level_at(now))),
                bucket.wait_s(amounts[budget], now),
            )
            for budget, bucket in mine.items()
            if not bucket.fits(amounts[budget], now)
        ]
        if refusals:
            return max(refusals, key=lambda refusal: refusal.wait_s)
        for budget, bucket in mine.items():
            bucket.take(amounts[budget], now)
        return charge

    def output_room(self, tenant: str, input_tokens: int) -> int | None:
        """The most output tokens (over all its sequences) a request of `input_tokens` could
        ever be charged by `tenant`'s budgets, full: its output budget's size, and its day's
        less the input (None: no budget bounds its output)."""
        mine = self._buckets.get(tenant, {})
        rooms = [int(mine[Budget.OUTPUT].capacity)] if Budget.OUTPUT in mine else []
        if Budget.DAY in mine:
            rooms.append(int(mine[Budget.DAY].capacity) - input_tokens)
        return min(rooms) if rooms else None

    def holds(self, tenant: str) -> bool:
        """Whether `tenant` has a token budget (its requests are charged their prompt
        tokens as counted, so those must be exact)."""
        return bool(self._buckets.get(tenant))

    def refund(self, charge: Charge, now: float) -> None:
        """Give back all of `charge` (its request never reached a backend)."""
        for budget, bucket in self._buckets.get(charge.tenant, {}).items():
            bucket.refund(_amounts(charge)[budget], now)

    def settle(self, charge: Charge, output_used: int, now: float) -> None:
        """Its request ran and ended having produced `output_used` tokens: its prompt is spent,
        and the output budgets get back what it did not use (or give what it used past its
        reservation)."""
        used = Charge(charge.tenant, charge.input_tokens, output_used)
        spent = _amounts(used)
        for budget, bucket in self._buckets.get(charge.tenant, {}).items():
            bucket.settle(_amounts(charge)[budget], spent[budget], now)

    def standings(self, tenant: str, now: float) -> list[Standing]:
        """Where `tenant` stands in each of its budgets (none: it has none)."""
        return [
            Standing(
                budget,
                int(bucket.capacity),
                max(0, math.floor(bucket.level_at(now) + 1e-6)),
                bucket.reset_s(now),
            )
            for budget, bucket in self._buckets.get(tenant, {}).items()
        ]

    def tightest(self, tenant: str, now: float) -> Standing | None:
        """The budget of `tenant` with the fewest tokens left, or None (no budget): what the
        `x-ratelimit-*-tokens` headers describe."""
        return min(
            self.standings(tenant, now), key=lambda s: (s.remaining, -s.reset_s), default=None
        )

    def export(self) -> list[BucketState]:
        """Every bucket's state, to save (llmd/usage/store.py)."""
        return [
            BucketState(tenant, budget.value, bucket.capacity, bucket.rate, bucket.level, bucket.at)
            for tenant, mine in self._buckets.items()
            for budget, bucket in mine.items()
        ]

    def restore(self, states: Iterable[BucketState]) -> None:
        """Take saved levels back (a restart): each bucket the tenants still have gets its
        level at its time (never past its size), and refills from then."""
        for state in states:
            try:
                budget = Budget(state.budget)
            except ValueError:  # a budget this llmd does not know
                continue
            bucket = self._buckets.get(state.tenant, {}).get(budget)
            if bucket is not None:
                bucket.level, bucket.at = min(state.level, bucket.capacity), state.at
