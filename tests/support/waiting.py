"""Waiting in tests for state that settles a moment after the request that caused it."""

from __future__ import annotations

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
