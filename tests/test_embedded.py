"""The embedded uvicorn server (the daemon's proxy and admin API, the simulator's API) wakes
once a second while idle, not ten times, serves, and ends at once when told to."""

from __future__ import annotations

import asyncio
import socket

import httpx
import pytest
import uvicorn
from starlette.responses import PlainTextResponse
from starlette.types import Receive, Scope, Send

from llmd import embedded
from llmd.embedded import EmbeddedServer
from tests.support.ticks import counted_ticks
from tests.support.waiting import until


async def _app(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] == "http":
        await PlainTextResponse("ok")(scope, receive, send)


def _started(sock: socket.socket) -> tuple[EmbeddedServer, asyncio.Task[None]]:
    server = EmbeddedServer(uvicorn.Config(_app, lifespan="off", log_config=None))
    return server, asyncio.create_task(server.serve(sockets=[sock]))


async def test_an_idle_server_ticks_only_at_its_date_refreshes_and_serves(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Until the second refresh of the `date` header (uvicorn's `on_tick` at a counter that is a
    multiple of 10), no tick runs between refreshes; the server answers with a `date`."""
    ticks = counted_ticks(monkeypatch)
    sock = socket.create_server(("127.0.0.1", 0))
    server, task = _started(sock)
    try:
        assert await until(lambda: any(counter >= 10 for counter in ticks), timeout_s=30)
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/"
        async with httpx.AsyncClient() as client:
            answer = await client.get(url)
        assert answer.text == "ok" and "date" in answer.headers
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)
    assert ticks[:2] == [0, 10]


async def test_should_exit_wakes_the_idle_loop_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Setting `should_exit` (as the daemon's `Listeners.close` does) ends the server without
    waiting for its next tick: here a tick an hour away."""
    monkeypatch.setattr(embedded, "TICK_S", 3600.0)
    ticks = counted_ticks(monkeypatch)
    server, task = _started(socket.create_server(("127.0.0.1", 0)))
    assert await until(lambda: ticks == [0], timeout_s=10)
    assert not server.should_exit
    server.should_exit = True
    assert server.should_exit
    await asyncio.wait_for(task, 10)
    assert ticks == [0, 10]
