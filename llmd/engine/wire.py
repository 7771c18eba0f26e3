"""llmd's HTTP/1.1 client to backends: the relay's POST, its answer handed on chunk by chunk,
and the daemon's side calls (probes, scrapes, `/tokenize`, warm-up), each answer read whole.

llmd's own `asyncio.Protocol` on the engine's socket, in place of aiohttp's client on the hot
path (aiohttp's per-chunk bookkeeping was 29 % of llmd's samples per streamed token at the
ceiling, docs/bench/ceiling.md). The request goes out in one `transport.write`; the answer is
parsed by httptools (the parser uvicorn uses); each body chunk is handed to the reader as it
arrives (`readany`, or `wait`'s sink, called in the protocol's callback), and reading from the
backend pauses while `CHUNKS_HIGH` bytes wait unread (the client behind is slow). A connection
whose answer was read to its end goes back to its `Pool` (kept alive); one left mid-answer is
closed, which is what makes vLLM abort the sequence. `Pool.fetch` is the side calls' form: one
request, its whole (small) answer, within a total timeout.
"""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import httptools
import structlog

# Bytes of answer waiting unread after which the backend's socket is no longer read (resumed
# when the reader takes them): aiohttp's StreamReader's limit (2**16), which the relay had.
CHUNKS_HIGH = 2**16
# How long a connect may take (aiohttp's `sock_connect`, as the relay had).
CONNECT_TIMEOUT_S = 10.0
# Methods whose request may be sent again after its connection was lost unanswered: the
# idempotent ones (RFC 9110 9.2.2; aiohttp retries these alone, RFC 9112 9.3.1.1).
IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"})

log = structlog.get_logger("llmd.proxy")


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


@dataclass(frozen=True, slots=True)
class Answer:
    """A whole answer (`Pool.fetch`): `status`, `headers` (names lower-cased), `body`."""

    status: int
    headers: dict[str, str]
    body: bytes

    def text(self) -> str:
        """The body as UTF-8 (an undecodable byte becomes U+FFFD)."""
        return self.body.decode("utf-8", errors="replace")

    def json(self) -> Any:
        """The body as JSON, whatever its content type. Raises ValueError when it is none."""
        return json.loads(self.body)


