"""The usage keeper: what the observer gathered and the budgets' state reach the store at each
write; a store is made only once there is something to keep; a daemon started on it gives the
budgets back their saved state; a write that fails keeps the rows for the next one; a write
that would change nothing is not made."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from llmd.admission.tenants import Tenant, TenantDirectory
from llmd.config import Config, EngineConfig
from llmd.daemon import usage
from llmd.daemon.usage import UsageKeeper
from llmd.state import DaemonState
from llmd.usage.records import HOUR_S
from llmd.usage.store import FILE_NAME, UsageStore
from tests.support.exchanges import finished_exchange
from tests.support.state import daemon_state

AGENT = Tenant("agent", input_tokens_per_minute=600)


def state_with_budget() -> DaemonState:
    state = daemon_state(Config(engine=EngineConfig(model="tiny")))
    state.admission.tenants = TenantDirectory({"0" * 64: AGENT})
    state.admission.budgets.configure([AGENT], time.time())
    return state


async def test_usage_and_budgets_are_kept_and_come_back(tmp_path: Path) -> None:
    """Nothing to keep: no file. A finished request and a spent budget: written at the next
    flush. A new keeper (a restart) gives a new ledger the saved level back."""
    idle = UsageKeeper(daemon_state(Config(engine=EngineConfig(model="tiny"))), tmp_path / "a")
    idle.open()
    await idle.close()
    assert not (tmp_path / "a").exists()
    state = state_with_budget()
    keeper = UsageKeeper(state, tmp_path / "b")
    keeper.open()
    exchange = finished_exchange(tenant="agent")
    exchange.input_tokens = 100
    state.observer.finished(exchange)
    state.admission.budgets.charge("agent", 500, 0, time.time())
    await keeper.close()
    store = UsageStore(tmp_path / "b" / FILE_NAME)
    (total,) = store.totals(0)
    assert (total.tenant, total.requests, total.input_tokens, total.output_tokens) == (
        "agent", 1, 100, 20,
    )  # fmt: skip
    again = state_with_budget()
    UsageKeeper(again, tmp_path / "b").open()
    (standing,) = again.admission.budgets.standings("agent", time.time())
    assert 100 <= standing.remaining < 110  # 100 left, and a second or so of refill


async def test_rows_a_write_could_not_keep_wait_for_the_next(tmp_path: Path) -> None:
    """A state directory that cannot be made: the rows stay in the batch; once it can, they
    are written."""
    blocker = tmp_path / "blocker"
    blocker.write_text("")
    state = state_with_budget()
    keeper = UsageKeeper(state, blocker / "state")
    state.observer.rejected("r", 429, "budget_exceeded", time.monotonic(), "agent")
    await keeper.flush()
    assert sum(c.requests for c in state.observer.usage.rows.values()) == 1
    keeper.state_dir = tmp_path / "state"
    await keeper.close()
    (total,) = UsageStore(tmp_path / "state" / FILE_NAME).totals(0)
    assert total.outcomes == {"rejected": 1}


async def test_a_write_that_would_change_nothing_is_not_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once written, an idle keeper writes again only for new rows, budgets that moved, or an
    hour newly past `keep_days` (which that write drops)."""
    clock = [100 * HOUR_S + 10.0]  # Unix s, as the keeper reads it
    monkeypatch.setattr(usage.time, "time", lambda: clock[0])
    state = state_with_budget()
    keeper = UsageKeeper(state, tmp_path)
    writes: list[int] = []

    async def flushed() -> int:
        await keeper.flush()
        return len(writes)

    state.observer.rejected("r", 429, "budget_exceeded", time.monotonic(), "agent")
    await keeper.flush()  # makes the store; its writes counted from here
    assert keeper.store is not None
    write = keeper.store.write
    keeper.store.write = lambda *args: (writes.append(1), write(*args))[1]  # type: ignore[method-assign]
    assert await flushed() == 0  # nothing new
    state.observer.rejected("s", 429, "budget_exceeded", time.monotonic(), "agent")
    assert await flushed() == 1  # a row
    assert await flushed() == 1
    state.admission.budgets.charge("agent", 100, 0, clock[0])
    assert await flushed() == 2  # the budget moved
    clock[0] += HOUR_S - 20  # the same hours kept
    assert await flushed() == 2
    clock[0] += 20  # one more hour past keep_days
    assert await flushed() == 3
    assert await flushed() == 3
    await keeper.close()
    assert len(writes) == 3
    (total,) = UsageStore(tmp_path / FILE_NAME).totals(0)
    assert total.outcomes == {"rejected": 2}
