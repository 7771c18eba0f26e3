"""How a connection ends when llmd answers a request before reading all of it: the answer
says `Connection: close`, then the connection is closed in stages (RFC 9112 §9.6): a
half-close, a bounded read of what still comes, discarded, and the close.

Why close, not read the rest: an answer sent early (401, 413, 415, 429, 503, a refused head)
leaves the body where the client put it. uvicorn 0.55's httptools protocol (as 0.35's) keeps
the connection alive after such an answer and feeds whatever comes to the parser, which drops
the body's bytes (`on_body` once `response_complete`): a declared 900 MB is read to its end,
and a body that stalls holds the connection until `server.keepalive_timeout_s`, each byte
putting off that timer. Go's net/http reads at most 256 KiB of a body its handler left
(`maxPostHandlerReadBytes`) and answers `Connection: close` past that; nginx answers a 413
with `Connection: close`. llmd cannot wait for a body before writing its answer's head
(uvicorn writes it as the app sends it), so whatever of the body is still to come when the
answer starts ends the connection; a request that came whole (its end parsed) keeps it.

Why in stages: a socket closed with bytes unread sends the client a reset, which may destroy
the answer before it is read (Go's `closeWriteAndWait`, golang.org/issue/3595). The FIN goes
after the answer's bytes; then up to `LINGER_BYTES` more are read and dropped, for at most
`LINGER_S` (or `server.read_timeout_s`, if shorter), and the connection is closed at the
client's own close or at whichever bound comes first.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, cast

from uvicorn._types import ASGISendEvent
from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

from llmd.proxy.heldhead import HeldHead

# What llmd reads of a body after answering early: Go's maxPostHandlerReadBytes (net/http
# server.go, "approximately what a typical machine's TCP buffer size is"). A client still
# sending past it gets the reset, its answer read or not.
LINGER_BYTES = 256 * 1024
# How long llmd waits for the client's close after its FIN: nginx's `lingering_timeout`
# default (Go waits 500 ms, reading nothing). Never longer than `server.read_timeout_s`.
LINGER_S = 5.0


class EarlyAnswerCycle(RequestResponseCycle):
    """uvicorn's request-response cycle whose answer, started before the parser has seen the
    end of the request's body, says `Connection: close` and closes the connection once sent
    (uvicorn's `keep_alive`); a fixed-length answer's head goes out with its body, in one
    write (llmd/proxy/heldhead.py). Set as a cycle's class by llmd's protocol. `on_lost`,
    when set (llmd/proxy/departure.py), is called once the connection is lost before the
    response completed."""

    on_lost: Callable[[], None] | None = None

    async def send(self, message: ASGISendEvent) -> None:
        transport = self.transport
        if self.response_started:
            await super().send(message)
            if isinstance(transport, HeldHead):  # the head went with the body's first bytes
                self.transport = transport.transport
            return
        if self.more_body:
            self.keep_alive = False  # the body's rest is unread: its bytes end the connection
        if message["type"] != "http.response.start":
            await super().send(message)  # uvicorn's error for a body before its start
            return
        held = HeldHead(transport)
        self.transport = cast(asyncio.Transport, held)  # the calls uvicorn's send makes
        try:
            await super().send(message)
        finally:
            # A stream's head (or a HEAD request's, or one never written) is not held.
            if self.chunked_encoding is not False or self.scope["method"] == "HEAD":
                self.transport = transport
                held.flush()


class Linger:
    """The last stage of a connection closed with its request unread: started with the
    client's FIN sent after what `transport` holds to send, reading resumed; `received(n)`
    counts bytes read and dropped; `close` ends it (at most `LINGER_BYTES` read, after
    `limit_s` seconds, or when the client closes its side: `transport` closes itself)."""

    def __init__(
        self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop, limit_s: float
    ) -> None:
        self._transport = transport
        self._left = LINGER_BYTES
        transport.write_eof()
        transport.resume_reading()
        self._timer = loop.call_later(limit_s, self.close)

    def received(self, size: int) -> None:
        self._left -= size
        if self._left < 0:
            self.close()

    def close(self) -> None:
        self._timer.cancel()
        self._transport.close()


def linger_s(read_timeout_s: float) -> float:
    """The linger's limit in seconds: `LINGER_S`, or `read_timeout_s` if shorter (0: none)."""
    return min(LINGER_S, read_timeout_s) if read_timeout_s > 0 else LINGER_S


def can_linger(transport: asyncio.Transport) -> bool:
    """Whether `transport` can half-close (TCP; not TLS, which asyncio cannot half-close)."""
    return not transport.is_closing() and transport.can_write_eof()


class ClosingTransport:
    """`transport` as uvicorn's protocol and cycles use it, its `close()` handed to `on_close`
    (which closes it, or starts a linger). Every other attribute is the transport's; those
    used per request or chunk are its bound methods themselves (nothing added on the relay's
    path). `closing()` makes `is_closing()` answer True from then on (a linger: uvicorn then
    takes no further request on the connection and arms no keep-alive timer)."""

    def __init__(self, transport: asyncio.Transport, on_close: Callable[[], None]) -> None:
        self._transport = transport
        self._on_close = on_close
        self.write = transport.write
        self.is_closing = transport.is_closing
        self.pause_reading = transport.pause_reading
        self.resume_reading = transport.resume_reading
        self.get_extra_info = transport.get_extra_info
        self.get_write_buffer_size = transport.get_write_buffer_size

    def close(self) -> None:
        self._on_close()

    def closing(self) -> None:
        self.is_closing = _closing

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


def _closing() -> bool:
    return True
