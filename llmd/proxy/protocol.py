"""The HTTP/1.1 protocol llmd serves with: uvicorn's httptools protocol, the request head bounded.

Why: uvicorn 0.54 bounds the request head only for h11 (`h11_max_incomplete_event_size`); with
httptools, the parser llmd serves with (the relay's costs were measured on it), a head of any
size is read and kept, and a 64 MB header stalled other clients for seconds. This subclass,
passed to uvicorn as its `http` protocol class, answers without reading on:
- a head over `server.max_header_bytes` (its bytes counted as they arrive) or
  `server.max_headers` (its headers counted as they are parsed): 431 (RFC 6585 §5);
- a request the parser refuses: a JSON 400 (OpenAI-shaped; Anthropic-shaped on a Messages
  path) in place of uvicorn's plain-text one;
- a head not arrived whole `server.read_timeout_s` after the connection opened (or after the
  request's first byte, on a kept-alive connection): 408 `request_timeout`; a connection that
  sent nothing by then is closed without an answer (nginx's `client_header_timeout` does the
  same);
- a `Transfer-Encoding` that is anything but `chunked` alone (`gzip, chunked`, say: llmd decodes
  no transfer coding): 400 before its body is read (RFC 9112 §6.1, §6.3).

An idle kept-alive connection is closed after `server.keepalive_timeout_s` (uvicorn's
`timeout_keep_alive`, read for each new connection, so a reload applies to the next ones),
by one timer per connection, as the head's deadline is (llmd/proxy/deadline.py; uvicorn arms one
per answer).
An answer whose end is still unsent once the app is done with it (it fit the socket buffers
and uvicorn's, so no send waited: the send timeout, llmd/proxy/stalls.py, never saw it) is
watched the same way: a connection whose client takes none of it for `server.send_timeout_s`
is aborted (`client_too_slow` with `connection_aborted`), where a close would wait for it for ever;
so is one closed with bytes unsent after the send timeout cut its client off.

Each of these closes the connection, carries a fresh `x-request-id` (and `x-llmd-queue-ms: 0` on
`/v1`), is logged by llmd (`request_head_refused`, rate-limited) and never reaches the app.

Any answer started before the parser has seen the end of its request (the app's early
refusals: 401, 413, 415, 429, 503; and the refused heads above) says `Connection: close`, and
the connection closes in stages: a half-close, then at most 256 KiB more read and dropped,
for at most 5 s (or `server.read_timeout_s`), never the rest of the declared body
(llmd/proxy/teardown.py says why). A request whose body came whole keeps its connection.

llmd serves HTTP/1.1 alone: uvicorn runs with `ws="none"`, so a request asking to upgrade (to
WebSocket, h2c) is served as the HTTP/1.1 request it also is, its `Upgrade` ignored (RFC 9110
§7.8), and the connection closed after the answer (the parser reads nothing past an upgrade's
head): a WebSocket handshake to `/v1/chat/completions` is that route's 405.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from collections.abc import Callable
from typing import Any, cast

import httptools
import structlog
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from llmd.config import ServerConfig
from llmd.endpoints.table import dialect_of
from llmd.errors import ApiError, HeadersTooLarge, InvalidRequest, RequestTimeout
from llmd.proxy.chunked import CYCLE_KEY
from llmd.proxy.deadline import Deadline
from llmd.proxy.middleware import NOT_QUEUED, new_request_id, on_v1
from llmd.proxy.teardown import ClosingTransport, EarlyAnswerCycle, Linger, can_linger, linger_s
from llmd.quoting import header_text

log = structlog.get_logger("llmd.proxy")


class _Refused(Exception):
    """Raised from a parser callback to stop parsing a head llmd refuses."""


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's `HttpToolsProtocol` with the request head bounded (see the module docstring).

    `server_config` is read at each request, so a reload's limits apply to the next one.
    Mirrors uvicorn 0.54's `data_received` (its error and upgrade handling included).
    """

    server_config: Callable[[], ServerConfig] = ServerConfig

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # uvicorn types it int; call_later takes any number of seconds
        self.timeout_keep_alive = self.server_config().keepalive_timeout_s  # type: ignore[assignment]
        self._in_head = True
        self._head_bytes = 0
        self._header_count = 0
        self._refusal: tuple[ApiError, str] | None = None
        # Each head is due `server.read_timeout_s` after it began (or after the connection
        # opened); an idle connection closes `timeout_keep_alive` after its last answer (in
        # place of uvicorn's timer armed at each answer's end). One timer each per connection.
        self._head = Deadline("head", self.loop, self._head_timed_out)
        self._head_timeout = 0.0  # s, the timeout the head's deadline was set with
        self._head_started = False
        self._idle = Deadline("idle", self.loop, self.timeout_keep_alive_handler)
        self._unread_timer: asyncio.TimerHandle | None = None
        self._message_open = False  # a request begun whose end the parser has not seen
        self._linger: Linger | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._socket_transport = transport
        super().connection_made(cast(asyncio.Transport, ClosingTransport(transport, self._close)))
        self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._head.stop()
        self._idle.stop()
        if self._unread_timer is not None:
            self._unread_timer.cancel()
            self._unread_timer = None
        if self._linger is not None:
            self._linger.close()
        super().connection_lost(exc)
        cycle = self.cycle
        if cycle is not None and cycle.disconnected and isinstance(cycle, EarlyAnswerCycle):
            lost, cycle.on_lost = cycle.on_lost, None
            if lost is not None:  # the relay's client has gone (llmd/proxy/departure.py)
                lost()

    # -- the connection's end (llmd/proxy/teardown.py) ----------------------------------------

    def _close(self) -> None:
        """Close the connection (uvicorn's `transport.close()`, and llmd's): in stages, a
        linger, when a request's rest is still to come (answered early, or refused in its
        head), else at once."""
        transport = self._socket_transport
        if self._linger is None and self._message_open and can_linger(transport):
            timeout = linger_s(self.server_config().read_timeout_s)
            self._linger = Linger(transport, self.loop, timeout)
            cast(ClosingTransport, self.transport).closing()
        elif self._linger is not None:
            self._linger.close()
        else:
            transport.close()
        # A close waits to send what is left, so watch that the client takes it.
        self._watch_unread(None)

    # -- an answer left unread ---------------------------------------------------------------------

    def on_response_complete(self) -> None:
        # uvicorn 0.55's `on_response_complete`, but for its keep-alive timer (`_idle`).
        self.server_state.total_requests += 1
        if not self.transport.is_closing():
            self._idle.clear()
            self.flow.resume_reading()  # unpause data reads if needed
            if self.pipeline:  # the next pipelined request starts
                cycle, app = self.pipeline.pop()
                self._start_asgi_task(cycle, app)
            else:
                self._idle.set_in(self.timeout_keep_alive)
        self._watch_unread(None)  # kept alive with the answer's end unsent

    def _watch_unread(self, before: int | None) -> None:
        """Abort the connection when the bytes waiting in its transport (`before`, bytes, at
        the last look; None: the first look) are all still there a `server.send_timeout_s`
        later: its client stopped reading an answer the app is done with."""
        if self._unread_timer is not None and before is None:
            return  # already watched
        self._unread_timer = None
        transport = self.transport
        waiting = transport.get_write_buffer_size()  # nearly always 0: nothing more to do
        if not waiting:
            return
        timeout = self.server_config().send_timeout_s
        if timeout <= 0:
            return
        if waiting == before:
            log.warning("client_too_slow", connection_aborted=True, unsent_bytes=waiting)
            _reset(transport)
            return
        self._unread_timer = self.loop.call_later(timeout, self._watch_unread, waiting)

    # -- parser callbacks ----------------------------------------------------------------------

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_head = True
        self._message_open = True
        self._head_started = True
        self._header_count = 0
        if self._head.due is None:
            self._arm_head_timer()

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_count += 1
        limit = self.server_config().max_headers
        if self._header_count > limit:
            self._refusal = (
                HeadersTooLarge(f"the request has more than {limit} headers"),
                "header_count",
            )
            raise _Refused
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._head_started = False
        self._head_bytes = 0
        self._head.clear()
        framing = _framing_refused(self.headers, self.parser.should_upgrade())
        if framing is not None:
            self._refusal = framing, "framing"
            raise _Refused
        super().on_headers_complete()
        cycle = self.cycle
        if cycle is not None and cycle.scope is self.scope:  # this request's
            self.scope[CYCLE_KEY] = cycle  # type: ignore[literal-required]
            cycle.__class__ = EarlyAnswerCycle  # answered before its body's end: closes

    def on_message_complete(self) -> None:
        self._message_open = False
        super().on_message_complete()

    # -- the head's deadline and the idle one (llmd/proxy/deadline.py) ----------------------------

    def _arm_head_timer(self) -> None:
        timeout = self.server_config().read_timeout_s
        if timeout > 0:
            self._head_timeout = timeout
            self._head.set_in(timeout)

    def _head_timed_out(self) -> None:
        """The head did not arrive in time: 408 once some of it came, else a quiet close."""
        if self.transport.is_closing():
            return
        if self._head_started or self._head_bytes:
            message = f"the request line and headers did not arrive within {self._head_timeout:g} s"
            self._refuse(RequestTimeout(message + " (server.read_timeout_s)"), "head_timeout")
        else:
            self.transport.close()

    def _unset_keepalive_if_required(self) -> None:
        """Bytes came (uvicorn calls it from `data_received`) or the connection is closing:
        it is not idle."""
        self._idle.clear()

    # -- the transport ---------------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        self._unset_keepalive_if_required()
        if self._linger is not None:
            self._linger.received(len(data))  # what came after an early answer: dropped
            return
        if not self._in_head:
            self._feed(data)
            return
        limit = self.server_config().max_header_bytes
        room = limit - self._head_bytes
        if len(data) <= room:
            self._head_bytes += len(data)
            self._feed(data)
            return
        # Feed what the limit leaves room for: a head that ends within it goes on as usual,
        # and the rest of `data` is its body or the next request.
        if room > 0 and not self._feed(data[:room]):
            return
        if self._in_head:
            self._refuse(
                HeadersTooLarge(f"the request line and headers are over {limit} bytes"),
                "head_bytes",
            )
            return
        self._feed(data[room:])

    def _feed(self, data: bytes) -> bool:
        """Parse `data`; False when the request was refused (the connection is closing)."""
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            # Served as HTTP/1.1 (ws="none": see the module docstring); the parser stops at an
            # upgrade, so the connection ends with this answer.
            if self.cycle is not None and not self.cycle.response_complete:
                self.cycle.keep_alive = False
            else:
                self.transport.close()
        except httptools.HttpParserError as exc:
            if self._refusal is not None:
                self._refuse(*self._refusal)
            else:
                detail = str(exc) or type(exc).__name__
                self._refuse(InvalidRequest(f"invalid HTTP request: {detail}"), "malformed")
            return False
        return True

    def send_400_response(self, msg: str) -> None:
        """uvicorn's own refusals (none are expected past `_feed`), in llmd's shape."""
        self._refuse(InvalidRequest(msg), "malformed")

    def _refuse(self, error: ApiError, reason: str) -> None:
        """Answer `error` and close the connection (the rest of the request is not read)."""
        request_id = new_request_id()
        log.warning(
            "request_head_refused",
            status=error.status,
            reason=reason,
            request_id=request_id,
            client=self.client[0] if self.client else None,
            detail=error.message,
        )
        path = _path(getattr(self, "url", b"")).decode("latin-1")
        body = dialect_of(path).error_body(error)  # the path's protocol, when it got that far
        headers = dict(error.headers())  # one of each: a 408 names `connection` itself
        headers[b"content-length"] = str(len(body)).encode()
        headers[b"connection"] = b"close"
        headers[b"x-request-id"] = request_id.encode()
        if on_v1(path):
            headers[NOT_QUEUED[0]] = NOT_QUEUED[1]
        head = [STATUS_LINE[error.status]]
        head += [name + b": " + value + b"\r\n" for name, value in headers.items()]
        head.append(b"\r\n")
        if not self.transport.is_closing():
            self.transport.write(b"".join(head) + body)
            self.transport.close()


