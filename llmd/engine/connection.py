"""One HTTP/1.1 connection to a backend (llmd's own `asyncio.Protocol`, one request at a time)
and what it hands back: the answer, read chunk by chunk (`Reply`), or the error of a connection
that failed (`WireError` and its two kinds).

The answer is parsed by httptools (the parser uvicorn uses); each body chunk is handed to the
reader as it arrives (`readany`, or `wait`'s sink, called in the protocol's callback), and
reading from the backend pauses while `CHUNKS_HIGH` bytes wait unread (the client behind is
slow). A connection whose answer was read to its end goes back to its owner (the pool,
llmd/engine/wire.py); one left mid-answer is closed, which is what makes vLLM abort the sequence.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from typing import Protocol, cast

import httptools

# Bytes of answer waiting unread after which the backend's socket is no longer read (resumed
# when the reader takes them): aiohttp's StreamReader's limit (2**16), which the relay had.
CHUNKS_HIGH = 2**16


class WireError(ConnectionError):
    """A backend connection failed; `sent` is whether the request may have reached it."""

    sent = True


class ConnectFailed(WireError):
    """No connection could be made (refused, no socket, TLS refused, connect timeout):
    nothing was sent."""

    sent = False


class ConnectionLost(WireError):
    """The connection ended (closed, reset, or an answer that does not parse) before the
    answer did. `answered`: whether the answer's head had come; `sent` is False only when
    the request's write itself failed (the backend had closed: nothing reached it)."""

    def __init__(self, message: str, *, answered: bool) -> None:
        super().__init__(message)
        self.answered = answered


