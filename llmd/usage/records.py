"""What llmd keeps of its usage: per hour, tenant, model and outcome, the requests and their
tokens (`UsageKey`, `UsageCounts`, gathered in a `UsageBatch` between writes), and each token
bucket's state (`BucketState`). Pure."""

from __future__ import annotations

import dataclasses

HOUR_S = 3600


@dataclasses.dataclass(frozen=True)
class BucketState:
    """One tenant's token bucket as saved (llmd/admission/budgets.py): its `budget` (the
    tenants file's key), its `capacity` and `rate` (tokens, tokens/s) and its `level` of
    tokens at `at` (Unix time, s)."""

    tenant: str
    budget: str
    capacity: float
    rate: float
    level: float
    at: float

    def level_at(self, now: float) -> float:
        """Its tokens at `now`, refilled since `at` (as the bucket itself counts)."""
        return min(self.capacity, self.level + max(0.0, now - self.at) * self.rate)


@dataclasses.dataclass(frozen=True)
class UsageKey:
    """One row's key: the `hour` (Unix time of its start, UTC), the tenant, the model asked
    for ("" when it named none llmd serves) and the outcome (llmd/telemetry/outcomes.py)."""

    hour: int
    tenant: str
    model: str
    outcome: str


@dataclasses.dataclass
class UsageCounts:
    """Requests, their prompt tokens (validation's count, every prompt) and output tokens."""

    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0


class UsageBatch:
    """Usage not yet written, by key. Adding is a dict update (it runs on the event loop for
    each ended request); `drain` hands the rows over to be written."""

    def __init__(self) -> None:
        self.rows: dict[UsageKey, UsageCounts] = {}

    def add(
        self,
        tenant: str,
        model: str,
        outcome: str,
        input_tokens: int,
        output_tokens: int,
        now: float,
    ) -> None:
        """Count one ended request at `now` (Unix time, s)."""
        key = UsageKey(int(now) // HOUR_S * HOUR_S, tenant, model, outcome)
        counts = self.rows.get(key)
        if counts is None:
            counts = self.rows[key] = UsageCounts()
        counts.requests += 1
        counts.input_tokens += input_tokens
        counts.output_tokens += output_tokens

    def drain(self) -> dict[UsageKey, UsageCounts]:
        """Every row so far; the batch is empty after."""
        rows, self.rows = self.rows, {}
        return rows

    def put_back(self, rows: dict[UsageKey, UsageCounts]) -> None:
        """Rows that could not be written, added back to be written with the next ones."""
        for key, counts in rows.items():
            mine = self.rows.setdefault(key, UsageCounts())
            mine.requests += counts.requests
            mine.input_tokens += counts.input_tokens
            mine.output_tokens += counts.output_tokens