class Reply:
    """One backend answer: `status`, `headers` (names lower-cased), and its body by `readany`
    (whatever has arrived, b"" at its end) or `read` (all of it). `close()` ends it: an
    answer not read to its end closes its connection. Raises ConnectionLost from either read
    when the connection ends mid-body."""

    def __init__(
        self,
        connection: _Connection,
        status: int,
        headers: dict[str, str],
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self._connection: _Connection | None = connection
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


class _Connection(asyncio.Protocol):
    """One kept-alive connection: one request at a time, its answer parsed as it comes."""

    def __init__(self, pool: Pool) -> None:
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


def _closing(transport: asyncio.Transport | None) -> bool:
    return transport is None or transport.is_closing()


class Pool:
    """Kept-alive connections to one backend: a Unix socket (`socket_path`) or `host`:`port`
    over TCP, TLS when `tls` (verified by `ssl_context`, the system's CAs by default, as
    aiohttp verified). A connection idle more than `keepalive_s` is closed (one timer per
    pool sweeps them, as aiohttp's connector did): vLLM's uvicorn closes one idle for 5 s."""

    def __init__(
        self,
        *,
        socket_path: Path | None = None,
        host: str = "engine",
        port: int | None = None,
        tls: bool = False,
        keepalive_s: float = 2.0,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.socket_path = socket_path
        self.host, self.port, self.tls = host, port, tls
        self.keepalive_s = keepalive_s
        self.idle: list[_Connection] = []
        default = 443 if tls else 80
        self.host_header = host if port in (None, default) else f"{host}:{port}"
        self._ssl = ssl_context
        self._sweep: asyncio.TimerHandle | None = None

    async def post(self, path: str, body: bytes, headers: Mapping[str, str]) -> Reply:
        """POST `body` to `path` with `headers` (Host and Content-Length are added) and
        return the answer once its head has come (`request`'s resend rule). Raises
        ConnectFailed (nothing sent), ConnectionLost."""
        return await self.request("POST", path, body, headers)

    async def request(
        self, method: str, path: str, body: bytes = b"", headers: Mapping[str, str] | None = None
    ) -> Reply:
        """Send `method` `path` with `headers` (Host added; Content-Length unless a GET or
        HEAD without a body) and return the answer once its head has come.

        A request lost before any answer on a kept-alive connection is sent once more on a
        new connection only when the loss proves the backend did not take it, or `method` is
        idempotent (`IDEMPOTENT`): Go's net/http transport's rule (`shouldRetryRequest`:
        a non-replayable request is retried only when nothing was written). No answer yet
        does not prove it: a non-streamed generation's head comes at its end, and one the
        backend took and then lost would run twice (an upstream would bill it twice). Proof
        is an end before the write: a TCP connection's end is looked for on the socket
        before writing (`peer_closed`; the connection is then dropped, nothing sent, like
        Go's `errServerClosedIdle`); on a Unix socket a write after the peer's close fails
        at once (EPIPE, `ConnectionLost.sent` False). aiohttp resends only idempotent
        methods; llmd once resent any (that defect: a POST taken and lost ran twice). When
        the new connect fails, the first loss is raised. Raises ConnectFailed (nothing
        sent), ConnectionLost."""
        lines = [f"{method} {path} HTTP/1.1\r\nhost: {self.host_header}\r\n"]
        if headers:
            lines.extend(f"{name}: {value}\r\n" for name, value in headers.items())
        if body or method not in ("GET", "HEAD"):
            lines.append(f"content-length: {len(body)}\r\n")
        lines.append("\r\n")
        data = "".join(lines).encode("latin-1") + body
        connection = self._idle_connection()
        if connection is None:
            return await (await self.connect()).request(data)
        try:
            return await connection.request(data)
        except ConnectionLost as lost:
            if lost.answered or (lost.sent and method not in IDEMPOTENT):
                raise
            log.info("engine_connection_renewed", path=path, error=str(lost))
            try:
                fresh = await self.connect()
            except ConnectFailed:
                raise lost from None
            return await fresh.request(data)

    async def fetch(
        self,
        method: str,
        path: str,
        body: bytes = b"",
        headers: Mapping[str, str] | None = None,
        *,
        timeout_s: float,
    ) -> Answer:
        """`request`, its answer read whole, all within `timeout_s` seconds (connect
        included); the connection is kept for the next request when the answer ended, closed
        otherwise. For small answers (probes, scrapes, counts). Raises ConnectFailed,
        ConnectionLost, TimeoutError."""
        async with asyncio.timeout(timeout_s):
            reply = await self.request(method, path, body, headers)
            try:
                content = await reply.read()
            finally:
                reply.close()
        return Answer(reply.status, reply.headers, content)

    def _idle_connection(self) -> _Connection | None:
        now = asyncio.get_running_loop().time()
        while self.idle:
            connection = self.idle.pop()  # the most recently used: the others may idle out
            fresh = now - connection.idle_since <= self.keepalive_s
            usable = fresh and not (connection.closed or _closing(connection.transport))
            if usable and not connection.peer_closed():
                return connection
            connection.abort()
        return None

    async def connect(self) -> _Connection:
        """A new connection. Raises ConnectFailed."""
        loop = asyncio.get_running_loop()
        connection = _Connection(self)
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT_S):
                if self.socket_path is not None:
                    await loop.create_unix_connection(lambda: connection, str(self.socket_path))
                else:
                    connection.sock = sock = await self._tcp_socket(loop)
                    try:
                        await loop.create_connection(
                            lambda: connection,
                            sock=sock,
                            ssl=self._context() if self.tls else None,
                            server_hostname=self.host if self.tls else None,
                        )
                    except BaseException:
                        sock.close()
                        raise
        except (OSError, TimeoutError) as exc:
            raise ConnectFailed(f"{type(exc).__name__}: {exc}".rstrip(": ")) from exc
        return connection

    async def _tcp_socket(self, loop: asyncio.AbstractEventLoop) -> socket.socket:
        """A socket connected to `host`:`port`, each resolved address tried in turn (as
        `loop.create_connection` does); kept so `peer_closed` can peek at it. Raises
        OSError (the last address's)."""
        port = self.port or (443 if self.tls else 80)
        addresses = await loop.getaddrinfo(self.host, port, type=socket.SOCK_STREAM)
        error: OSError = OSError(f"{self.host} resolves to no address")
        for family, kind, proto, _, address in addresses:
            sock = socket.socket(family, kind, proto)
            try:
                sock.setblocking(False)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                await loop.sock_connect(sock, address)
            except OSError as exc:
                sock.close()
                error = exc
                continue
            except BaseException:
                sock.close()
                raise
            return sock
        raise error

    def _context(self) -> ssl.SSLContext:
        if self._ssl is None:
            self._ssl = ssl.create_default_context()  # verified, as aiohttp's default
        return self._ssl

    def release(self, connection: _Connection) -> None:
        """`connection`'s answer was read to its end: keep it for the next request."""
        loop = asyncio.get_running_loop()
        connection.idle_since = now = loop.time()
        self._close_expired(now)
        self.idle.append(connection)
        if self._sweep is None:
            self._sweep = loop.call_later(self.keepalive_s, self._expire)

    def _expire(self) -> None:
        """The pool's timer: close the connections idle past `keepalive_s`, and look again
        when the oldest left will be."""
        self._sweep = None
        loop = asyncio.get_running_loop()
        now = loop.time()
        self._close_expired(now)
        if self.idle:
            due = self.idle[0].idle_since + self.keepalive_s - now
            self._sweep = loop.call_later(due, self._expire)

    def _close_expired(self, now: float) -> None:
        """Close the connections idle past `keepalive_s` at `now`: not to be used again (the
        list is oldest first)."""
        idle = self.idle
        while idle and now - idle[0].idle_since > self.keepalive_s:
            idle.pop(0).abort()

    def forget(self, connection: _Connection) -> None:
        """`connection` closed."""
        if connection in self.idle:
            self.idle.remove(connection)

    def close(self) -> None:
        """Close the idle connections (answers being read keep theirs until closed)."""
        idle, self.idle = self.idle, []
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
        for connection in idle:
            connection.abort()
