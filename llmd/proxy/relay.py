"""The relay: one client request becomes one upstream request to the engine, streamed through.

Pure ASGI. The upstream body is forwarded chunk by chunk as it arrives (`iter_any`: whatever the
socket has, never waiting to fill a buffer). A watcher awaits the client's `http.disconnect`;
when it comes, the upstream task is cancelled and its connection closed, which is what makes vLLM
abort the sequence (ENGINE.md: a relay that keeps the upstream open lets sequences run on).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import aiohttp
import structlog
from starlette.types import Message, Receive, Scope, Send

from llmd.admission.classes import Priority
from llmd.admission.tenants import ANONYMOUS
from llmd.admission.waiters import Request, Ticket
from llmd.errors import ApiError, Draining, EngineError, EngineUnavailable, InvalidRequest
from llmd.proxy.body import ClientGone, parse_object, read_body
from llmd.proxy.inflight import Exchange
from llmd.proxy.middleware import REQUEST_ID_KEY
from llmd.proxy.writer import SSE_BOUNDARY, ClientWriter, answer_error, send_error
from llmd.state import DaemonState
from llmd.validation.fields import Endpoint
from llmd.validation.validator import Validator

log = structlog.get_logger("llmd.proxy")

_UPSTREAM_LOST = (aiohttp.ClientError, asyncio.TimeoutError, OSError)
_ENDPOINTS = {"/v1/chat/completions": Endpoint.CHAT, "/v1/completions": Endpoint.COMPLETIONS}


class Relay:
    """ASGI endpoint relaying `method path` to the engine (chat, completions, models)."""

    def __init__(
        self,
        state: DaemonState,
        session: Callable[[], aiohttp.ClientSession],
        path: str,
        method: str = "POST",
        validator: Validator | None = None,
    ) -> None:
        self.state = state
        self.session = session
        self.path = path
        self.method = method
        self.validator = validator
        self.endpoint = _ENDPOINTS.get(path)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request_id: str = scope[REQUEST_ID_KEY]
        received_at = time.monotonic()
        admission = self.state.admission
        request: Request | None = None
        prompt_tokens: int | None = None
        tenant_name, class_name = ANONYMOUS, Priority.NORMAL.name.lower()
        try:
            tenant = admission.authenticate(scope["headers"])
            tenant_name = tenant.name
            self._check_available()
            body = b""
            stream = False
            if self.method == "POST":
                body = await read_body(receive, self.state.config.server.max_body_bytes)
                payload = parse_object(body)
                if not isinstance(payload.get("stream"), bool | None):
                    raise InvalidRequest("'stream' must be a boolean", param="stream")
                stream = bool(payload.get("stream"))
                if self.validator is not None and self.endpoint is not None:
                    cls = admission.classify(tenant, scope["headers"])
                    class_name = cls.name.lower()
                    valid = await self.validator.check(
                        self.endpoint, payload, body, scope["headers"]
                    )
                    body = valid.body
                    prompt_tokens = valid.prompt_tokens
                    send = _with_headers(send, valid.response_headers)
                    if admission.engine_priority:
                        # `payload` carries validation's changes (it edits the dict in place)
                        body = _with_priority(payload, cls)
                    chat = self.endpoint is Endpoint.CHAT
                    cost = admission.cost(valid.prompt_tokens, valid.max_tokens, valid.n, chat)
                    request = Request(tenant, cls, cost, scope["headers"])
        except ClientGone:
            return
        except ApiError as error:
            if self.endpoint is not None:
                self.state.observer.rejected(
                    request_id, error.status, str(error.code), received_at, tenant_name, class_name
                )
            await send_error(send, error)
            return
        exchange = Exchange(
            request_id,
            stream,
            started_at=received_at,
            prompt_tokens=prompt_tokens,
            tenant=tenant_name,
            request_class=class_name,
        )
        await self._run(exchange, body, receive, send, request)

    def _check_available(self) -> None:
        if self.state.draining:
            raise Draining(
                "llmd is draining and admits no new requests",
                retry_after_s=self.state.config.server.drain_timeout_s,
            )
        if not self.state.engine.serving:
            raise EngineUnavailable(
                f"the engine is {self.state.engine.phase.value}; retry later",
                retry_after_s=self.state.engine.retry_after_s(),
            )

    async def _run(
        self, exchange: Exchange, body: bytes, receive: Receive, send: Send, request: Request | None
    ) -> None:
        """Run the queue wait and the upstream work until they end or the client leaves,
        whichever comes first (a client that leaves while queued never reaches the engine)."""
        work = asyncio.create_task(self._exchange(exchange, body, send, request))
        exchange.task = work
        watcher = asyncio.create_task(_wait_disconnect(receive))
        self.state.inflight.add(exchange)
        try:
            await asyncio.wait({work, watcher}, return_when=asyncio.FIRST_COMPLETED)
            if not work.done():
                exchange.client_gone = True  # the observer counts it, by phase
                log.debug(
                    "client_disconnected", request_id=exchange.request_id, phase=exchange.phase
                )
        finally:
            work.cancel()
            watcher.cancel()
            await asyncio.wait({work})
            self.state.inflight.remove(exchange)
            exchange.ended_at = time.monotonic()
        if not work.cancelled() and (exc := work.exception()) is not None:
            exchange.error_code = exchange.error_code or "internal_error"
            log.error("relay_failed", request_id=exchange.request_id, error=repr(exc))
        if self.endpoint is not None:
            self.state.observer.finished(exchange)

    async def _exchange(
        self, exchange: Exchange, body: bytes, send: Send, request: Request | None
    ) -> None:
        """Wait for admission, then one upstream request; errors become OpenAI-shaped answers
        (in-band once started)."""
        started = ClientWriter(send, exchange)
        ticket: Ticket | None = None
        try:
            if request is not None:
                ticket = await self.state.admission.admit(request)
            exchange.admitted_at = time.monotonic()
            await self._forward(exchange, body, started)
        except asyncio.CancelledError:
            if exchange.abort_error is None:
                raise  # the client left: nothing to answer
            await answer_error(started, exchange.abort_error)
        except ApiError as error:
            await answer_error(started, error)
        finally:
            if ticket is not None:
                self.state.admission.finish(ticket)

    async def _forward(self, exchange: Exchange, body: bytes, send: ClientWriter) -> None:
        headers = {"x-request-id": exchange.request_id}
        if body:
            headers["content-type"] = "application/json"
        try:
            response = await self.session().request(
                self.method, "http://engine" + self.path, data=body or None, headers=headers
            )
        except _UPSTREAM_LOST as exc:
            raise self._upstream_error(exc) from exc
        try:
            if response.status >= 500:
                raise _engine_status_error(response.status, await response.read())
            content_type = response.headers.get("content-type", "application/json").encode()
            queue_ms = str(round(exchange.queue_ms())).encode()
            response_headers = [(b"content-type", content_type), (b"x-llmd-queue-ms", queue_ms)]
            if not (exchange.stream and response.status == 200):
                payload = await response.read()
                response_headers.append((b"content-length", str(len(payload)).encode()))
                await send.start(response.status, response_headers)
                await send.body(payload, more=False)
                return
            await send.start(200, [*response_headers, (b"cache-control", b"no-cache")])
            await _relay_stream(response, send)
        except _UPSTREAM_LOST as exc:
            raise self._upstream_error(exc) from exc
        finally:
            response.close()  # never back to the pool mid-body: closing aborts the sequence

    def _upstream_error(self, exc: BaseException) -> ApiError:
        # Refused or missing socket: the engine is not accepting (it died a moment ago, or is
        # between boots) and nothing was sent, so the client may simply retry.
        if not self.state.engine.serving:
            return EngineUnavailable(
                f"the engine is {self.state.engine.phase.value}; retry later",
                retry_after_s=self.state.engine.retry_after_s(),
            )
        if isinstance(exc, aiohttp.ClientConnectorError):
            return EngineUnavailable(
                "the engine refused the connection (it may have just stopped); retry later",
                retry_after_s=self.state.engine.retry_after_s(),
            )
        return EngineError(
            f"the engine connection failed: {type(exc).__name__}: {exc}".rstrip(": ")
        )


async def _relay_stream(response: aiohttp.ClientResponse, send: ClientWriter) -> None:
    """Forward SSE bytes as they arrive; an upstream failure ends the stream with an error event."""
    async for chunk in response.content.iter_any():
        await send.body(chunk, more=True)
    if send.tail != SSE_BOUNDARY:  # the engine ended mid-event: that is a failure, not an ending
        raise EngineError("the engine closed the stream mid-event")
    await send.body(b"", more=False)


def _engine_status_error(status: int, body: bytes) -> ApiError:
    """Translate an engine 5xx: 503 is 'unavailable, retry', anything else an engine error."""
    detail = body.decode(errors="replace")[:300]
    if status == 503:
        return EngineUnavailable(
            f"the engine is overloaded or not ready: {detail}", retry_after_s=1
        )
    return EngineError(f"the engine failed with HTTP {status}: {detail}")


def _with_priority(payload: dict[str, Any], cls: Priority) -> bytes:
    """The body with vLLM's request field `priority` set to the class rank (lower runs first;
    used only when the engine runs with --scheduling-policy priority)."""
    return json.dumps({**payload, "priority": int(cls)}, separators=(",", ":")).encode()


def _with_headers(send: Send, headers: list[tuple[bytes, bytes]]) -> Send:
    """`send`, adding `headers` to the response start (validation's notes to the client)."""
    if not headers:
        return send

    async def send_with_headers(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", []), *headers]}
        await send(message)

    return send_with_headers


async def _wait_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
