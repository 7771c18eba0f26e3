"""The batch lane: batch requests take llmd's own per-request work (the body read, routing,
validation, admission, the send to a backend) a few per pass of the event loop, so that work
of the other classes that arrives meanwhile goes first.

Why: at a batch wave's turnover (issue 37: 160 batch requests sent together) every request's
stages run in the order their bytes were read, each to its send to the engine, before the
loop reads the next socket; an interactive request that comes a few milliseconds after the
wave waited for all of them here, and then behind all of them in the engine's own queue.
With the lane, at most `per_pass` batch requests go on per pass, oldest first, and the loop
reads its sockets between passes: the interactive request's bytes are read, and its stages
run, before the rest of the wave's. Interactive and normal requests never wait here (normal
is the class of every request that names none).
"""

from __future__ import annotations

import asyncio
import collections

from llmd.admission.classes import Priority

# Batch requests let through per pass of the event loop: each takes about 0.5-1 ms of the
# loop's time for its stages (issue 37's CPU per request), so the loop reads its sockets
# every 1-2 ms while a wave goes through; the wave as a whole is not slowed (the same work,
# in the same order, in more passes).
PER_PASS = 2


class BatchLane:
    """Lets batch requests through `per_pass` per pass of the running event loop, in their
    order of arrival; `turn(cls)` returns at once for any other class, and for a batch
    request while its pass has room and none waits."""

    def __init__(self, per_pass: int = PER_PASS) -> None:
        self.per_pass = per_pass
        self._waiting: collections.deque[asyncio.Future[None]] = collections.deque()
        self._passed = 0  # batch requests let through in the current pass
        self._scheduled = False  # the next pass is scheduled

    @property
    def waiting(self) -> int:
        """Batch requests waiting for their pass."""
        return sum(not f.done() for f in self._waiting)

    async def turn(self, cls: Priority) -> None:
        """Return when a request of class `cls` may go on to its stages. A batch request that
        must wait leaves the lane when it is cancelled (its client left)."""
        if cls is not Priority.BATCH:
            return
        if not self._waiting and self._passed < self.per_pass:
            self._passed += 1
            self._schedule()
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiting.append(waiter)
        self._schedule()
        await waiter  # cancelled: the pass skips it (done)

    def _schedule(self) -> None:
        """Run `_next_pass` once in the loop's next pass (after it has read its sockets)."""
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._next_pass)

    def _next_pass(self) -> None:
        """A new pass: let the oldest `per_pass` waiting requests through."""
        self._scheduled = False
        self._passed = 0
        while self._waiting and self._passed < self.per_pass:
            waiter = self._waiting.popleft()
            if not waiter.done():
                waiter.set_result(None)
                self._passed += 1
        if self._passed:
            self._schedule()
