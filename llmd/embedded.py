"""uvicorn embedded in llmd's processes (the daemon's listeners, the simulator's server): no
signal handlers of its own, stopped by `should_exit`, which wakes it at once, and its loop
awake once a second while idle, not ten times."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

from llmd.console import import_uvicorn

import_uvicorn()  # without its command line: llmd/console.py
import uvicorn  # noqa: E402

# How often the server's loop runs uvicorn's `on_tick` (the `date` header, the exit check)
# when nothing stops it: uvicorn's own loop runs it every 0.1 s and refreshes the date at
# every tenth.
TICK_S = 1.0


class EmbeddedServer(uvicorn.Server):
    """uvicorn's `Server` (uvicorn 0.55) that its owner stops through `should_exit`, never
    signals, and whose main loop sleeps a second between ticks unless `should_exit` is set.

    uvicorn's ten wake-ups a second were about 1.3 ms of CPU a second of an idle simulator
    (measured 2026-12-07), and the daemon runs two servers (the proxy, the admin API): an idle
    process is most of a test daemon's or simulator's life, and of a quiet workstation's."""

    def __init__(self, config: uvicorn.Config) -> None:
        self._exit = asyncio.Event()  # bound to no loop until awaited (Python 3.10+)
        super().__init__(config)

    @property
    def should_exit(self) -> bool:
        """uvicorn's flag; setting it True wakes the main loop, which then ends."""
        return self._exit.is_set()

    @should_exit.setter
    def should_exit(self, value: bool) -> None:
        if value:
            self._exit.set()
        else:
            self._exit.clear()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    async def main_loop(self) -> None:
        """uvicorn's main loop with its `on_tick` run once a second, with the counter uvicorn
        has at each date refresh (a multiple of 10), and ended by `should_exit` at once."""
        counter = 0
        while not await self.on_tick(counter):
            counter = (counter + 10) % 864000
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._exit.wait(), TICK_S)
