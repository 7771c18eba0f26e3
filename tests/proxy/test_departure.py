"""A request's client leaving, as llmd's protocol tells it (`Departure`): `on_gone` is called
when the connection is lost mid-request, with no task of its own, and not once the response
has completed. uvicorn with llmd's protocol in this test's loop, a raw socket as the client."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from llmd.config import ServerConfig
from llmd.daemon.listeners import embedded_server
from llmd.embedded import EmbeddedServer
from llmd.proxy.chunked import CYCLE_KEY
from llmd.proxy.departure import Departure
from llmd.proxy.protocol import bounded_protocol
from tests.support.waiting import until

REQUEST = b"POST / HTTP/1.1\r\nhost: t\r\ncontent-length: 2\r\n\r\n{}"


class App:
    """Reads the body, watches for its client leaving (`gone`), answers when `answer` is set."""

    def __init__(self) -> None:
        self.gone = asyncio.Event()
        self.answer = asyncio.Event()
        self.watching = asyncio.Event()
        self.by_protocol: bool | None = None
        self.watcher: object = "unset"
        self.tasks_before = self.tasks_after = 0
        self.more_body: list[bool] = []  # each request's cycle's `more_body` as the app starts

    async def __call__(self, scope: Any, receive: Callable[..., Any], send: Any) -> None:
        self.more_body.append(scope[CYCLE_KEY].more_body)
        while (await receive()).get("more_body"):
            pass
        departure = Departure(receive, scope.get(CYCLE_KEY))
        self.by_protocol = departure.by_protocol
        self.tasks_before = len(asyncio.all_tasks())
        self.watcher = departure.watch(self.gone.set)
        self.tasks_after = len(asyncio.all_tasks())
        self.watching.set()
        try:
            await asyncio.wait(
                [
                    asyncio.ensure_future(self.gone.wait()),
                    asyncio.ensure_future(self.answer.wait()),
                ],
                return_when=asyncio.FIRST_COMPLETED,
            )
            if self.answer.is_set():
                await send({"type": "http.response.start", "status": 200, "headers": []})
                await send({"type": "http.response.body", "body": b"ok"})
        finally:
            departure.stop()


@pytest.fixture
async def served() -> AsyncIterator[tuple[App, int, EmbeddedServer]]:
    app = App()
    sock = socket.create_server(("127.0.0.1", 0))
    server = embedded_server(app, "off", bounded_protocol(ServerConfig))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    assert await until(lambda: server.started, timeout_s=10)
    yield app, sock.getsockname()[1], server
    server.should_exit = True
    await asyncio.wait_for(task, 10)


async def test_a_client_that_hangs_up_is_told_by_the_protocol_without_a_task(
    served: tuple[App, int, EmbeddedServer],
) -> None:
    """The client closes mid-request: `on_gone` is called (within a second), and watching
    started no task."""
    app, port, _ = served
    _reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(REQUEST)
    await asyncio.wait_for(app.watching.wait(), 10)
    writer.close()
    await asyncio.wait_for(app.gone.wait(), 1)
    assert app.by_protocol is True and app.watcher is None
    assert app.tasks_after == app.tasks_before


async def test_a_client_that_leaves_after_its_answer_is_not_gone(
    served: tuple[App, int, EmbeddedServer],
) -> None:
    """The response completes, then the client closes: `on_gone` is never called."""
    app, port, server = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(REQUEST)
    await asyncio.wait_for(app.watching.wait(), 10)
    app.answer.set()
    assert b"ok" in await asyncio.wait_for(reader.readuntil(b"0\r\n\r\n"), 10)
    writer.close()
    assert await until(lambda: not server.server_state.connections, timeout_s=5)
    assert not app.gone.is_set()


async def test_a_body_sent_with_its_head_is_whole_when_the_app_starts(
    served: tuple[App, int, EmbeddedServer],
) -> None:
    """llmd's protocol has parsed the end of a body that came with its head by the time the
    app runs (the cycle's `more_body` is False: the relay reads it without a timer,
    `read_body(whole=True)`); a body still to come leaves it True."""
    app, port, _ = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(REQUEST)
    await asyncio.wait_for(app.watching.wait(), 10)
    app.answer.set()
    await asyncio.wait_for(reader.readuntil(b"0\r\n\r\n"), 10)
    app.watching.clear()
    head, _, body = REQUEST.partition(b"\r\n\r\n")
    writer.write(head + b"\r\n\r\n")
    assert await until(lambda: len(app.more_body) == 2, timeout_s=10)
    writer.write(body)
    await asyncio.wait_for(app.watching.wait(), 10)
    assert app.more_body == [False, True]
    writer.close()
