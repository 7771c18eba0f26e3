"""The Responses API around llmd's store (llmd/endpoints/store.py): the relay of `POST
/v1/responses` and `/v1/responses/input_tokens`, and the routes of stored responses.

    POST   /v1/responses               the relay's stages, the store around them (ResponsesRelay)
    POST   /v1/responses/input_tokens  counted here (the relay's COUNT answer)
    GET    /v1/responses/{id}          the stored response (404: not the tenant's, or gone)
    DELETE /v1/responses/{id}          {"id", "object": "response", "deleted": true}
    POST   /v1/responses/{id}/cancel   ends the tenant's response in flight; 400 for a finished one

The engine never keeps a response: it is always sent `store: false`, a `previous_response_id`
is expanded here into the input it continues (so any backend of the pool serves the next turn,
after an engine restart, a deploy or an llmd restart), and a response id of llmd's own is set
(vLLM 0.32 names the response after the body's `request_id`) so it is known while it runs.
"""

from __future__ import annotations

import dataclasses
import json
import time
import uuid
from collections.abc import Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import Scope, Send

from llmd.admission.tenants import Tenant
from llmd.endpoints.dialects import Dialect
from llmd.endpoints.responses import as_items, continued_input, input_items_page
from llmd.endpoints.responses_stream import ResponsesAnswer
from llmd.endpoints.store import ResponseStore
from llmd.endpoints.table import Answer, Endpoint
from llmd.engine.connection import Reply
from llmd.errors import ApiError, EngineError, InvalidRequest, NotFound, RequestCancelled
from llmd.inflight import Exchange
from llmd.proxy.departure import Departure
from llmd.proxy.intake import Arrival, Body
from llmd.proxy.middleware import BODY_SEND_KEY, NOT_QUEUED
from llmd.proxy.relay import Relay
from llmd.proxy.validation import Prepared, Validation
from llmd.proxy.writer import ClientWriter, ErrorResponse
from llmd.state import DaemonState


@dataclasses.dataclass
class Turn:
    """One `POST /v1/responses` as the store sees it: whose it is, its response id, whether to
    keep its answer, and the input items it answers (what a next turn continues)."""

    tenant: str
    response_id: str
    keep: bool
    context: list[dict[str, Any]]
    previous: str | None = None
    kept: bool = False


class ResponsesWriter(ClientWriter):
    """The client writer of a Responses answer, read by the endpoint's dialect
    (`ResponsesAnswer`): when its turn keeps it, the response object is stored before the
    bytes that complete it go out, so a retrieve sent the moment the answer ends finds it. An
    error after the first byte is the stream's `error` event; so is a stream the engine ends
    before its last event (raised here as EngineError, 502 in-band)."""

    def __init__(
        self,
        send: Send,
        exchange: Exchange,
        body_send: Send | None,
        store: ResponseStore,
        dialect: Dialect,
    ) -> None:
        super().__init__(send, exchange, body_send=body_send, dialect=dialect)
        assert isinstance(self.answer, ResponsesAnswer)
        self.reader: ResponsesAnswer = self.answer
        self.store = store
        self.turn: Turn | None = None

    def begin(self, turn: Turn) -> None:
        """Serve `turn`: keep its answer's response object when it asks for that."""
        self.turn = turn
        self.reader.keep = turn.keep

    async def body(self, chunk: bytes, *, more: bool) -> None:
        answer, turn, exchange = self.reader, self.turn, self.exchange
        if not (chunk or more) and exchange.stream and not answer.done:
            # The engine closed a stream before its last event (an error of its own, in chat's
            # form, or none): the client is told in the stream's own form, never left to guess.
            raise EngineError("the engine ended the stream before its last event")
        if chunk:
            exchange.progress_at = time.monotonic()  # llmd/daemon/watchdog.py reads it
        answer.feed(chunk, last=not more)
        if turn is not None and turn.keep and not turn.kept and answer.response is not None:
            turn.kept = True
            await self.store.put(
                turn.tenant, turn.response_id, turn.context, _as_stored(answer.response, turn)
            )
        await self.send_body(chunk, more=more)

    async def stream(self, content: Reply) -> None:
        """Each chunk through `body` (which may store the response before sending it), not
        the plain writer's one-frame path."""
        while chunk := await content.readany():
            await self.body(chunk, more=True)

    def stream_error(self, error: ApiError) -> bytes:
        return self.reader.error_event(error)