class Reply:
    """One backend answer: `status`, `headers` (names lower-cased), and its body by `readany`
    (whatever has arrived, b"" at its end) or `read` (all of it). `close()` ends it: an
    answer not read to its end closes its connection. Raises ConnectionLost from either read
    when the connection ends mid-body."""

    def __init__(
        self,
        connection: Connection,
        status: int,
        headers: dict[str, str],
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self._connection: Connection | None = connection
        self._loop = loop
        self.status = status
        self.headers = headers
        self.chunks: list[bytes] = []
        self.buffered = 0
        self.ended = False
        self.error: ConnectionLost | None = None
        self.waiter: asyncio.Future[None] | None = None
        # Set while a reader takes each chunk in the connection's callback (`wait`).
        self.sink: Callable[[bytes], bool] | None = None

    @property
    def content(self) -> Reply:
        """The body's reader (this answer: `readany`), as aiohttp's `response.content`."""
        return self

    def wake(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    async def readany(self) -> bytes:
        """The body that has arrived since the last read, waiting for some when none has;
        b"" once the body has ended."""
        while not self.chunks:
            if self.error is not None:
                raise self.error
            if self.ended:
                return b""
            self.waiter = waiter = self._loop.create_future()
            try:
                await waiter
            finally:
                self.waiter = None
        chunks = self.chunks
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        self.chunks = []
        self.buffered = 0
        connection = self._connection
        if connection is not None and connection.paused:
            connection.drained()
        return data

    async def wait(self, sink: Callable[[bytes], bool]) -> None:
        """Hand each chunk to `sink` as it is parsed, in the connection's callback (no task
        switch per chunk), until the body ends or fails, or `sink` returns False (it has taken
        that chunk but can take no more now: the chunks after it wait for `readany`). Returns
        at once when chunks are waiting; raises nothing (`readany` then says how it ended)."""
        connection = self._connection
        if connection is not None and connection.paused:
            connection.drained()
        if self.chunks or self.ended or self.error is not None:
            return
        self.sink = sink
        self.waiter = waiter = self._loop.create_future()
        try:
            await waiter
        finally:
            self.waiter = self.sink = None

    async def read(self) -> bytes:
        """The whole body (waits for its end)."""
        parts = []
        while part := await self.readany():
            parts.append(part)
        return b"".join(parts)

    def finished(self) -> None:
        """The body ended (called by the connection, which is then free)."""
        self.ended = True
        self._connection = None
        self.wake()

    def close(self) -> None:
        """End the answer: before its end, its connection is closed (the backend aborts the
        request); after it, nothing to do."""
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.abort()
        self.ended = True


class Owner(Protocol):
    """Who keeps a connection between requests (the pool, llmd/engine/wire.py)."""

    def release(self, connection: Connection) -> None:
        """`connection`'s answer was read to its end: it may carry the next request."""

    def forget(self, connection: Connection) -> None:
        """`connection` closed."""


class Connection(asyncio.Protocol):
    """One kept-alive connection: one request at a time, its answer parsed as it comes;
    `pool` is told when it is free again (`release`) and when it closed (`forget`)."""

    def __init__(self, pool: Owner) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.head: asyncio.Future[Reply] | None = None
        self.answer: Reply | None = None
        self.headers: dict[str, str] = {}
        self.paused = False
        self.used = 0  # requests sent on it
        self.idle_since = 0.0
        self.closed = False
        self.sock: socket.socket | None = None  # a TCP connection's socket (`peer_closed`)
        # The body parsed from the read being parsed, for the reader's sink (`_hand_on`).
        self.parsed: list[bytes] = []

    # -- the pool's side ---------------------------------------------------------------------

    async def request(self, data: bytes) -> Reply:
        """Send `data` (a whole request) and wait for the answer's head. Raises
        ConnectionLost (`sent` False when the write failed at once: on a Unix socket whose
        peer had closed it, the kernel refuses it, EPIPE); closes the connection when
        cancelled before the head."""
        loop = asyncio.get_running_loop()
        self.head = loop.create_future()
        self.headers = {}
        self.used += 1
        transport = cast(asyncio.Transport, self.transport)
        transport.write(data)
        written = not transport.is_closing()  # a failed send closes the transport at once
        try:
            return await self.head
        except ConnectionLost as lost:
            lost.sent = written
            self.abort()
            raise
        except BaseException:
            self.abort()
            raise

    def peer_closed(self) -> bool:
        """Whether a TCP backend may have ended this idle connection: anything on its socket
        that the loop has not read yet (its end, a reset, or bytes: TLS's close_notify, or
        bytes nobody asked for), looked at by a peek, no read. False for a Unix socket (its
        write fails instead)."""
        if self.sock is None:
            return False
        try:
            self.sock.recv(1, socket.MSG_PEEK)
        except BlockingIOError:
            return False  # nothing waiting: open and quiet
        except OSError:
            pass  # reset, or the socket is closed
        return True

    def drained(self) -> None:
        """The reader took what was waiting: read the backend's socket again."""
        if self.paused and self.transport is not None:
            self.paused = False
            self.transport.resume_reading()

    def abort(self) -> None:
        """Close now (what is unsent is dropped), never to be reused."""
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    # -- asyncio.Protocol --------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        if self.head is None and self.answer is None:
            self.abort()  # bytes nobody asked for: the connection cannot be trusted
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._hand_on(self.answer)  # what parsed before the fault, first
            self._lost(ConnectionLost(f"the answer does not parse: {exc}", answered=False))
            self.abort()
            return
        self._hand_on(self.answer)

    def eof_received(self) -> bool | None:
        return False  # close

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.pool.forget(self)
        answer = self.answer
        if answer is not None and self._close_delimited():
            self.answer = None
            answer.finished()  # no length, no chunks: the body ends with the connection
            return
        reason = f": {type(exc).__name__}: {exc}" if exc else ""
        self._lost(ConnectionLost(f"the backend closed the connection{reason}", answered=False))

    # -- httptools' callbacks ----------------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        head = self.head
        if head is None:
            return
        status = self.parser.get_status_code()
        if status < 200:  # an interim answer (1xx): the final one follows
            self.headers = {}
            return
        self.head = None
        answer = self.answer = Reply(self, status, self.headers, head.get_loop())
        if not head.done():
            head.set_result(answer)

    def on_body(self, body: bytes) -> None:
        answer = self.answer
        if answer is None:
            return
        if answer.sink is not None:
            self.parsed.append(body)  # handed on at the read's end, with the rest it holds
            return
        answer.chunks.append(body)
        answer.buffered += len(body)
        if answer.buffered >= CHUNKS_HIGH and not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()
        waiter = answer.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def on_message_complete(self) -> None:
        answer, self.answer = self.answer, None
        if answer is None:
            return  # an interim answer's end
        self._hand_on(answer)
        keep = self.parser.should_keep_alive() and not self.closed
        answer.finished()
        self.drained()  # paused for this answer's reader: not for the next request
        if keep:
            self.pool.release(self)
        else:
            self.abort()

    def _hand_on(self, answer: Reply | None) -> None:
        """Give `answer`'s reader (its sink) the body parsed from one read as one chunk:
        however many HTTP chunks a read holds (a relay that falls behind reads several events
        at once), one read, one send to the client. Nothing waits: this runs as each read's
        parse ends."""
        parsed = self.parsed
        if not parsed:
            return
        body = parsed[0] if len(parsed) == 1 else b"".join(parsed)
        parsed.clear()
        if answer is None:
            return
        sink = answer.sink
        if sink is not None and sink(body):
            return
        if sink is None:  # not expected: the sink is set while the body is parsed for it
            answer.chunks.append(body)
            answer.buffered += len(body)
        answer.sink = None  # the reader is busy with this one: the next ones wait
        answer.wake()

    # -- ends --------------------------------------------------------------------------------

    def _close_delimited(self) -> bool:
        headers = self.headers
        return "content-length" not in headers and "transfer-encoding" not in headers

    def _lost(self, error: ConnectionLost) -> None:
        head, self.head = self.head, None
        answer, self.answer = self.answer, None
        if head is not None and not head.done():
            head.set_exception(error)
        if answer is not None:
            answer.error = ConnectionLost(str(error), answered=True)
            answer.wake()
