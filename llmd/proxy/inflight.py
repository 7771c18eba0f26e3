"""The requests currently being relayed, so a drain can wait for them or end them in-band."""

from __future__ import annotations

import asyncio
import dataclasses
import time

from llmd.admission.counters import Phase


@dataclasses.dataclass(eq=False)
class Exchange:
    """One client request relayed to the engine.

    `task` does the upstream work; `abort_reason` is set (before cancelling `task`) when llmd,
    not the client, ends the request, so the client gets an error rather than silence.
    `response_started` tells whether the error must go in-band. `phase` is where the request
    is (queued, prefill, decode: for counting cancellations); `send_since` is when a send to
    the client began that has not returned yet (a stalled reader), `queue_ms` the queue wait.
    """

    request_id: str
    stream: bool
    started_at: float = dataclasses.field(default_factory=time.monotonic)
    task: asyncio.Task[None] | None = None
    response_started: bool = False
    abort_reason: str | None = None
    phase: Phase = Phase.QUEUED
    send_since: float | None = None
    queue_ms: float = 0.0


class InFlight:
    """The set of live exchanges, with drain helpers."""

    def __init__(self) -> None:
        self._exchanges: set[Exchange] = set()
        self._idle = asyncio.Event()
        self._idle.set()

    def __len__(self) -> int:
        return len(self._exchanges)

    def add(self, exchange: Exchange) -> None:
        self._exchanges.add(exchange)
        self._idle.clear()

    def remove(self, exchange: Exchange) -> None:
        self._exchanges.discard(exchange)
        if not self._exchanges:
            self._idle.set()

    async def wait_idle(self, timeout_s: float) -> bool:
        """Wait until no exchange is live, at most `timeout_s` seconds; True when idle."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout=timeout_s)
        except TimeoutError:
            return False
        return True

    def end_stalled(self, since: float) -> list[Exchange]:
        """End (cancel, without an answer) every exchange whose send to its client has been
        blocked since before `since` (monotonic s): the client stopped reading. The ended ones."""
        ended = []
        for exchange in self._exchanges:
            started = exchange.send_since
            if started is not None and started < since and exchange.task is not None:
                exchange.send_since = None
                exchange.task.cancel()
                ended.append(exchange)
        return ended

    def abort_all(self, reason: str) -> int:
        """End every live exchange with `reason` (in-band error or 503); how many were ended."""
        count = 0
        for exchange in list(self._exchanges):
            if exchange.task is not None and not exchange.task.done():
                exchange.abort_reason = reason
                exchange.task.cancel()
                count += 1
        return count