class ResponsesValidation(Validation):
    """The validate stage of an endpoint that reads the store: the turn is expanded first
    (`expand`), and a relayed one handed to `begin` (the relay's: `ResponsesRelay.begin`)."""

    def __init__(
        self,
        state: DaemonState,
        endpoint: Endpoint,
        store: ResponseStore,
        begin: Callable[[Exchange, Turn], None],
    ) -> None:
        super().__init__(state, endpoint)
        self.store = store
        self.begin = begin

    async def validate(
        self, arrival: Arrival, exchange: Exchange, tenant: Tenant, body: Body, model: str
    ) -> Prepared | dict[str, Any]:
        turn = await self.expand(tenant.name, body)
        if self.endpoint.answer is Answer.RELAY:
            self.begin(exchange, turn)
        return await super().validate(arrival, exchange, tenant, body, model)

    async def expand(self, tenant: str, body: Body) -> Turn:
        """The turn `body` asks for, its payload made what the engine is sent: the stored
        input and output of its `previous_response_id` before its own input, `store: false`,
        llmd's response id in `request_id` (the client's own, when it sent one). The bytes are
        made again. Raises InvalidRequest (400), NotFound (404: no such response of the
        tenant's), StoreUnavailable (503)."""
        payload = body.payload
        previous = payload.get("previous_response_id")
        store = payload.get("store")
        if not isinstance(store, bool | None):
            raise InvalidRequest("'store' must be a boolean", param="store")
        if previous is not None and (not isinstance(previous, str) or not previous):
            raise InvalidRequest(
                "'previous_response_id' must be a response id", param="previous_response_id"
            )
        items = as_items(payload.get("input")) if "input" in payload else []
        if previous is not None:
            stored = await self.store.get(tenant, previous)
            if stored is None:
                raise NotFound(
                    f"Response with id '{previous}' not found.", param="previous_response_id"
                )
            items = continued_input(stored.context, stored.response, items)
            payload["input"] = items
            del payload["previous_response_id"]
        response_id = payload.get("request_id")
        if not isinstance(response_id, str) or not response_id:
            response_id = f"resp_{uuid.uuid4().hex}"
        if self.endpoint.answer is Answer.RELAY:
            payload["store"] = False
            payload["request_id"] = response_id
        body.raw = json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()
        keep = store is not False and self.endpoint.answer is Answer.RELAY
        return Turn(tenant, response_id, keep, items, previous)


class ResponsesRelay(Relay):
    """The relay of an endpoint that reads the store (`Endpoint.stored`): a
    `previous_response_id` is expanded into the input at validation (`ResponsesValidation`;
    404 when the tenant has no such response); a relayed one is sent `store: false` and llmd's
    response id, and its answer kept when it asked (`store`, true unless false)."""

    def __init__(self, state: DaemonState, endpoint: Endpoint, store: ResponseStore) -> None:
        super().__init__(state, endpoint)
        self.store = store
        self.writers: dict[Exchange, ResponsesWriter] = {}
        # The responses running, by (tenant, response id): what a cancel ends.
        self.running: dict[tuple[str, str], Exchange] = {}
        self.validation = ResponsesValidation(state, endpoint, store, self.begin)

    def make_writer(self, send: Send, exchange: Exchange, scope: Scope) -> ClientWriter:
        if self.endpoint.answer is not Answer.RELAY:  # input_tokens: answered here, not read
            return super().make_writer(send, exchange, scope)
        body_send = scope.get(BODY_SEND_KEY)
        writer = ResponsesWriter(send, exchange, body_send, self.store, self.endpoint.dialect)
        self.writers[exchange] = writer
        return writer

    def begin(self, exchange: Exchange, turn: Turn) -> None:
        """Serve `turn` on `exchange`: its writer keeps the answer when the turn asks, and a
        cancel finds it in `running` until its relay ends."""
        self.writers[exchange].begin(turn)
        self.running[(turn.tenant, turn.response_id)] = exchange

    async def run(
        self,
        exchange: Exchange,
        arrival: Arrival,
        tenant: Tenant,
        body: Body,
        departure: Departure,
        writer: ClientWriter,
    ) -> None:
        try:
            await super().run(exchange, arrival, tenant, body, departure, writer)
        finally:
            self.writers.pop(exchange, None)
            turn = writer.turn if isinstance(writer, ResponsesWriter) else None
            if turn is not None and self.running.get((turn.tenant, turn.response_id)) is exchange:
                del self.running[(turn.tenant, turn.response_id)]


