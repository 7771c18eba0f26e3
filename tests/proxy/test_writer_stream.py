"""The stream's per-chunk path (`ClientWriter.stream`) on a real engine connection: chunks sent
from the connection's callback while the client keeps up, a send that must wait finished in
the relay's task with the chunks after it in order, a failed send raised, a cancel reaching a
waiting send."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from llmd.engine.connection import Reply
from llmd.engine.wire import Pool
from llmd.inflight import Exchange
from llmd.proxy.writer import ClientWriter
from tests.support.waiting import until

EVENTS = [b'data: {"n":%d}\n\n' % n for n in range(6)] + [b"data: [DONE]\n\n"]


@contextlib.asynccontextmanager
async def engine(socket: Path, gate: asyncio.Event | None = None) -> AsyncIterator[None]:
    """Streams EVENTS, one HTTP chunk each; with `gate`, each after the gate is set (and
    cleared for the next)."""

    handlers: list[asyncio.Task[Any]] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        handlers.append(asyncio.current_task())  # type: ignore[arg-type]
        with contextlib.suppress(
            ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError
        ):
            await reader.readuntil(b"\r\n\r\n")
            await reader.readexactly(2)
            writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            for event in EVENTS:
                if gate is not None:
                    await gate.wait()
                    gate.clear()
                writer.write(b"%x\r\n%s\r\n" % (len(event), event))
                await writer.drain()
            writer.write(b"0\r\n\r\n")
            await writer.drain()
            await reader.read()  # until the client closes
        writer.close()

    server = await asyncio.start_unix_server(serve, path=str(socket))
    try:
        yield
    finally:
        for handler in handlers:  # one still waiting at the gate ends (not cancelled)
            handler.cancel()
        await asyncio.gather(*handlers)
        server.close()
        await server.wait_closed()


class Client:
    """An ASGI body send: keeps the bodies and the task each was sent from; `hold` makes
    the send of that body (by index) wait for `release`; `fail` raises on that one."""

    def __init__(self, hold: int | None = None, fail: int | None = None) -> None:
        self.bodies: list[bytes] = []
        self.tasks: list[asyncio.Task[Any] | None] = []
        self.hold, self.fail = hold, fail
        self.release = asyncio.Event()
        self.cancelled = self.closed = False
        self.sent = asyncio.Event()
        self.on_hold: Callable[[], None] | None = None

    async def __call__(self, message: Any) -> None:
        index = len(self.bodies) + (1 if self.cancelled else 0)
        if index == self.fail:
            raise OSError("the client's socket failed")
        if index == self.hold:
            if self.on_hold is not None:
                self.on_hold()
            try:
                await self.release.wait()
            except asyncio.CancelledError:
                self.cancelled = True
                raise
            except GeneratorExit:
                self.closed = True
                raise
        self.bodies.append(message["body"])
        self.tasks.append(asyncio.current_task())
        self.sent.set()


async def streamed(socket: Path) -> tuple[Pool, Reply]:
    pool = Pool(socket_path=socket)
    return pool, await pool.post("/v1/completions", b"{}", {})


async def test_chunks_go_out_from_the_connections_callback(tmp_path: Path) -> None:
    """Each chunk that arrives while the client keeps up is sent in the engine connection's
    callback (no task: no task switch per chunk); the exchange ends answered."""
    gate = asyncio.Event()
    async with engine(tmp_path / "e.sock", gate):
        pool, reply = await streamed(tmp_path / "e.sock")
        client = Client()
        exchange = Exchange("r", stream=True)
        writer = ClientWriter(client, exchange)
        task = asyncio.create_task(writer.stream(reply))
        for _ in EVENTS:
            client.sent.clear()
            gate.set()
            assert await until(client.sent.is_set, timeout_s=5)
        await task
        reply.close()
        pool.close()
    assert client.bodies == EVENTS and exchange.answered and exchange.send_since is None
    assert all(sent_from is None for sent_from in client.tasks)


async def let_out(gate: asyncio.Event, count: int) -> None:
    """Let the engine write `count` more events (each once it took the one before)."""
    for _ in range(count):
        gate.set()
        assert await until(lambda: not gate.is_set(), timeout_s=5)


async def test_a_send_that_waits_is_finished_and_the_chunks_after_follow_in_order(
    tmp_path: Path,
) -> None:
    """The client's send of the second chunk waits (its transport is backed up): the stall
    watcher sees it waiting (`send_since`), the chunks after it wait for it; once it goes,
    they follow in order, and the exchange ends answered."""
    gate = asyncio.Event()
    async with engine(tmp_path / "e.sock", gate):
        pool, reply = await streamed(tmp_path / "e.sock")
        client = Client(hold=1)
        exchange = Exchange("r", stream=True)
        task = asyncio.create_task(ClientWriter(client, exchange).stream(reply))
        await let_out(gate, 2)
        assert await until(lambda: exchange.send_since is not None, timeout_s=5)
        await let_out(gate, len(EVENTS) - 2)
        assert await until(lambda: reply.ended, timeout_s=5)
        assert client.bodies == [EVENTS[0]]
        client.release.set()
        await task
        reply.close()
        pool.close()
    assert b"".join(client.bodies) == b"".join(EVENTS) and client.bodies[1] == EVENTS[1]
    assert exchange.answered and exchange.send_since is None


async def test_a_failed_send_is_raised(tmp_path: Path) -> None:
    """A send that raises (the client's socket failed) ends the stream with that error."""
    gate = asyncio.Event()
    async with engine(tmp_path / "e.sock", gate):
        pool, reply = await streamed(tmp_path / "e.sock")
        client = Client(fail=1)
        task = asyncio.create_task(ClientWriter(client, Exchange("r", stream=True)).stream(reply))
        await let_out(gate, 2)
        with pytest.raises(OSError, match="client's socket"):
            await task
        assert client.bodies == [EVENTS[0]]
        reply.close()
        pool.close()


async def test_a_cancel_reaches_a_waiting_send(tmp_path: Path) -> None:
    """The relay cancelled while a send waits: the send is cancelled too, and the stream
    raises CancelledError."""
    gate = asyncio.Event()
    async with engine(tmp_path / "e.sock", gate):
        pool, reply = await streamed(tmp_path / "e.sock")
        client = Client(hold=0)
        exchange = Exchange("r", stream=True)
        task = asyncio.create_task(ClientWriter(client, exchange).stream(reply))
        await let_out(gate, 1)
        assert await until(lambda: exchange.send_since is not None, timeout_s=5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert client.cancelled and client.bodies == []
        reply.close()
        pool.close()


async def test_a_send_left_waiting_by_a_cancel_is_closed(tmp_path: Path) -> None:
    """The relay cancelled in the very turn a send from the connection's callback began to
    wait (before the relay's task could take it over): that send is closed, not left
    suspended."""
    gate = asyncio.Event()
    async with engine(tmp_path / "e.sock", gate):
        pool, reply = await streamed(tmp_path / "e.sock")
        client = Client(hold=1)
        writer = ClientWriter(client, Exchange("r", stream=True))  # kept: the send with it
        task = asyncio.create_task(writer.stream(reply))
        client.on_hold = task.cancel
        await let_out(gate, 2)
        with pytest.raises(asyncio.CancelledError):
            await task
        assert client.closed and client.bodies == [EVENTS[0]]
        reply.close()
        pool.close()
