"""A fixed-length answer goes out in one write, its head with its body (llmd/proxy/heldhead.py);
a stream's head goes out at its start, before any of its body. uvicorn with llmd's protocol in
this test's loop, a raw socket as the client, the writes to each connection's transport counted."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest

from llmd.config import ServerConfig
from llmd.daemon.listeners import embedded_server
from llmd.embedded import EmbeddedServer
from llmd.proxy import protocol
from llmd.proxy.heldhead import JOIN_MAX_BYTES
from llmd.proxy.teardown import ClosingTransport
from tests.support.waiting import until

BODY = b'{"id":"cmpl-1","choices":[]}'
LARGE = b"x" * (JOIN_MAX_BYTES + 1)  # past it, the body is not copied after its head


class Served:
    """The server's port; `writes`, each transport write (bytes) in order; `go`, set to let
    the streaming route send its body."""

    def __init__(self, port: int, writes: list[bytes]) -> None:
        self.port = port
        self.writes = writes
        self.go = asyncio.Event()


@pytest.fixture
async def served(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Served]:
    writes: list[bytes] = []

    class Counted(ClosingTransport):
        def __init__(self, transport: asyncio.Transport, on_close: Any) -> None:
            super().__init__(transport, on_close)
            real = self.write

            def write(data: bytes) -> None:
                writes.append(bytes(data))
                real(data)

            self.write = write  # type: ignore[method-assign]

    monkeypatch.setattr(protocol, "ClosingTransport", Counted)
    served = Served(0, writes)

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        while (await receive()).get("more_body"):
            pass
        if scope["path"] == "/stream":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await served.go.wait()
            await send({"type": "http.response.body", "body": b"data: 1\n\n", "more_body": True})
            await send({"type": "http.response.body", "body": b""})
            return
        body = LARGE if scope["path"] == "/large" else BODY
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        if scope["path"] == "/broken":
            raise RuntimeError("the app failed after its start")
        await send({"type": "http.response.body", "body": body})

    config = ServerConfig()
    sock = socket.create_server(("127.0.0.1", 0))
    server: EmbeddedServer = embedded_server(app, "off", protocol.bounded_protocol(lambda: config))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    assert await until(lambda: server.started, timeout_s=10)
    served.port = sock.getsockname()[1]
    yield served
    server.should_exit = True
    await asyncio.wait_for(task, 10)


def request(method: bytes, path: bytes) -> bytes:
    return method + b" " + path + b" HTTP/1.1\r\nhost: t\r\ncontent-length: 0\r\n\r\n"


async def test_a_fixed_length_answer_is_one_write(served: Served) -> None:
    """Two answers with a Content-Length on one connection: one write each, head and body."""
    reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
    for _ in range(2):
        writer.write(request(b"POST", b"/"))
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        assert head.startswith(b"HTTP/1.1 200")
        assert await asyncio.wait_for(reader.readexactly(len(BODY)), 10) == BODY
    assert len(served.writes) == 2
    assert all(w.startswith(b"HTTP/1.1 200") and w.endswith(BODY) for w in served.writes)
    writer.close()
    await writer.wait_closed()


async def test_a_large_body_goes_after_its_head_uncopied(served: Served) -> None:
    """A body past JOIN_MAX_BYTES is written as it came, after its head written alone."""
    reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
    writer.write(request(b"POST", b"/large"))
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    assert head.startswith(b"HTTP/1.1 200")
    assert await asyncio.wait_for(reader.readexactly(len(LARGE)), 10) == LARGE
    assert [w.startswith(b"HTTP/1.1 200") for w in served.writes] == [True, False]
    assert served.writes[0] == head and served.writes[1] == LARGE
    writer.close()
    await writer.wait_closed()


async def test_a_streams_head_goes_at_its_start(served: Served) -> None:
    """A chunked answer's head reaches the client while its body is still to come."""
    reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
    writer.write(request(b"POST", b"/stream"))
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    assert b"transfer-encoding: chunked" in head
    served.go.set()
    assert await asyncio.wait_for(reader.readuntil(b"0\r\n\r\n"), 10) == (
        b"9\r\ndata: 1\n\n\r\n0\r\n\r\n"
    )
    writer.close()
    await writer.wait_closed()


async def test_a_head_request_is_answered(served: Served) -> None:
    """A HEAD request's answer (a Content-Length, no body) is written, and the connection
    serves the next request."""
    reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
    writer.write(request(b"HEAD", b"/"))
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    assert head.startswith(b"HTTP/1.1 200") and b"content-length: %d" % len(BODY) in head
    writer.write(request(b"POST", b"/"))
    assert (await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)).startswith(b"HTTP/1.1 200")
    assert await asyncio.wait_for(reader.readexactly(len(BODY)), 10) == BODY
    writer.close()
    await writer.wait_closed()


async def test_an_answer_that_fails_after_its_start_still_sends_its_head(
    served: Served,
) -> None:
    """An app that raises after a fixed-length start: the client gets the head, then the
    connection closes (as when uvicorn wrote the head at the start)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
    writer.write(request(b"POST", b"/broken"))
    received = await asyncio.wait_for(reader.read(), 10)  # to the server's close
    assert received.startswith(b"HTTP/1.1 200") and received.endswith(b"\r\n\r\n")
    writer.close()
    await writer.wait_closed()