class StoredResponses:
    """The routes of stored responses, each answered for the request's tenant alone."""

    def __init__(self, state: DaemonState, store: ResponseStore, relay: ResponsesRelay) -> None:
        self.state = state
        self.store = store
        self.relay = relay

    async def retrieve(self, request: Request) -> Response:
        """`GET /v1/responses/{id}`: the response as it was answered (with the
        `previous_response_id` it continued). 404 when the tenant has none of that id."""
        tenant, response_id = self._whose(request)
        stored = await self.store.get(tenant, response_id)
        if stored is None:
            return _not_found(response_id)
        return JSONResponse(stored.response)

    async def input_items(self, request: Request) -> Response:
        """`GET /v1/responses/{id}/input_items`: the input items it answered, in OpenAI's list
        shape (`input_items_page`: `order`, `limit`, `after` from the query). 404 when the
        tenant has none of that id; 400 for a bad query value."""
        tenant, response_id = self._whose(request)
        stored = await self.store.get(tenant, response_id)
        if stored is None:
            return _not_found(response_id)
        query = dict(request.query_params)
        return JSONResponse(input_items_page(stored.context, response_id, query))

    async def delete(self, request: Request) -> Response:
        """`DELETE /v1/responses/{id}`: forgets it; 404 when the tenant has none of that id."""
        tenant, response_id = self._whose(request)
        if not await self.store.delete(tenant, response_id):
            return _not_found(response_id)
        return JSONResponse({"id": response_id, "object": "response", "deleted": True})

    async def cancel(self, request: Request) -> Response:
        """`POST /v1/responses/{id}/cancel`: ends the tenant's response of that id while it
        runs (its client gets a `cancelled` error, in-band once streaming); 400 for one that
        has finished (as vLLM 0.32 answers: only a response still running can be cancelled),
        404 for none."""
        tenant, response_id = self._whose(request)
        exchange = self.relay.running.get((tenant, response_id))
        # A response to keep is stored before the bytes that complete it go out: one stored
        # has finished, though its relay may not have ended yet (its client has it all).
        stored = await self.store.get(tenant, response_id)
        if exchange is not None and stored is None:
            error = RequestCancelled(f"response {response_id} was cancelled by its client")
            self.state.inflight.abort(exchange, error)
            return JSONResponse({"id": response_id, "object": "response", "status": "cancelled"})
        if stored is None:
            return _not_found(response_id)
        return ErrorResponse(
            InvalidRequest("Cannot cancel a synchronous response.", param="response_id"),
            [NOT_QUEUED],
        )

    def _whose(self, request: Request) -> tuple[str, str]:
        """The request's tenant (raises InvalidApiKey) and the response id in its path."""
        tenant = self.state.admission.authenticate(request.scope["headers"])
        return tenant.name, request.path_params["response_id"]


def _not_found(response_id: str) -> Response:
    error = NotFound(f"Response with id '{response_id}' not found.", param="response_id")
    return ErrorResponse(error, [NOT_QUEUED])


def _as_stored(response: dict[str, Any], turn: Turn) -> dict[str, Any]:
    """The response as retrieved: the `previous_response_id` it continued (the engine, which
    never saw it, answers null)."""
    if turn.previous is None:
        return response
    return {**response, "previous_response_id": turn.previous}
