"""The requests currently being relayed, so a drain can wait for them or end them in-band."""

from __future__ import annotations

import asyncio
import dataclasses
import time

from llmd.errors import ApiError


@dataclasses.dataclass(eq=False)
class Exchange:
    """One client request relayed to the engine.

    `task` does the upstream work; `abort_error` is set (before cancelling `task`) when llmd,
    not the client, ends the request, so the client gets that error rather than silence.
    `response_started` tells whether the error must go in-band.
    """

    request_id: str
    stream: bool
    started_at: float = dataclasses.field(default_factory=time.monotonic)
    task: asyncio.Task[None] | None = None
    response_started: bool = False
    abort_error: ApiError | None = None


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

    def find(self, request_id: str) -> Exchange | None:
        """The live exchange with `request_id`, if any."""
        return next((e for e in self._exchanges if e.request_id == request_id), None)

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

    def abort(self, exchange: Exchange, error: ApiError) -> bool:
        """End `exchange` with `error` (in-band once its response started); False if done."""
        if exchange.task is None or exchange.task.done():
            return False
        exchange.abort_error = error
        exchange.task.cancel()
        return True

    def abort_all(self, error: ApiError) -> int:
        """End every live exchange with `error`; how many were ended."""
        return sum(self.abort(exchange, error) for exchange in list(self._exchanges))
