"""Waiting in tests for state that settles a moment after the request that caused it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


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
