"""The usage keeper: what the observer gathered (tokens, requests and outcomes per tenant, model
and hour) and the token budgets' state go to the usage store (llmd/usage/store.py) every
`usage.flush_interval_s`, on a worker thread, and once more at shutdown; at start-up the budgets
take their saved state back, so a restart neither forgets usage nor refills a budget (beyond
the refill of the time it was down). Hours older than `usage.keep_days` are dropped as it
writes. The store is created with the first write that has something to keep, and a write that
would change nothing in it is skipped. Without one (the state directory cannot be written) llmd
serves on, keeping nothing, and says so once."""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

import structlog

from llmd.errors import UsageError
from llmd.state import DaemonState
from llmd.usage.records import HOUR_S, BucketState
from llmd.usage.store import FILE_NAME, UsageStore

log = structlog.get_logger("llmd.usage")
DAY_S = 86_400


class UsageKeeper:
    """Keeps `state`'s usage and budgets in the store of `state_dir`."""

    def __init__(self, state: DaemonState, state_dir: Path) -> None:
        self.state = state
        self.state_dir = state_dir
        self.store: UsageStore | None = None
        self.task: asyncio.Task[None] | None = None
        self._writing = asyncio.Lock()
        self._stopping = asyncio.Event()
        self._failed = False  # the last write failed: said once until one succeeds
        # What the store holds since the last write: its budgets, and the hour from which it
        # keeps usage (None: keeps all). An idle daemon's write would change neither.
        self._written: tuple[list[BucketState], int | None] | None = None

    def open(self) -> None:
        """Open the store, when there is one, and give the budgets their saved state back
        (start-up)."""
        if not (self.state_dir / FILE_NAME).exists():
            return
        try:
            self.store = UsageStore(self.state_dir / FILE_NAME)
            self.state.admission.budgets.restore(self.store.budgets())
        except UsageError as exc:
            log.warning("usage_store_unavailable", error=str(exc))
            self._failed = True

    def start(self) -> None:
        """Write every `usage.flush_interval_s` from now on (a reload's interval applies from
        the next write)."""
        self.task = asyncio.create_task(self._run(), name="usage")

    async def _run(self) -> None:
        """Write every interval until `close`, then once more (never cut short mid-write)."""
        while not self._stopping.is_set():
            with contextlib.suppress(TimeoutError):
                interval = self.state.config.usage.flush_interval_s
                await asyncio.wait_for(self._stopping.wait(), interval)
            await self.flush()

    async def flush(self) -> None:
        """Write what was gathered since the last write and the budgets as they stand now; rows
        that could not be written wait for the next write. Nothing is written when that would
        change nothing: no rows, the budgets as last written, no hour newly past `keep_days`
        (an idle daemon's transaction, on a thread, every `flush_interval_s`)."""
        async with self._writing:
            rows = self.state.observer.usage.drain()
            budgets = self.state.admission.budgets.export()
            keep_days = self.state.config.usage.keep_days
            drop_before = int(time.time()) - keep_days * DAY_S if keep_days else None
            # Usage is kept by the hour (multiples of HOUR_S): the hours a write drops change
            # only when `drop_before` passes the start of one.
            kept_from = None if drop_before is None else -(-drop_before // HOUR_S)
            if not rows and self._written == (budgets, kept_from):
                return
            try:
                if self.store is None and (rows or budgets):
                    self.store = await asyncio.to_thread(UsageStore.in_dir, self.state_dir)
                if self.store is not None:
                    await asyncio.to_thread(self.store.write, rows, budgets, drop_before)
                    self._written = (budgets, kept_from)
            except UsageError as exc:
                self.state.observer.usage.put_back(rows)
                if not self._failed:
                    log.error("usage_not_kept", error=str(exc))
                self._failed = True
                return
            self._failed = False

    async def close(self) -> None:
        """Stop the periodic writes, write what is left, close the store (shutdown)."""
        self._stopping.set()
        if self.task is not None:
            await asyncio.wait({self.task})
        else:
            await self.flush()
        if self.store is not None:
            self.store.close()
            self.store = None
