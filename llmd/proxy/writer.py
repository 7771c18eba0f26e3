"""The client side of a relayed request: the response start, the body, errors in-band.

Kept apart from the endpoint (`relay.py`), as starlette keeps responses apart from routing. Every
byte llmd sends a generation client goes through `ClientWriter`, which times each send for the
stall watcher and tells whether an error must go in-band.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Awaitable, Callable, Coroutine, Generator, Sequence
from typing import Any

import structlog
from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from llmd.endpoints.dialects import OPENAI, Dialect, OpenAIAnswer
from llmd.endpoints.stream_usage import HiddenUsage
from llmd.endpoints.table import dialect_of
from llmd.engine.connection import Reply
from llmd.errors import ApiError
from llmd.inflight import Exchange
from llmd.proxy.chunked import ChunkedBody

log = structlog.get_logger("llmd.proxy")

# What ends any line and event a stream may have left open (after a CR, the LF ends that
# line and the next one is the blank line), so that an error sent in-band is an event of its
# own.
SSE_BOUNDARY = b"\n\n"


async def send_error(
    send: Send,
    error: ApiError,
    headers: Sequence[tuple[bytes, bytes]] = (),
    dialect: Dialect = OPENAI,
) -> None:
    """Answer `error` as a complete JSON response in `dialect`'s shape (OpenAI's unless the
    path is another protocol's: `dialect_of`), with Retry-After on 429 and 503 and `headers`
    added: the one writer of every error llmd answers, public and admin API alike."""
    body = dialect.error_body(error)
    headers = [*error.headers(), *headers, (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": error.status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


class ErrorResponse(Response):
    """`error` as a Starlette response, for the app's exception handlers and `/ready`: written
    by `send_error` like every other error llmd answers, in `dialect` (None: that of the
    request's path)."""

    def __init__(
        self,
        error: ApiError,
        headers: list[tuple[bytes, bytes]] | None = None,
        dialect: Dialect | None = None,
    ) -> None:
        super().__init__(status_code=error.status)
        self.error = error
        self.extra = headers
        self.dialect = dialect

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        dialect = self.dialect or dialect_of(scope.get("path", ""), scope.get("headers", ()))
        await send_error(send, self.error, self.extra or (), dialect)


class Resumed:
    """A coroutine already run to its first wait (it yielded `yielded`, a future as asyncio's
    tasks take), awaitable from another task, which runs it to its end: what a send started
    in a protocol callback becomes when it must wait."""

    __slots__ = ("coro", "yielded")

    def __init__(self, coro: Coroutine[Any, Any, None], yielded: Any) -> None:
        self.coro = coro
        self.yielded = yielded

    def __await__(self) -> Generator[Any, None, None]:
        coro, yielded = self.coro, self.yielded
        while True:
            try:
                sent = yield yielded
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # a cancellation thrown into the awaiting task
                try:
                    yielded = coro.throw(exc)
                except StopIteration:
                    return
                continue
            try:
                yielded = coro.send(sent)
            except StopIteration:
                return


class ClientWriter:
    """Wraps ASGI `send` for one exchange: remembers whether the response has started (so an
    error goes in-band) and reads the answer as it goes out (`dialect.reader`: whether a
    stream is between two events, and whether its `data: [DONE]` went out: then the exchange
    is `answered`).

    `headers` are added to the response's start, an error's included (validation's notes to
    the client; the list may grow until the start). The body goes to `body_send` when given:
    the `send` beneath wrappers that touch only a response's start (llmd/proxy/middleware.py's
    BODY_SEND_KEY), so a streamed chunk does not pass through each of them; `stream` writes
    each chunk with `chunked` when given (llmd/proxy/chunked.py: straight to the client's
    transport). `dialect` reads what the answer tells llmd (llmd/endpoints/dialects.py)."""

    def __init__(
        self,
        send: Send,
        exchange: Exchange,
        headers: list[tuple[bytes, bytes]] | None = None,
        body_send: Send | None = None,
        dialect: Dialect = OPENAI,
        chunked: ChunkedBody | None = None,
    ) -> None:
        self._send = send
        self._chunked = chunked
        self.dialect = dialect
        self.answer = dialect.reader(exchange)
        self._send_body = body_send or send
        self.exchange = exchange
        self.headers = headers if headers is not None else []
        # Called once, when the answer's first token is read (`exchange.first_byte_at` set):
        # an interactive request's device hold ends then (llmd/admission/holds.py).
        self.on_first_byte: Callable[[], None] | None = None
        # A stream whose usage llmd asked for: the usage event is kept from the client, and
        # the token events a chunk starts with (`OpenAIAnswer.feed_tokens`) go as they came.
        self._hidden: HiddenUsage | None = None
        self._tokens: Callable[[bytes], int] = _no_tokens

    @property
    def between_events(self) -> bool:
        """Whether what was sent so far ends between two server-sent events (in any layout:
        an engine may split the blank line that ends an event between two reads)."""
        hidden = self._hidden
        return self.answer.between_events and (hidden is None or not hidden.held)

    async def start(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        self.exchange.response_started = True
        if self.exchange.usage_hidden and self.exchange.stream and status == 200:
            self._hidden = HiddenUsage(self.exchange.fingerprint)
            if isinstance(self.answer, OpenAIAnswer):
                self._tokens = self.answer.feed_tokens
        self.exchange.status = status
        self.exchange.send_since = time.monotonic()
        message: Message = {"type": "http.response.start", "status": status, "headers": headers}
        if self.headers:
            message["headers"] = [*headers, *self.headers]
        await self._send(message)
        self.exchange.send_since = None
        self.exchange.resumed_at = time.monotonic()

    async def body(self, chunk: bytes, *, more: bool) -> None:
        hidden = self._hidden
        if hidden is None:
            if chunk:
                self.answer.feed(chunk)
        elif chunk:
            chunk = self._read_hidden(hidden, chunk)
            if not chunk and more:
                return
        if chunk:
            now = time.monotonic()
            self.exchange.progress_at = now  # llmd/daemon/watchdog.py reads it
            self.exchange.chunk_sent(now)
            if self.on_first_byte is not None and self.exchange.first_byte_at is not None:
                self.on_first_byte()
                self.on_first_byte = None
        await self.send_body(chunk, more=more)

    async def send_body(self, chunk: bytes, *, more: bool) -> None:
        """Send `chunk`, already read (`body` reads, then sends)."""
        exchange = self.exchange
        # A send blocks while the client's transport buffer is full; the stall watcher
        # (llmd/proxy/stalls.py) ends exchanges blocked longer than server.send_timeout_s.
        exchange.send_since = time.monotonic()
        await self._send_body({"type": "http.response.body", "body": chunk, "more_body": more})
        exchange.send_since = None
        exchange.resumed_at = time.monotonic()
        if chunk and exchange.stream and self.answer.done:
            exchange.answered = True

    async def stream(self, content: Reply) -> None:
        """Send each chunk of `content` as `body` would, until its end; raises as `readany`.

        The stream's per-chunk path. A chunk that arrives while nothing else waits is read and
        sent in the engine connection's callback (`Reply.wait`'s sink, `_send_now`): no task
        switch per chunk. When the client's send would wait (its transport is backed up), that
        send is finished in this task and the chunks after it are read here (the engine's
        socket pauses once `connection.CHUNKS_HIGH` bytes wait), then the sink takes over again."""
        self._blocked: Awaitable[None] | None = None
        self._failed: BaseException | None = None
        try:
            while True:
                await content.wait(self._send_now)
                if self._blocked is None and self._failed is None:
                    chunk = await content.readany()  # chunks that waited, or the end (b"")
                    if not chunk:
                        return
                    self._send_now(chunk)
                if self._failed is not None:
                    raise self._failed
                if self._blocked is not None:
                    blocked, self._blocked = self._blocked, None
                    await blocked
                    self.exchange.resumed_at = time.monotonic()  # the client took it
                    self._sent()
        finally:
            if isinstance(self._blocked, Resumed):  # cancelled before it was awaited
                self._blocked.coro.close()

    def _send_now(self, chunk: bytes) -> bool:
        """Read `chunk` and start its send: True when sent, False when the send waits (it is
        `_blocked`, for `stream` to await) or failed (`_failed`, for `stream` to raise)."""
        exchange = self.exchange
        try:
            exchange.progress_at = now = time.monotonic()
            answer = self.answer
            hidden = self._hidden
            if hidden is None:
                answer.feed(chunk)
            else:
                chunk = self._read_hidden(hidden, chunk)
                if not chunk:
                    return True
            exchange.chunk_sent(now)  # a stream's gaps (llmd/telemetry/gaps.py)
            if self.on_first_byte is not None and exchange.first_byte_at is not None:
                self.on_first_byte()
                self.on_first_byte = None
            chunked = self._chunked
            send: Awaitable[None] | None
            if chunked is not None:
                send = chunked.send(chunk)
                if send is None:  # written to the client's transport: no send waited
                    if answer.done and exchange.stream:
                        exchange.answered = True
                    return True
                exchange.send_since = now  # the stall watcher times the send that may wait
            else:
                exchange.send_since = now
                message = {"type": "http.response.body", "body": chunk, "more_body": True}
                send = self._send_body(message)
            if not isinstance(send, Coroutine):
                self._blocked = send
                return False
            try:
                yielded = send.send(None)
            except StopIteration:
                self._sent()
                return True
        except Exception as exc:
            self._failed = exc
            return False
        self._blocked = Resumed(send, yielded)
        return False

    def _read_hidden(self, hidden: HiddenUsage, chunk: bytes) -> bytes:
        """Read `chunk` of a stream whose usage llmd asked for (`hidden`) and return what of it
        goes to the client: the token events it starts with, read by their shape (`_tokens`,
        unless `hidden` holds bytes before them), as they came; then `HiddenUsage.split`'s
        bytes of the rest (the usage event read first)."""
        read = 0 if hidden.held else self._tokens(chunk)
        if read == len(chunk):
            return chunk
        head, chunk = (chunk[:read], chunk[read:]) if read else (b"", chunk)
        chunk = hidden.split(chunk)
        usage = hidden.take_usage()
        if usage:
            self.answer.feed(usage)
            if hidden.stamped_otherwise is not None:
                log.warning(
                    "stream_fingerprint_changed",
                    request_id=self.exchange.request_id,
                    backend=self.exchange.backend,
                    put_back=hidden.fingerprint.decode(errors="replace"),
                    engine=hidden.stamped_otherwise.decode(errors="replace"),
                )
        if chunk:
            self.answer.feed(chunk)
        return head + chunk if head else chunk

    def _sent(self) -> None:
        exchange = self.exchange
        exchange.send_since = None
        if self.answer.done and exchange.stream:
            exchange.answered = True

    def stream_error(self, error: ApiError) -> bytes:
        """`error` in-band, as this answer's dialect ends a stream with it (a writer that
        numbers its events overrides this: llmd/proxy/responses.py)."""
        return self.dialect.stream_error(error)


async def answer_error(send: ClientWriter, error: ApiError, *, log_it: bool = True) -> None:
    """Send `error` as a response (with the time queued, `x-llmd-queue-ms`), or in-band when
    the stream has started (as the writer's dialect ends a stream with an error). Logged as
    `request_failed` unless `log_it` is False (the caller logged it)."""
    exchange = send.exchange
    exchange.error_code = error.reason
    with contextlib.suppress(OSError):
        if not exchange.response_started:
            exchange.status = error.status
            queue_ms = str(round(exchange.queue_ms())).encode()
            headers = [*send.headers, (b"x-llmd-queue-ms", queue_ms)]
            await send_error(send._send, error, headers, send.dialect)
        elif exchange.stream:
            prefix = b"" if send.between_events else SSE_BOUNDARY
            await send.body(prefix + send.stream_error(error), more=False)
        else:
            await send.body(b"", more=False)
    if log_it:
        log.warning(
            "request_failed", request_id=exchange.request_id, code=error.reason, error=error.message
        )


def _no_tokens(chunk: bytes) -> int:
    """A reader without `OpenAIAnswer.feed_tokens`: no chunk is read by its shape."""
    return 0
