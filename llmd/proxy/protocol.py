"""The HTTP/1.1 protocol llmd serves with: uvicorn's httptools protocol, the request head bounded.

uvicorn 0.54 bounds the request head only for h11 (`h11_max_incomplete_event_size`); with
httptools, the parser llmd serves with (the relay's costs were measured on it), a head of any
size is read and kept, and a 64 MB header stalled other clients for seconds. This subclass,
passed to uvicorn as its `http` protocol class, counts the head's bytes as they arrive and its
headers as they are parsed, and answers 431 (RFC 6585 §5) as soon as either passes
`server.max_header_bytes` or `server.max_headers`, without reading on. Requests the parser
refuses get an OpenAI-shaped 400 in place of uvicorn's plain-text one. A head that has not
arrived whole `server.read_timeout_s` after the connection opened (or after the request's first
byte, on a kept-alive connection) gets 408 `request_timeout`; a connection that sent nothing
by then is closed without an answer (nginx's `client_header_timeout` does the same). Each of
these closes the connection, is logged by llmd (`request_head_refused`, rate-limited) and never
reaches the app.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httptools
import structlog
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from llmd.config import ServerConfig
from llmd.errors import ApiError, HeadersTooLarge, InvalidRequest, RequestTimeout

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
        self._in_head = True
        self._head_bytes = 0
        self._header_count = 0
        self._refusal: ApiError | None = None
        self._head_timer: asyncio.TimerHandle | None = None
        self._head_started = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head_timer()
        super().connection_lost(exc)

    # -- parser callbacks ----------------------------------------------------------------------

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_head = True
        self._head_started = True
        self._header_count = 0
        if self._head_timer is None:
            self._arm_head_timer()

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_count += 1
        limit = self.server_config().max_headers
        if self._header_count > limit:
            self._refusal = HeadersTooLarge(f"the request has more than {limit} headers")
            raise _Refused
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._head_started = False
        self._head_bytes = 0
        self._disarm_head_timer()
        super().on_headers_complete()

    # -- the head's deadline ---------------------------------------------------------------------

    def _arm_head_timer(self) -> None:
        timeout = self.server_config().read_timeout_s
        if timeout > 0:
            self._head_timer = self.loop.call_later(timeout, self._head_timed_out, timeout)

    def _disarm_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self, timeout: float) -> None:
        """The head did not arrive in time: 408 once some of it came, else a quiet close."""
        self._head_timer = None
        if self.transport.is_closing():
            return
        if self._head_started or self._head_bytes:
            message = f"the request line and headers did not arrive within {timeout:g} s"
            self._refuse(RequestTimeout(message + " (server.read_timeout_s)"), "head_timeout")
        else:
            self.transport.close()

    # -- the transport ---------------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        self._unset_keepalive_if_required()
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
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
        except httptools.HttpParserError as exc:
            if self._refusal is not None:
                self._refuse(self._refusal, "header_count")
            else:
                detail = str(exc) or type(exc).__name__
                self._refuse(InvalidRequest(f"invalid HTTP request: {detail}"), "malformed")
            return False
        return True

    def send_400_response(self, msg: str) -> None:
        """uvicorn's own refusals (none are expected past `_feed`), OpenAI-shaped."""
        self._refuse(InvalidRequest(msg), "malformed")

    def _refuse(self, error: ApiError, reason: str) -> None:
        """Answer `error` and close the connection (the rest of the request is not read)."""
        log.warning(
            "request_head_refused",
            status=error.status,
            reason=reason,
            client=self.client[0] if self.client else None,
            detail=error.message,
        )
        body = error.body()
        head = [STATUS_LINE[error.status]]
        for name, value in [*error.headers(), (b"content-length", str(len(body)).encode())]:
            head.append(name + b": " + value + b"\r\n")
        head.append(b"connection: close\r\n\r\n")
        if not self.transport.is_closing():
            self.transport.write(b"".join(head) + body)
            self.transport.close()


def bounded_protocol(server_config: Callable[[], ServerConfig]) -> type[asyncio.Protocol]:
    """The protocol class for uvicorn's `Config(http=...)`, reading its limits from
    `server_config()` (the live `[server]` table)."""
    return type(
        "LlmdHttpProtocol",
        (BoundedHttpToolsProtocol,),
        {"server_config": staticmethod(server_config)},
    )
