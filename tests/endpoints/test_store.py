"""The Responses store: per tenant, bounded by bytes (oldest first) and age, in a file of mode
0600 made on the first write, kept across a reopen."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import stat
from pathlib import Path
from typing import Any

import pytest

from llmd.config import ResponsesConfig
from llmd.endpoints.store import FILE_NAME, ResponseStore


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def response(response_id: str, text: str = "hi") -> dict[str, Any]:
    return {"id": response_id, "object": "response", "output": [{"type": "message", "text": text}]}


def size(context: list[Any], answer: dict[str, Any]) -> int:
    """The bytes a row takes against max_bytes: its context's and response's compact JSON."""
    return sum(
        len(json.dumps(value, separators=(",", ":"), ensure_ascii=False))
        for value in (context, answer)
    )


def store_at(
    path: Path | None, limits: ResponsesConfig | None = None, clock: Clock | None = None
) -> ResponseStore:
    bounds = limits or ResponsesConfig()
    return ResponseStore(path, lambda: bounds, clock or Clock())


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


def test_a_tenant_gets_back_what_it_stored_and_no_other_tenant_sees_it(tmp_path: Path) -> None:
    """put then get gives the response and its context; another tenant's get and delete of
    that id find nothing; delete forgets it for its tenant."""

    async def scenario() -> None:
        store = store_at(tmp_path / FILE_NAME)
        context = [{"role": "user", "content": "hi"}]
        assert await store.put("a", "resp_1", context, response("resp_1"))
        stored = await store.get("a", "resp_1")
        assert stored is not None
        assert stored.response == response("resp_1") and stored.context == context
        assert await store.get("b", "resp_1") is None
        assert not await store.delete("b", "resp_1")
        assert await store.delete("a", "resp_1")
        assert await store.get("a", "resp_1") is None
        assert not await store.delete("a", "resp_1")
        store.close()

    run(scenario())


def test_past_max_bytes_the_tenants_oldest_go_first(tmp_path: Path) -> None:
    """A tenant's rows past max_bytes are forgotten oldest first, leaving other tenants'
    alone; a row larger than the bound alone is not kept; max_bytes 0 keeps nothing."""
    context: list[Any] = []
    one = size(context, response("resp_0"))
    limits = ResponsesConfig(max_bytes=3 * one)
    clock = Clock()

    async def scenario() -> None:
        store = store_at(tmp_path / FILE_NAME, limits, clock)
        assert await store.put("other", "resp_0", context, response("resp_0"))
        for index in range(5):
            clock.now += 1
            assert await store.put("a", f"resp_{index}", context, response(f"resp_{index}"))
        kept = [i for i in range(5) if await store.get("a", f"resp_{i}") is not None]
        assert kept == [2, 3, 4]
        assert await store.get("other", "resp_0") is not None
        big = response("resp_big", "x" * (3 * one))
        assert not await store.put("a", "resp_big", context, big)
        assert await store.get("a", "resp_4") is not None
        store.close()
        off = store_at(tmp_path / FILE_NAME, ResponsesConfig(max_bytes=0), clock)
        assert not await off.put("a", "resp_9", context, response("resp_9"))
        assert await off.get("a", "resp_9") is None
        off.close()

    run(scenario())


def test_a_row_older_than_ttl_is_gone(tmp_path: Path) -> None:
    """A response stored more than ttl_s ago is neither found nor deleted, and the next write
    removes it from the file."""
    clock = Clock()
    limits = ResponsesConfig(ttl_s=60.0)
    path = tmp_path / FILE_NAME

    async def scenario() -> None:
        store = store_at(path, limits, clock)
        await store.put("a", "resp_old", [], response("resp_old"))
        clock.now += 59
        assert await store.get("a", "resp_old") is not None
        clock.now += 2
        assert await store.get("a", "resp_old") is None
        assert not await store.delete("a", "resp_old")
        await store.put("a", "resp_new", [], response("resp_new"))
        store.close()

    run(scenario())
    with sqlite3.connect(path) as db:
        ids = [row[0] for row in db.execute("SELECT id FROM responses")]
    assert ids == ["resp_new"]


def test_the_file_is_made_on_the_first_write_mode_0600_and_outlives_the_store(
    tmp_path: Path,
) -> None:
    """Reads before any write make no file; the first write makes it (and its directory)
    with mode 0600; a new store on the same file finds what the old one kept."""
    path = tmp_path / "state" / FILE_NAME

    async def first() -> None:
        store = store_at(path)
        assert await store.get("a", "resp_1") is None
        assert not await store.delete("a", "resp_1")
        assert not path.exists()
        await store.put("a", "resp_1", [{"role": "user", "content": "é"}], response("resp_1"))
        store.close()

    async def second() -> None:
        store = store_at(path)
        stored = await store.get("a", "resp_1")
        assert stored is not None and stored.context[0]["content"] == "é"
        store.close()

    run(first())
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    run(second())


def test_an_unreadable_file_is_a_503_and_a_failed_write_is_logged(tmp_path: Path) -> None:
    """A store whose file is not a database: a read raises StoreUnavailable (503 with
    Retry-After); a write returns False (the answer goes on, unstored)."""
    from llmd.errors import StoreUnavailable

    path = tmp_path / FILE_NAME
    path.write_bytes(b"not a database" * 100)

    async def scenario() -> None:
        store = store_at(path)
        with pytest.raises(StoreUnavailable) as caught:
            await store.get("a", "resp_1")
        assert caught.value.status == 503 and caught.value.retry_after_s
        assert not await store.put("a", "resp_1", [], response("resp_1"))
        store.close()

    run(scenario())


def test_in_memory_when_no_path() -> None:
    """With no path the store lives in memory (the proxy app's default)."""

    async def scenario() -> None:
        store = store_at(None)
        await store.put("a", "resp_1", [], response("resp_1"))
        assert await store.get("a", "resp_1") is not None
        store.close()

    run(scenario())
