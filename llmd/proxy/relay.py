"""The relay endpoint: one client request in named stages, like uvicorn's `Server._serve`.

    authenticate → check availability → read → validate → admit → relay

Each stage is a small method with a typed result, and raises an `ApiError` to refuse. The first
four run as the request arrives (a refusal is answered at once and accounted); `admit` and
`relay` run in one task raced against the client's `http.disconnect`, so a client that leaves
while queued never reaches the engine, and one that leaves mid-stream has its upstream request
closed, which is what makes vLLM abort the sequence (ENGINE.md). Pure ASGI; the bytes to the
client go through `writer.ClientWriter`, the engine side is `upstream.forward`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from typing import Any

import structlog
from starlette.types import Message, Receive, Scope, Send

from llmd.admission.classes import Priority
from llmd.admission.tenants import ANONYMOUS, Tenant
from llmd.admission.waiters import Request, Ticket
from llmd.errors import ApiError, InvalidRequest
from llmd.proxy.body import ClientGone, parse_object, read_body
from llmd.proxy.inflight import Exchange
from llmd.proxy.middleware import REQUEST_ID_KEY
from llmd.proxy.upstream import forward
from llmd.proxy.writer import ClientWriter, answer_error, send_error
from llmd.state import DaemonState
from llmd.validation.fields import Endpoint

log = structlog.get_logger("llmd.proxy")

_ENDPOINTS = {"/v1/chat/completions": Endpoint.CHAT, "/v1/completions": Endpoint.COMPLETIONS}


@dataclasses.dataclass
class Arrival:
    """A request as it arrives: its id, when (monotonic s), its ASGI headers, and, once the
    stages know them, its tenant and class (what a refusal is accounted under)."""

    request_id: str
    at: float
    headers: list[Any]
    tenant: str = ANONYMOUS
    request_class: str = Priority.NORMAL.label


@dataclasses.dataclass(frozen=True)
class Body:
    """The request body: its bytes, the parsed JSON object, and whether it asks to stream."""

    raw: bytes
    payload: dict[str, Any]
    stream: bool


@dataclasses.dataclass(frozen=True)
class Prepared:
    """A request ready for the engine: the bytes to send, whether it streams, what admission
    weighs (None: not admitted, e.g. `/v1/models`), its prompt tokens (None: not counted) and
    headers for the client's response (validation's notes)."""

    body: bytes
    stream: bool
    request: Request | None
    prompt_tokens: int | None
    response_headers: list[tuple[bytes, bytes]]


class Relay:
    """ASGI endpoint relaying `method path` to the engine (chat, completions, models)."""

    def __init__(self, state: DaemonState, path: str, method: str = "POST") -> None:
        self.state = state
        self.path = path
        self.method = method
        self.endpoint = _ENDPOINTS.get(path)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        arrival = Arrival(scope[REQUEST_ID_KEY], time.monotonic(), scope["headers"])
        try:
            tenant = self.authenticate(arrival)
            self.check_available()
            body = await self.read(receive)
            prepared = await self.validate(arrival, tenant, body)
        except ClientGone:
            return
        except ApiError as error:
            await self.refuse(arrival, error, send)
            return
        exchange = Exchange(
            arrival.request_id,
            prepared.stream,
            started_at=arrival.at,
            prompt_tokens=prepared.prompt_tokens,
            tenant=arrival.tenant,
            request_class=arrival.request_class,
        )
        await self.run(exchange, prepared, receive, _with_headers(send, prepared.response_headers))

    # -- the stages, in order ----------------------------------------------------------------

    def authenticate(self, arrival: Arrival) -> Tenant:
        """The tenant of the request's API key. Raises InvalidApiKey (401)."""
        tenant = self.state.admission.authenticate(arrival.headers)
        arrival.tenant = tenant.name
        return tenant

    def check_available(self) -> None:
        """Raises Draining or EngineUnavailable (503 + Retry-After) when llmd admits nothing."""
        error = self.state.unavailable()
        if error is not None:
            raise error

    async def read(self, receive: Receive) -> Body:
        """The whole body, parsed (nothing for a GET). Raises BodyTooLarge (413),
        InvalidRequest (400), ClientGone."""
        if self.method != "POST":
            return Body(b"", {}, stream=False)
        raw = await read_body(receive, self.state.config.server.max_body_bytes)
        payload = parse_object(raw)
        if not isinstance(payload.get("stream"), bool | None):
            raise InvalidRequest("'stream' must be a boolean", param="stream")
        return Body(raw, payload, stream=bool(payload.get("stream")))

    async def validate(self, arrival: Arrival, tenant: Tenant, body: Body) -> Prepared:
        """Class, fields, model, prompt tokens and context of a generation request, and its
        cost for admission (other routes pass as they are). Raises ApiError (400, 404)."""
        if self.endpoint is None:
            return Prepared(body.raw, body.stream, None, None, [])
        admission = self.state.admission
        cls = admission.classify(tenant, arrival.headers)
        arrival.request_class = cls.label
        valid = await self.state.validator.check(
            self.endpoint, body.payload, body.raw, arrival.headers
        )
        raw = valid.body
        if admission.engine_priority:  # `payload` carries validation's changes (edited in place)
            raw = _with_priority(body.payload, cls)
        chat = self.endpoint is Endpoint.CHAT
        cost = admission.cost(valid.prompt_tokens, valid.max_tokens, valid.n, chat)
        request = Request(tenant, cls, cost, arrival.headers)
        return Prepared(raw, body.stream, request, valid.prompt_tokens, valid.response_headers)

    async def admit(self, prepared: Prepared) -> Ticket | None:
        """Wait in admission's queue until the engine may take the request (None: not
        admitted). Raises RateLimited, QueueFull (429), QueueTimeout (503)."""
        if prepared.request is None:
            return None
        return await self.state.admission.admit(prepared.request)

    async def relay(self, exchange: Exchange, prepared: Prepared, writer: ClientWriter) -> None:
        """One upstream request, its answer streamed through. Raises EngineError (502),
        EngineUnavailable (503)."""
        exchange.admitted_at = time.monotonic()
        await forward(self.state, self.method, self.path, exchange, prepared.body, writer)

    # -- around the stages -------------------------------------------------------------------

    async def refuse(self, arrival: Arrival, error: ApiError, send: Send) -> None:
        """Answer a request refused before it was queued, and account it."""
        if self.endpoint is not None:
            self.state.observer.rejected(
                arrival.request_id,
                error.status,
                str(error.code),
                arrival.at,
                arrival.tenant,
                arrival.request_class,
            )
        await send_error(send, error)

    async def run(
        self, exchange: Exchange, prepared: Prepared, receive: Receive, send: Send
    ) -> None:
        """Admit and relay until done or until the client leaves, whichever comes first."""
        work = asyncio.create_task(self._admit_and_relay(exchange, prepared, send))
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

    async def _admit_and_relay(self, exchange: Exchange, prepared: Prepared, send: Send) -> None:
        """The last two stages; their errors become OpenAI-shaped answers (in-band once the
        response has started). Admission's capacity is given back however it ends."""
        writer = ClientWriter(send, exchange)
        ticket: Ticket | None = None
        try:
            ticket = await self.admit(prepared)
            await self.relay(exchange, prepared, writer)
        except asyncio.CancelledError:
            if exchange.abort_error is None:
                raise  # the client left: nothing to answer
            await answer_error(writer, exchange.abort_error)
        except ApiError as error:
            await answer_error(writer, error)
        finally:
            if ticket is not None:
                self.state.admission.finish(ticket)


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
