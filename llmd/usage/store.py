"""The usage store: `usage.sqlite3` in the state directory (stdlib sqlite3, WAL), the embedded
default, no database server. The daemon writes it in batches off the request path
(llmd/daemon/usage.py); `llmd usage` reads it, with or without a daemon running.

    usage(hour, tenant, model, outcome, requests, input_tokens, output_tokens)
    budgets(tenant, budget, capacity, rate, level, at)     every token bucket, as last saved

One connection at a time uses a store object (the daemon's writes come one after another, on a
worker thread). sqlite3 errors are raised as UsageError, naming the file.
"""

from __future__ import annotations

import dataclasses
import sqlite3
from collections.abc import Iterable, Mapping
from pathlib import Path

from llmd.errors import UsageError
from llmd.usage.records import BucketState, UsageCounts, UsageKey

FILE_NAME = "usage.sqlite3"
# A writer waits this long for another's lock (`llmd usage` reading while the daemon writes).
BUSY_TIMEOUT_MS = 5000
_SCHEMA = """
CREATE TABLE IF NOT EXISTS usage (
    hour INTEGER NOT NULL, tenant TEXT NOT NULL, model TEXT NOT NULL, outcome TEXT NOT NULL,
    requests INTEGER NOT NULL, input_tokens INTEGER NOT NULL, output_tokens INTEGER NOT NULL,
    PRIMARY KEY (hour, tenant, model, outcome)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS budgets (
    tenant TEXT NOT NULL, budget TEXT NOT NULL, capacity REAL NOT NULL, rate REAL NOT NULL,
    level REAL NOT NULL, at REAL NOT NULL,
    PRIMARY KEY (tenant, budget)
) WITHOUT ROWID;
"""
_ADD = """
INSERT INTO usage VALUES (?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (hour, tenant, model, outcome) DO UPDATE SET
    requests = requests + excluded.requests,
    input_tokens = input_tokens + excluded.input_tokens,
    output_tokens = output_tokens + excluded.output_tokens
"""


@dataclasses.dataclass(frozen=True)
class UsageTotal:
    """One tenant's use of one model over a span: requests by outcome, and tokens."""

    tenant: str
    model: str
    requests: int
    input_tokens: int
    output_tokens: int
    outcomes: dict[str, int]


class UsageStore:
    """The usage file at `path`, created (with its tables) when missing."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self._db = sqlite3.connect(
                path, timeout=BUSY_TIMEOUT_MS / 1000, check_same_thread=False
            )
            self._db.execute("PRAGMA journal_mode=WAL")
            # WAL with synchronous NORMAL: a power cut may lose the last writes, never the file.
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(_SCHEMA)
        except sqlite3.Error as exc:
            raise UsageError(f"{path}: cannot open the usage store: {exc}") from exc

    @classmethod
    def in_dir(cls, state_dir: Path) -> UsageStore:
        """The store of the state directory `state_dir` (created when missing, mode 0750)."""
        try:
            state_dir.mkdir(parents=True, exist_ok=True, mode=0o750)
        except OSError as exc:
            raise UsageError(f"{state_dir}: cannot create the state directory: {exc}") from exc
        return cls(state_dir / FILE_NAME)

    def close(self) -> None:
        self._db.close()

    def write(
        self,
        rows: Mapping[UsageKey, UsageCounts],
        budgets: Iterable[BucketState],
        drop_before: int | None = None,
    ) -> None:
        """In one transaction: add `rows` to the kept usage, replace the saved budgets with
        `budgets`, and drop the hours before `drop_before` (Unix time; None: none)."""
        try:
            with self._db:
                self._db.executemany(
                    _ADD,
                    [
                        (k.hour, k.tenant, k.model, k.outcome, c.requests, c.input_tokens,
                         c.output_tokens)
                        for k, c in rows.items()
                    ],
                )  # fmt: skip
                self._db.execute("DELETE FROM budgets")
                self._db.executemany(
                    "INSERT INTO budgets VALUES (?, ?, ?, ?, ?, ?)",
                    [(b.tenant, b.budget, b.capacity, b.rate, b.level, b.at) for b in budgets],
                )
                if drop_before is not None:
                    self._db.execute("DELETE FROM usage WHERE hour < ?", (drop_before,))
        except sqlite3.Error as exc:
            raise UsageError(f"{self.path}: cannot write usage: {exc}") from exc

    def budgets(self) -> list[BucketState]:
        """The budgets as last saved."""
        try:
            found = self._db.execute("SELECT * FROM budgets ORDER BY tenant, budget").fetchall()
        except sqlite3.Error as exc:
            raise UsageError(f"{self.path}: cannot read budgets: {exc}") from exc
        return [BucketState(*row) for row in found]

    def totals(self, since: int, tenant: str | None = None) -> list[UsageTotal]:
        """Usage from the hour holding `since` (Unix time) on, per tenant and model (of
        `tenant` only, when given), by tenant then model."""
        query = (
            "SELECT tenant, model, outcome, SUM(requests), SUM(input_tokens), SUM(output_tokens)"
            " FROM usage WHERE hour >= ? AND (? IS NULL OR tenant = ?)"
            " GROUP BY tenant, model, outcome ORDER BY tenant, model, outcome"
        )
        hour = since // 3600 * 3600
        try:
            found = self._db.execute(query, (hour, tenant, tenant)).fetchall()
        except sqlite3.Error as exc:
            raise UsageError(f"{self.path}: cannot read usage: {exc}") from exc
        totals: dict[tuple[str, str], UsageTotal] = {}
        for name, model, outcome, requests, input_tokens, output_tokens in found:
            total = totals.get((name, model))
            if total is None:
                total = totals[(name, model)] = UsageTotal(name, model, 0, 0, 0, {})
            totals[(name, model)] = dataclasses.replace(
                total,
                requests=total.requests + requests,
                input_tokens=total.input_tokens + input_tokens,
                output_tokens=total.output_tokens + output_tokens,
                outcomes={**total.outcomes, outcome: requests},
            )
        return list(totals.values())
