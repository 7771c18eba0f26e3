"""The simulator's uvicorn server, as vLLM 0.32's API server runs it (`serve_http`): one
uvicorn `Server` on the Unix socket and/or TCP port, stopped by its owner, never by signals.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from pathlib import Path

from starlette.types import ASGIApp

from llmd.console import import_uvicorn

import_uvicorn()  # without its command line: llmd/console.py
import uvicorn  # noqa: E402

from llmd.embedded import EmbeddedServer  # noqa: E402

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


class _Server(EmbeddedServer):
    """The embedded uvicorn server (llmd/embedded.py: awake once a second while idle), which
    tells when it listens: the simulator's entry point owns the signals and stops it."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.listening = asyncio.Event()

    def stop(self) -> None:
        """Stop serving (uvicorn's `should_exit`), waking the main loop at once."""
        self.should_exit = True

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
