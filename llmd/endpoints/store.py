"""The Responses store: what `POST /v1/responses` with `store` asks llmd to keep, in SQLite
(stdlib `sqlite3`, WAL) in the state directory, per tenant, bounded.

    responses(tenant, id, stored_at, bytes, context, response)   primary key (tenant, id)

A row is one stored response: the response object as the client got it, and its `context`,
the input items it answered (a previous response's context and output already expanded in),
which a next turn's `previous_response_id` puts before its own input. A tenant sees only its
own rows (another tenant's id is unknown). Bounds, read at each write from `[responses]`
(a reload applies at once): a tenant's rows hold at most `max_bytes` (their JSON; past it its
oldest go first, and a row larger than the bound alone is not kept) and a row older than
`ttl_s` is gone. The file is made on the first write (mode 0600: it holds prompts); until
then reads find nothing. Every call runs on one thread of the store's own, off the event loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import json
import os
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import structlog

from llmd.config import ResponsesConfig
from llmd.errors import StoreUnavailable

log = structlog.get_logger("llmd.store")

FILE_NAME = "responses.sqlite3"
_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    tenant TEXT NOT NULL,
    id TEXT NOT NULL,
    stored_at REAL NOT NULL,
    bytes INTEGER NOT NULL,
    context TEXT NOT NULL,
    response TEXT NOT NULL,
    PRIMARY KEY (tenant, id)
);
CREATE INDEX IF NOT EXISTS responses_by_age ON responses (tenant, stored_at);
CREATE INDEX IF NOT EXISTS responses_by_time ON responses (stored_at);
"""
T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class Stored:
    """One stored response: the object the client got, and the input items it answered."""

    response: dict[str, Any]
    context: list[dict[str, Any]]


class ResponseStore:
    """The store in the SQLite file at `path` (None: in memory, gone with the process), bounded
    by `limits()` at each write. `clock` gives Unix seconds. Methods raise StoreUnavailable
    when the file cannot be read; a failed write is logged (`response_store_failed`) and the
    answer goes on unstored."""

    def __init__(
        self,
        path: Path | None,
        limits: Callable[[], ResponsesConfig],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.path = path
        self.limits = limits
        self.clock = clock
        self._db: sqlite3.Connection | None = None
        self._thread = concurrent.futures.ThreadPoolExecutor(1, "llmd-store")

    async def put(
        self,
        tenant: str,
        response_id: str,
        context: list[dict[str, Any]],
        response: dict[str, Any],
    ) -> bool:
        """Keep `response` (and the `context` it answered) as `tenant`'s `response_id`,
        replacing one of that id, then forget the tenant's oldest rows past `max_bytes` and
        everyone's rows past `ttl_s`. False when nothing was kept (the store is off, the row
        alone is over the bound, or the write failed)."""
        try:
            return await self._run(self._put, tenant, response_id, context, response)
        except StoreUnavailable as exc:
            log.warning("response_store_failed", response_id=response_id, error=exc.message)
            return False

    async def get(self, tenant: str, response_id: str) -> Stored | None:
        """`tenant`'s stored `response_id`; None when it has none (or it expired)."""
        return await self._run(self._get, tenant, response_id)

    async def delete(self, tenant: str, response_id: str) -> bool:
        """Forget `tenant`'s `response_id`; False when it had none."""
        return await self._run(self._delete, tenant, response_id)

    def close(self) -> None:
        """Close the file once the calls queued are done."""

        def close() -> None:
            if self._db is not None:
                self._db.close()
                self._db = None

        self._thread.submit(close)
        self._thread.shutdown(wait=False)

    # -- on the store's thread -----------------------------------------------------------------

    async def _run(self, call: Callable[..., T], *args: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._thread, lambda: self._guarded(call, *args))

    def _guarded(self, call: Callable[..., T], *args: Any) -> T:
        try:
            return call(*args)
        except (sqlite3.Error, OSError, ValueError) as exc:  # ValueError: bad UTF-8, JSON
            where = self.path or "memory"
            raise StoreUnavailable(
                f"the response store ({where}) failed: {type(exc).__name__}: {exc}",
                retry_after_s=1,
            ) from exc

    def _connection(self, create: bool) -> sqlite3.Connection | None:
        """The open database; None when its file does not exist yet and `create` is False."""
        if self._db is not None:
            return self._db
        if self.path is None:
            target = ":memory:"
        else:
            if not create and not self.path.exists():
                return None
            self.path.parent.mkdir(parents=True, exist_ok=True)
            os.close(os.open(self.path, os.O_CREAT | os.O_WRONLY, 0o600))
            target = str(self.path)
        db = sqlite3.connect(target, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")  # WAL: a crash may lose the last writes only
        db.executescript(_SCHEMA)
        self._db = db
        return db

    def _put(
        self, tenant: str, response_id: str, context: list[Any], response: dict[str, Any]
    ) -> bool:
        limits = self.limits()
        context_text, response_text = _dumps(context), _dumps(response)
        size = len(context_text) + len(response_text)
        if limits.max_bytes == 0:
            return False
        if size > limits.max_bytes:
            log.warning(
                "response_not_stored", response_id=response_id, bytes=size, max=limits.max_bytes
            )
            return False
        db = self._connection(create=True)
        assert db is not None
        now = self.clock()
        with db:  # one transaction
            db.execute("BEGIN IMMEDIATE")
            db.execute("DELETE FROM responses WHERE stored_at <= ?", (now - limits.ttl_s,))
            db.execute(
                "INSERT OR REPLACE INTO responses VALUES (?, ?, ?, ?, ?, ?)",
                (tenant, response_id, now, size, context_text, response_text),
            )
            (total,) = db.execute(
                "SELECT SUM(bytes) FROM responses WHERE tenant = ?", (tenant,)
            ).fetchone()
            if total > limits.max_bytes:
                self._evict(db, tenant, total - limits.max_bytes)
        return True

    @staticmethod
    def _evict(db: sqlite3.Connection, tenant: str, over: int) -> None:
        """Forget `tenant`'s oldest rows until `over` bytes are gone."""
        oldest = db.execute(
            "SELECT rowid, bytes FROM responses WHERE tenant = ? ORDER BY stored_at, rowid",
            (tenant,),
        )
        doomed = []
        for rowid, size in oldest:
            if over <= 0:
                break
            doomed.append((rowid,))
            over -= size
        db.executemany("DELETE FROM responses WHERE rowid = ?", doomed)

    def _get(self, tenant: str, response_id: str) -> Stored | None:
        db = self._connection(create=False)
        if db is None:
            return None
        row = db.execute(
            "SELECT context, response FROM responses WHERE tenant = ? AND id = ? AND stored_at > ?",
            (tenant, response_id, self.clock() - self.limits().ttl_s),
        ).fetchone()
        if row is None:
            return None
        return Stored(response=json.loads(row[1]), context=json.loads(row[0]))

    def _delete(self, tenant: str, response_id: str) -> bool:
        db = self._connection(create=False)
        if db is None:
            return False
        cursor = db.execute(
            "DELETE FROM responses WHERE tenant = ? AND id = ? AND stored_at > ?",
            (tenant, response_id, self.clock() - self.limits().ttl_s),
        )
        return cursor.rowcount > 0


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
