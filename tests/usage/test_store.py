"""The usage store: rows add up per hour, tenant, model and outcome; the budgets saved are the
last ones written; old hours are dropped; what was written is there when the file is opened
again; SQLite's failures are UsageError naming the file."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from llmd.errors import UsageError
from llmd.usage.records import BucketState, UsageBatch
from llmd.usage.store import FILE_NAME, UsageStore, UsageTotal

HOUR = 3600
T0 = 1_800_000_000 // HOUR * HOUR  # the start of an hour


def batch(*rows: tuple[str, str, str, int, int, float]) -> UsageBatch:
    gathered = UsageBatch()
    for tenant, model, outcome, prompt, output, at in rows:
        gathered.add(tenant, model, outcome, prompt, output, at)
    return gathered


def test_usage_adds_up_and_survives_reopening(tmp_path: Path) -> None:
    """Two writes of the same hour add up; another hour is its own row; the totals from an
    hour on sum per tenant and model with requests by outcome; a new store on the same file
    (the daemon restarted) reads the same, in WAL mode."""
    store = UsageStore.in_dir(tmp_path / "state")
    first = batch(("agent", "tiny", "ok", 100, 20, T0 + 5), ("agent", "tiny", "rejected", 0, 0, T0))
    store.write(first.drain(), [])
    store.write(batch(("agent", "tiny", "ok", 50, 10, T0 + 99)).rows, [])
    store.write(batch(("chat", "tiny", "ok", 7, 3, T0 + HOUR + 1)).rows, [])
    store.close()
    again = UsageStore(tmp_path / "state" / FILE_NAME)
    assert again.totals(T0) == [
        UsageTotal("agent", "tiny", 3, 150, 30, {"ok": 2, "rejected": 1}),
        UsageTotal("chat", "tiny", 1, 7, 3, {"ok": 1}),
    ]
    assert [t.tenant for t in again.totals(T0 + HOUR + 10)] == ["chat"]
    assert [t.tenant for t in again.totals(T0, tenant="agent")] == ["agent"]
    mode = sqlite3.connect(tmp_path / "state" / FILE_NAME).execute("PRAGMA journal_mode")
    assert mode.fetchone() == ("wal",)


def test_budgets_are_replaced_and_old_hours_dropped(tmp_path: Path) -> None:
    """The budgets saved are those of the last write (a tenant gone is gone); hours before
    `drop_before` go."""
    store = UsageStore.in_dir(tmp_path)
    old = BucketState("gone", "tokens_per_day", 1000.0, 0.01, 10.0, T0)
    kept = BucketState("agent", "input_tokens_per_minute", 600.0, 10.0, 55.5, T0 + 1.5)
    store.write(batch(("agent", "tiny", "ok", 1, 1, T0 - 30 * 86400)).rows, [old])
    store.write(batch(("agent", "tiny", "ok", 2, 2, T0)).rows, [kept], drop_before=T0 - 86400)
    assert store.budgets() == [kept]
    assert store.totals(0) == [UsageTotal("agent", "tiny", 1, 2, 2, {"ok": 1})]
    assert kept.level_at(T0 + 11.5) == 155.5 and kept.level_at(T0 + 1000) == 600


def test_a_store_that_cannot_be_made_is_a_usage_error(tmp_path: Path) -> None:
    """A state directory that cannot be created, or a file that is not a database: UsageError
    naming the path."""
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(UsageError, match="cannot create the state directory"):
        UsageStore.in_dir(blocker / "state")
    (tmp_path / FILE_NAME).write_bytes(b"not a database" * 100)
    with pytest.raises(UsageError, match=f"{tmp_path / FILE_NAME}: cannot open"):
        UsageStore(tmp_path / FILE_NAME)
