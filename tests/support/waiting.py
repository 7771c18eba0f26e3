"""Waiting in tests for state that settles a moment after the request that caused it."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import httpx

    from tests.support.llmd_process import LlmdProcess


def wait_for(predicate: Callable[[], bool], timeout_s: float, every_s: float = 0.05) -> bool:
    """Call `predicate` every `every_s` seconds until it is true (True) or `timeout_s` has
    passed (False)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(every_s)
    return False


async def until(predicate: Callable[[], bool], timeout_s: float, every_s: float = 0.05) -> bool:
    """`wait_for` for a test on the event loop: polls without blocking it."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        await asyncio.sleep(every_s)
    return False


@contextlib.asynccontextmanager
async def engine_held(
    client: httpx.AsyncClient, llmd: LlmdProcess, body: dict[str, Any], headers: dict[str, str]
) -> AsyncIterator[None]:
    """POST `body` (a chat the simulator holds: `"sim_fault": "hang"`) and hold its engine seat
    until the block ends; on leaving, its client goes and llmd holds no request any more."""
    task = asyncio.create_task(
        client.post("/v1/chat/completions", json=body, headers=headers, timeout=60)
    )
    try:
        relayed = lambda: any(s["phase"] != "queued" for s in llmd.sequences())  # noqa: E731
        assert await until(relayed, timeout_s=10)
        yield
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert await until(lambda: not llmd.sequences(), timeout_s=10)
