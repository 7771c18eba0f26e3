"""How the relay hears that its client has gone: from the connection's protocol when llmd
serves the request (a call on the lost connection, no task), else from ASGI `receive`.

Why: a task awaiting `receive()` for `http.disconnect` beside each request's work, and an
`asyncio.wait` over the two, cost about 20 µs of CPU a request (a task, its first step, an
`Event` wait, its cancellation and the wait's callbacks; issue 37 item 3). llmd's HTTP
protocol (llmd/proxy/protocol.py) knows the moment a connection is lost (`connection_lost`,
where uvicorn marks the cycle `disconnected` and wakes its `receive`), and calls the cycle's
`on_lost` then, in the same loop turn `receive` would have woken in.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from starlette.types import Receive

from llmd.proxy.teardown import EarlyAnswerCycle


class Departure:
    """A request's client leaving: `watch(on_gone)` calls `on_gone` (once, with no argument)
    when its connection is lost before its response completed, `stop()` ends the watch.

    `cycle` is the request's uvicorn cycle when llmd's protocol serves it (scope
    `llmd.cycle`); without one (uvicorn's own protocol, as some tests serve the app) `watch`
    calls nothing: it starts a task that awaits `receive` for `http.disconnect` and returns it
    for the caller to wait on (uvicorn also answers `http.disconnect` once the response has
    completed: the caller tells the two apart)."""

    __slots__ = ("_cycle", "_receive", "_watcher")

    def __init__(self, receive: Receive, cycle: EarlyAnswerCycle | None) -> None:
        self._receive = receive
        self._cycle = cycle
        self._watcher: asyncio.Task[None] | None = None

    @property
    def by_protocol(self) -> bool:
        """Whether the connection's protocol tells (no watcher task)."""
        return self._cycle is not None

    def watch(self, on_gone: Callable[[], None]) -> asyncio.Task[None] | None:
        """By the protocol's way, call `on_gone` once the client has gone (at once when it
        already has) and return None; by the `receive` way, return the watcher task, which
        ends when `receive` says `http.disconnect` (`on_gone` is not called)."""
        cycle = self._cycle
        if cycle is None:
            self._watcher = asyncio.create_task(_wait_disconnect(self._receive))
            return self._watcher
        if cycle.disconnected:
            on_gone()
            return None
        cycle.on_lost = on_gone
        # As uvicorn's `receive` does before it waits: a connection whose reading was paused
        # (a body past uvicorn's high-water mark) would not see its client's close.
        if not cycle.response_complete:
            cycle.flow.resume_reading()
        return None

    def stop(self) -> None:
        """End the watch: `on_gone` is not called after this."""
        if self._cycle is not None:
            self._cycle.on_lost = None
        elif self._watcher is not None:
            self._watcher.cancel()


async def _wait_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
