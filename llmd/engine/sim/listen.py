"""The simulator's uvicorn server, as vLLM 0.32's API server runs it (`serve_http`): one
uvicorn `Server` on the Unix socket and/or TCP port, stopped by its owner, never by signals.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Iterator
from pathlib import Path

from starlette.types import ASGIApp

from llmd.console import import_uvicorn

import_uvicorn()  # without its command line: llmd/console.py
import uvicorn  # noqa: E402

log = logging.getLogger("vllm.entrypoints.openai.api_server")

# Connections the kernel queues for accept: uvicorn's default, which vLLM's API server keeps,
# so that a burst of connects (llmd opens one per request) is queued, not refused.
LISTEN_BACKLOG = 2048
# How long a stop waits for requests in flight before cancelling them (aiohttp's default
# shutdown timeout, which the simulator kept before it moved to uvicorn).
STOP_GRACE_S = 60
# An idle kept-alive connection is closed after this long: vLLM 0.32's
# VLLM_HTTP_TIMEOUT_KEEP_ALIVE default, passed to uvicorn as `timeout_keep_alive`.
KEEP_ALIVE_S = 5
# How often the server's loop runs uvicorn's `on_tick` (the `date` header, the exit check)
# when nothing stops it: uvicorn's own loop runs it every 0.1 s and refreshes the date at
# every tenth.
TICK_S = 1.0


class _Server(uvicorn.Server):
    """uvicorn's server with no signal handlers of its own: the simulator's entry point owns
    them and stops the server through `stop`."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.listening = asyncio.Event()
        self.stopping = asyncio.Event()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    def stop(self) -> None:
        """Stop serving (uvicorn's `should_exit`), waking the main loop at once."""
        self.should_exit = True
        self.stopping.set()

    async def main_loop(self) -> None:
        """uvicorn's main loop (uvicorn 0.55 `Server.main_loop`), its `on_tick` run once a
        second with the counter uvicorn has at each date refresh, and ended by `stop` at once:
        uvicorn's ten wake-ups a second were about 1.3 ms of CPU a second of an idle simulator
        (measured here, 2026-12-07), and an idle simulator is most of a simulator's life."""
        counter = 0
        while not await self.on_tick(counter):
            counter = (counter + 10) % 864000
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stopping.wait(), TICK_S)

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        self.listening.set()


class Listener:
    """A started server: `await listener.close()` stops listening and ends the requests in
    flight (after up to `STOP_GRACE_S`)."""

    def __init__(self, server: _Server, task: asyncio.Task[None]) -> None:
        self._server = server
        self._task = task

    async def close(self) -> None:
        self._server.stop()
        await self._task


async def listen(app: ASGIApp, *, uds: str | None, host: str, port: int | None) -> Listener:
    """Serve `app` on the Unix socket `uds` (a stale file is removed first) and/or on
    `host:port`; returns once both accept connections. Raises OSError if one cannot bind."""
    sockets = _bound(uds, host, port)
    config = uvicorn.Config(
        app,
        lifespan="off",
        ws="none",
        log_config=None,
        proxy_headers=False,
        backlog=LISTEN_BACKLOG,
        timeout_keep_alive=KEEP_ALIVE_S,
        timeout_graceful_shutdown=STOP_GRACE_S,
    )
    server = _Server(config)
    task = asyncio.ensure_future(server.serve(sockets))
    listening = asyncio.ensure_future(server.listening.wait())
    await asyncio.wait((task, listening), return_when=asyncio.FIRST_COMPLETED)
    listening.cancel()
    if task.done():
        for sock in sockets:
            sock.close()
        task.result()
        raise OSError("the simulator's server stopped before it listened")
    if uds:
        log.info("Starting vLLM API server 0 on unix:%s", uds)
    if port:
        log.info("Starting vLLM API server 0 on http://%s:%d", host, port)
    return Listener(server, task)


def _bound(uds: str | None, host: str, port: int | None) -> list[socket.socket]:
    """Sockets bound to `uds` and/or `host:port`; none left open if one fails (OSError)."""
    sockets: list[socket.socket] = []
    try:
        if uds:
            with contextlib.suppress(FileNotFoundError):
                Path(uds).unlink()
            sockets.append(socket.socket(socket.AF_UNIX, socket.SOCK_STREAM))
            sockets[-1].bind(uds)
        if port:
            sockets.append(socket.create_server((host, port)))
    except OSError:
        for sock in sockets:
            sock.close()
        raise
    return sockets
