"""A one-shot alarm at a monotonic instant, moved only when the instant changes: what runs a
pass again at the next deadline (admission's queue timeouts, the swap groups' next decision)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class Alarm:
    """Calls `ring` once at the instant last given to `arm` (the event loop's monotonic
    clock, s; 1 ms late, so that the deadline has passed when `ring` looks)."""

    def __init__(self, ring: Callable[[], None]) -> None:
        self._ring = ring
        self._handle: asyncio.TimerHandle | None = None
        self.at: float | None = None  # when it rings (None: it does not)

    def arm(self, at: float | None, now: float) -> None:
        """Ring at `at` (None: never) instead of when it was set to, `now` being the time now;
        nothing to do when `at` is that instant already."""
        if at == self.at:
            return
        if self._handle is not None:
            self._handle.cancel()
        self._handle, self.at = None, at
        if at is not None:
            self._handle = asyncio.get_running_loop().call_later(
                max(0.0, at - now) + 0.001, self._rung
            )

    def close(self) -> None:
        """Never ring (at shutdown)."""
        if self._handle is not None:
            self._handle.cancel()

    def _rung(self) -> None:
        self._handle = self.at = None
        self._ring()
