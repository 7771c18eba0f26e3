"""Turns at a shared resource (the tokenizer thread, the engine's /tokenize), by class.

At most `slots` holders at once; the others wait in order of rank (a request class: interactive
first), then of arrival. A waiter whose task is cancelled (its client left) leaves the line at
once and never takes a turn; a turn handed to a waiter cancelled at that moment passes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
from collections.abc import AsyncIterator


class Turns:
    """A line of at most `slots` concurrent holders, lowest rank first (asyncio, one loop)."""

    def __init__(self, slots: int) -> None:
        self.slots = max(1, slots)
        self.busy = 0
        self._line: list[tuple[int, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    @property
    def waiting(self) -> int:
        """Waiters in line (cancelled ones not counted)."""
        return sum(not future.done() for _, _, future in self._line)

    def resize(self, slots: int) -> None:
        """Allow `slots` holders from now on (a reload); more slots serve waiters at once."""
        self.slots = max(1, slots)
        while self.busy < self.slots and self._hand_over():
            self.busy += 1

    @contextlib.asynccontextmanager
    async def turn(self, rank: int) -> AsyncIterator[None]:
        """Hold one slot for the block, after every waiter of a lower rank and every earlier
        waiter of the same rank. Cancellation while waiting leaves the line."""
        if self.busy < self.slots:  # then nobody waits: a release hands its slot over
            self.busy += 1
        else:
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            heapq.heappush(self._line, (rank, next(self._seq), future))
            try:
                await future
            except asyncio.CancelledError:
                if future.done() and not future.cancelled():
                    self._release()  # handed the slot as it was cancelled: pass it on
                raise
        try:
            yield
        finally:
            self._release()

    def _release(self) -> None:
        if not self._hand_over():
            self.busy -= 1

    def _hand_over(self) -> bool:
        """Give a slot to the first live waiter (its holder count stays); False if none."""
        while self._line:
            _, _, future = heapq.heappop(self._line)
            if not future.done():
                future.set_result(None)
                return True
        return False
