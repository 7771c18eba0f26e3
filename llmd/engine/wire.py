"""llmd's HTTP/1.1 client to backends: the pool of kept-alive connections to one backend
(llmd/engine/connection.py), the relay's POST through it, and the daemon's side calls
(probes, scrapes, `/tokenize`, warm-up), each answer read whole.

llmd's own client, in place of aiohttp's on the hot path (aiohttp's per-chunk bookkeeping was
29 % of llmd's samples per streamed token at the ceiling, docs/bench/ceiling.md). The request
goes out in one `transport.write`; a connection whose answer was read to its end comes back to
its `Pool` (kept alive). `Pool.fetch` is the side calls' form: one request, its whole (small)
answer, within a total timeout.
"""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from llmd.engine.connection import ConnectFailed, Connection, ConnectionLost, Reply

# How long a connect may take (aiohttp's `sock_connect`, as the relay had).
CONNECT_TIMEOUT_S = 10.0
# Methods whose request may be sent again after its connection was lost unanswered: the
# idempotent ones (RFC 9110 9.2.2; aiohttp retries these alone, RFC 9112 9.3.1.1).
IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"})

log = structlog.get_logger("llmd.proxy")


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
        self.idle: list[Connection] = []
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

    def _idle_connection(self) -> Connection | None:
        now = asyncio.get_running_loop().time()
        while self.idle:
            connection = self.idle.pop()  # the most recently used: the others may idle out
            fresh = now - connection.idle_since <= self.keepalive_s
            usable = fresh and not (connection.closed or _closing(connection.transport))
            if usable and not connection.peer_closed():
                return connection
            connection.abort()
        return None

    async def connect(self) -> Connection:
        """A new connection. Raises ConnectFailed."""
        loop = asyncio.get_running_loop()
        connection = Connection(self)
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

    def release(self, connection: Connection) -> None:
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

    def forget(self, connection: Connection) -> None:
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