def _reset(transport: asyncio.Transport) -> None:
    """Abort `transport` with a reset: without SO_LINGER 0 the kernel would go on holding its
    unsent bytes (and the client its connection) after the socket's close."""
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()


def _framing_refused(headers: list[tuple[bytes, bytes]], upgrade: bool) -> ApiError | None:
    """The 400 for a request whose body llmd would misread, None for any other.

    Its transfer codings (every `Transfer-Encoding` line, in order) must be `chunked` alone:
    llmd decodes no other (RFC 9112 §7: gzip, deflate, compress), and a body framed by one
    would be read as if it were not coded. RFC 9112 §6.1 suggests 501 for a coding not
    understood, which clients retry as a server fault, so this is a 400, as §6.3 asks when
    chunked is not the last coding. And a request that asks to `upgrade` may not have a body:
    the parser hands what follows an upgrade's head to the new protocol, so the body would
    never be read (llmd serves the request as HTTP/1.1 without it)."""
    values = [value for name, value in headers if name == b"transfer-encoding"]
    length = next((value for name, value in headers if name == b"content-length"), b"0")
    if upgrade and (values or length.strip() != b"0"):
        upgrade_to = next((value for name, value in headers if name == b"upgrade"), b"")
        return InvalidRequest(
            f"llmd serves HTTP/1.1 alone and does not upgrade (Upgrade {header_text(upgrade_to)})"
            ": send a request with a body without Connection: upgrade",
            param="upgrade",
        )
    codings = [c.strip().lower() for c in b",".join(values).split(b",")]
    if not values or codings == [b"chunked"]:
        return None
    return InvalidRequest(
        f"Transfer-Encoding {header_text(b', '.join(values))} is not supported: llmd reads a "
        "body framed by Content-Length or by chunked alone; send a compressed body with "
        "Content-Encoding: gzip or deflate",
        param="transfer-encoding",
    )


def _path(target: bytes) -> bytes:
    """The path of a request target (origin form, or absolute form's path), as sent."""
    if not target.startswith(b"/"):
        target = b"/" + target.partition(b"://")[2].partition(b"/")[2]
    return target.split(b"?", 1)[0]


def bounded_protocol(server_config: Callable[[], ServerConfig]) -> type[asyncio.Protocol]:
    """The protocol class for uvicorn's `Config(http=...)`, reading its limits from
    `server_config()` (the live `[server]` table)."""
    return type(
        "LlmdHttpProtocol",
        (BoundedHttpToolsProtocol,),
        {"server_config": staticmethod(server_config)},
    )
