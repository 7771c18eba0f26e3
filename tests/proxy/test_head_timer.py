"""The request head's deadline on a kept-alive connection (llmd/proxy/protocol.py): each head
is due `server.read_timeout_s` after its first byte, checked by one timer per connection, not
one armed and cancelled per request. uvicorn with llmd's protocol in this test's loop, a raw
socket as the client."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from llmd.config import ServerConfig
from llmd.daemon.listeners import embedded_server
from llmd.embedded import EmbeddedServer
from llmd.proxy.deadline import Deadline
from llmd.proxy.protocol import BoundedHttpToolsProtocol, bounded_protocol
from tests.support.waiting import until

TIMEOUT_S = 0.5
# The head's timers: its `Deadline`'s, by name, and the protocol's own callback that each
# request armed before (the old code: a test of it fails).
HEAD_TIMERS = ("head", "_head_timed_out")
REQUEST = b"POST / HTTP/1.1\r\nhost: t\r\ncontent-length: 2\r\n\r\n{}"


async def app(scope: Any, receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    headers = [(b"content-length", b"2")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": b"ok"})


@contextlib.asynccontextmanager
async def timers_counted(
    monkeypatch: pytest.MonkeyPatch, names: tuple[str, ...], config: ServerConfig
) -> AsyncIterator[tuple[int, list[str]]]:
    """uvicorn with llmd's protocol and `config` serving `app` in this loop: its port, and the
    name of each timer named in `names` that llmd's protocol armed (a `Deadline`'s name, or the
    name of a protocol method armed as a callback)."""
    armed: list[str] = []
    loop = asyncio.get_running_loop()
    for name in ("call_at", "call_later"):
        real = getattr(loop, name)

        def arm(when: float, callback: Any, *args: Any, real: Any = real, **kw: Any) -> Any:
            owner = getattr(callback, "__self__", None)
            if isinstance(owner, Deadline) and owner.name in names:
                armed.append(owner.name)
            elif isinstance(owner, BoundedHttpToolsProtocol) and callback.__name__ in names:
                armed.append(callback.__name__)
            return real(when, callback, *args, **kw)

        monkeypatch.setattr(loop, name, arm)
    sock = socket.create_server(("127.0.0.1", 0))
    server: EmbeddedServer = embedded_server(app, "off", bounded_protocol(lambda: config))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    assert await until(lambda: server.started, timeout_s=10)
    yield sock.getsockname()[1], armed
    server.should_exit = True
    await asyncio.wait_for(task, 10)


@pytest.fixture
async def served(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[tuple[int, list[str]]]:
    """The server's port, and the name of each head timer llmd's protocol armed."""
    config = ServerConfig(read_timeout_s=TIMEOUT_S)
    async with timers_counted(monkeypatch, HEAD_TIMERS, config) as served:
        yield served


async def answered(reader: asyncio.StreamReader) -> bytes:
    """One answer's status line (its headers and 2-byte body read)."""
    status = await asyncio.wait_for(reader.readline(), 10)
    await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    await asyncio.wait_for(reader.readexactly(2), 10)
    return status


async def test_kept_alive_requests_share_one_head_timer(served: tuple[int, list[str]]) -> None:
    """Five requests in a row on one connection arm llmd's head timer once (uvicorn's own
    keep-alive timer aside), where each request armed and cancelled one."""
    port, armed = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    for _ in range(5):
        writer.write(REQUEST)
        assert (await answered(reader)).startswith(b"HTTP/1.1 200")
    assert len(armed) == 1
    writer.close()
    await writer.wait_closed()


async def test_a_later_head_that_stalls_is_408_at_its_own_deadline(
    served: tuple[int, list[str]],
) -> None:
    """A request served, then, past the first head's deadline, a second head sent in part:
    408 about `read_timeout_s` after its first byte, not sooner (the timer moved on to it)."""
    port, _ = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(REQUEST)
    assert (await answered(reader)).startswith(b"HTTP/1.1 200")
    await asyncio.sleep(TIMEOUT_S * 0.8)
    began = time.monotonic()
    writer.write(REQUEST[:10])
    status = await asyncio.wait_for(reader.readline(), 10)
    waited = time.monotonic() - began
    assert status.startswith(b"HTTP/1.1 408"), status
    assert TIMEOUT_S * 0.9 <= waited <= TIMEOUT_S + 1.0, waited
    writer.close()
    await writer.wait_closed()
