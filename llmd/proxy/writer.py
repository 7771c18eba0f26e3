"""The client side of a relayed request: the response start, the body, errors in-band.

Kept apart from the endpoint (`relay.py`), as starlette keeps responses apart from routing. Every
byte llmd sends a generation client goes through `ClientWriter`, which times each send for the
stall watcher and tells whether an error must go in-band.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence

import structlog
from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from llmd.endpoints.dialects import OPENAI, Dialect
from llmd.errors import ApiError
from llmd.inflight import Exchange

log = structlog.get_logger("llmd.proxy")

# What ends any line and event a stream may have left open (after a CR, the LF ends that
# line and the next one is the blank line), so that an error sent in-band is an event of its
# own.
SSE_BOUNDARY = b"\n\n"


async def send_error(
    send: Send, error: ApiError, headers: Sequence[tuple[bytes, bytes]] = ()
) -> None:
    """Answer `error` as a complete OpenAI-shaped JSON response (with Retry-After on 429 and
    503), with `headers` added: the one writer of every error llmd answers, public and admin
    API alike."""
    body = error.body()
    headers = [*error.headers(), *headers, (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": error.status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


class ErrorResponse(Response):
    """`error` as a Starlette response, for the app's exception handlers and `/ready`: written
    by `send_error` like every other error llmd answers."""

    def __init__(self, error: ApiError, headers: list[tuple[bytes, bytes]] | None = None) -> None:
        super().__init__(status_code=error.status)
        self.error = error
        self.extra = headers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send_error(send, self.error, self.extra or ())


class ClientWriter:
    """Wraps ASGI `send` for one exchange: remembers whether the response has started (so an
    error goes in-band) and reads the answer as it goes out (`dialect.reader`: whether a
    stream is between two events, and whether its `data: [DONE]` went out: then the exchange
    is `answered`).

    `headers` are added to the response's start, an error's included (validation's notes to
    the client; the list may grow until the start). The body goes to `body_send` when given:
    the `send` beneath wrappers that touch only a response's start (llmd/proxy/middleware.py's
    BODY_SEND_KEY), so a streamed chunk does not pass through each of them. `dialect` reads
    what the answer tells llmd (llmd/endpoints/dialects.py)."""

    def __init__(
        self,
        send: Send,
        exchange: Exchange,
        headers: list[tuple[bytes, bytes]] | None = None,
        body_send: Send | None = None,
        dialect: Dialect = OPENAI,
    ) -> None:
        self._send = send
        self.answer = dialect.reader(exchange)
        self._send_body = body_send or send
        self.exchange = exchange
        self.headers = headers if headers is not None else []
        # Called once, at the answer's first body chunk (admission's device hold waits for it).
        self.on_first_byte: Callable[[], None] | None = None

    @property
    def between_events(self) -> bool:
        """Whether what was sent so far ends between two server-sent events (in any layout:
        an engine may split the blank line that ends an event between two reads)."""
        return self.answer.between_events

    async def start(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        self.exchange.response_started = True
        self.exchange.status = status
        self.exchange.send_since = time.monotonic()
        message: Message = {"type": "http.response.start", "status": status, "headers": headers}
        if self.headers:
            message["headers"] = [*headers, *self.headers]
        await self._send(message)
        self.exchange.send_since = None

    async def body(self, chunk: bytes, *, more: bool) -> None:
        exchange = self.exchange
        now = time.monotonic()
        if chunk:
            exchange.progress_at = now  # the backend's latest bytes (llmd/daemon/watchdog.py)
            first = exchange.first_byte_at is None
            self.answer.feed(chunk)
            if first and self.on_first_byte is not None:
                self.on_first_byte()
        # A send blocks while the client's transport buffer is full; the stall watcher
        # (llmd/proxy/stalls.py) ends exchanges blocked longer than server.send_timeout_s.
        exchange.send_since = now
        await self._send_body({"type": "http.response.body", "body": chunk, "more_body": more})
        exchange.send_since = None
        if chunk and exchange.stream and self.answer.done:
            exchange.answered = True


async def answer_error(send: ClientWriter, error: ApiError, *, log_it: bool = True) -> None:
    """Send `error` as a response (with the time queued, `x-llmd-queue-ms`), or in-band as an
    SSE event when the stream has started. Logged as `request_failed` unless `log_it` is
    False (the caller logged it)."""
    exchange = send.exchange
    exchange.error_code = error.reason
    with contextlib.suppress(OSError):
        if not exchange.response_started:
            exchange.status = error.status
            queue_ms = str(round(exchange.queue_ms())).encode()
            await send_error(send._send, error, [*send.headers, (b"x-llmd-queue-ms", queue_ms)])
        elif exchange.stream:
            prefix = b"" if send.between_events else SSE_BOUNDARY
            await send.body(prefix + error.sse_event(), more=False)
        else:
            await send.body(b"", more=False)
    if log_it:
        log.warning(
            "request_failed", request_id=exchange.request_id, code=error.reason, error=error.message
        )
