"""The relay: one client request to an endpoint of the table (llmd/endpoints/table.py) through
named stages, like uvicorn's `Server._serve`, and run on a backend of its model's pool.

    authenticate → turn → check availability → read → route   the intake (intake.py)
    → validate                                                 validation.py: a `Prepared`
    → admit → relay                                            here, in one task per request

- Each stage is a small method with a typed result that raises an `ApiError` to refuse. A
  refusal before the request is live is answered at once and accounted; any other exception is
  a bug in llmd: 500 `internal_error` with the request id, logged once with its traceback
  and accounted as an error.
- From its first byte of validation the request is live (in the in-flight registry; a drain
  waits for it), in one task cancelled when its client goes (llmd/proxy/departure.py): one
  that leaves while waiting for its tokenizer turn is never counted, one that leaves while
  queued never reaches a backend, one that leaves mid-stream has its backend request closed
  (what makes vLLM abort the sequence, ENGINE.md).
- Admission picks the backend; one that fails before the client has a byte is tried once
  more on another of the pool (llmd/routing/retry.py). The bytes to send are dropped once the
  relay ends (a retry may need them until the first byte).
- Pure ASGI: the bytes to the client go through `writer.ClientWriter`, the backend side is
  `upstream.forward`.
"""

from __future__ import annotations

import asyncio
import functools
import json
import time
from typing import Any

import structlog
from starlette.types import Receive, Scope, Send

from llmd.admission.bodies import BodyHold
from llmd.admission.classes import Priority
from llmd.admission.requests import Ticket
from llmd.admission.tenants import Tenant
from llmd.endpoints.table import Endpoint, needs_of, serving
from llmd.errors import (
    ApiError,
    BackendRefused,
    InternalError,
    UnsupportedEndpoint,
)
from llmd.inflight import Exchange
from llmd.proxy.body import (
    ClientGone,
)
from llmd.proxy.chunked import CYCLE_KEY, ChunkedBody
from llmd.proxy.departure import Departure
from llmd.proxy.intake import Arrival, Body, Intake, check_control_headers
from llmd.proxy.middleware import BODY_SEND_KEY, NOT_QUEUED, REQUEST_ID_KEY
from llmd.proxy.tracecontext import trace_context
from llmd.proxy.upstream import forward
from llmd.proxy.validation import Prepared, Validation
from llmd.proxy.writer import ClientWriter, answer_error, send_error
from llmd.routing.retry import Retry, Tries
from llmd.state import DaemonState

log = structlog.get_logger("llmd.proxy")


class Relay:
    """ASGI endpoint relaying a POST to one of `endpoint`'s paths to a backend of the pool of
    the request's model (the same path there), or answering it here (the tokenizer's)."""

    def __init__(self, state: DaemonState, endpoint: Endpoint) -> None:
        self.state = state
        self.endpoint = endpoint
        self.intake = Intake(state, endpoint)
        self.validation = Validation(state, endpoint)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        arrival = Arrival(scope[REQUEST_ID_KEY], time.monotonic(), scope["headers"], scope["path"])
        hold: BodyHold | None = None
        try:
            intake = self.intake
            tenant = intake.authenticate(arrival)
            check_control_headers(arrival.headers)
            await intake.take_turn(tenant, arrival)
            intake.check_available()
            hold = intake.hold_body(arrival)
            cycle = scope.get(CYCLE_KEY)  # llmd's protocol: whether the body came with its head
            body = await intake.read(arrival, receive, hold, whole=not _more_body(cycle))
            model = await intake.route(arrival, body)
        except ClientGone:
            if hold is not None:
                hold.release()
            return
        except ApiError as error:
            if hold is not None:
                hold.release()
            await self.refuse(arrival, error, send)
            return
        except Exception as exc:
            if hold is not None:
                hold.release()
            await self.fail(arrival, exc, send)
            return
        exchange = Exchange(
            arrival.request_id,
            body.stream,
            started_at=arrival.at,
            tenant=arrival.tenant,
            model=model,
            endpoint=self.endpoint.name,
            path=arrival.path,
            trace_context=trace_context(arrival.headers),
        )
        writer = self.make_writer(send, exchange, scope)
        try:
            departure = Departure(receive, scope.get(CYCLE_KEY))
            await self.run(exchange, arrival, tenant, body, departure, writer)
        finally:
            body.release()

    def make_writer(self, send: Send, exchange: Exchange, scope: Scope) -> ClientWriter:
        """The writer of `exchange`'s answer, read by the endpoint's dialect (a relay that
        reads answers its own way overrides this: llmd/proxy/responses.py)."""
        cycle = scope.get(CYCLE_KEY)
        return ClientWriter(
            send,
            exchange,
            body_send=scope.get(BODY_SEND_KEY),
            dialect=self.endpoint.dialect,
            chunked=None if cycle is None else ChunkedBody(cycle),
        )

    # -- the stages, in order ----------------------------------------------------------------

    async def answer(self, writer: ClientWriter, answer: dict[str, Any]) -> None:
        """Answer the client here with `answer` as JSON (200), as the engine would have."""
        payload = json.dumps(answer, separators=(",", ":")).encode()
        await writer.start(
            200,
            [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
                (b"x-llmd-queue-ms", b"0"),
            ],
        )
        await writer.body(payload, more=False)

    async def admit(self, exchange: Exchange, prepared: Prepared) -> Ticket:
        """Charge the tenant's token budgets, then wait in admission's queue until a backend of
        the request's pool may take it (the ticket's `entry.backend`); the answer gets the
        x-ratelimit-*-tokens headers of a tenant with budgets. Raises BudgetExceeded,
        RateLimited, QueueFull (429), QueueTimeout, Draining (503)."""
        exchange.queued_at = time.monotonic()
        ticket = await self.state.admission.admit(prepared.request)
        prepared.response_headers.extend(ticket.ratelimit)
        return ticket

    async def relay(
        self,
        exchange: Exchange,
        prepared: Prepared,
        body: Body,
        writer: ClientWriter,
        ticket: Ticket,
    ) -> None:
        """One backend request, its answer streamed through; a backend that fails before the
        client has a byte is tried once more on another backend of the pool (none left, or a
        failure after the first byte: the error goes to the client). The body's budget share
        is given back as it goes. Raises EngineError (502), EngineUnavailable (503)."""
        exchange.admitted_at = time.monotonic()
        body.release()
        admission = self.state.admission
        tries = Tries()
        if ticket.entry.cls is Priority.INTERACTIVE:  # it holds batch off its device until then
            writer.on_first_byte = functools.partial(admission.first_byte, ticket)
        backend = ticket.entry.backend
        assert backend is not None
        while True:
            tries.sent(backend)
            exchange.backend = backend
            if exchange.usage_hidden:
                exchange.fingerprint = self.state.fleet.fingerprint(backend) or b""
            data = prepared.priority_body if backend in admission.gates.priority_backends else b""
            try:
                await forward(
                    self.state,
                    backend,
                    exchange.path,
                    exchange,
                    data or prepared.body,
                    writer,
                    content_type=prepared.content_type,
                    headers=prepared.passed_on,
                )
                return
            except ApiError as error:
                if error.status < 500:  # the backend refused the request itself: never resent
                    raise self.unserved(error, exchange) from None
                decision = tries.after_failure(response_started=exchange.response_started)
                moved = None
                if isinstance(decision, Retry):
                    moved = admission.reroute(ticket, decision.exclude)
                if moved is None:
                    raise
                self.state.observer.retried(backend, exchange.model)
                log.warning(
                    "request_retried",
                    request_id=exchange.request_id,
                    failed=backend,
                    backend=moved,
                    code=error.reason,
                    error=error.message,
                )
                backend = moved

    def unserved(self, error: ApiError, exchange: Exchange) -> ApiError:
        """`error` as the client sees it: a backend's FastAPI 404 for the path (vLLM answers
        `{"detail": "Not Found"}` for a route its runner does not register) says its engine
        is of another kind than its flags told: UnsupportedEndpoint (400), as llmd answers it
        before sending; any other refusal as it is."""
        if not (
            isinstance(error, BackendRefused) and error.status == 404 and error.code == "not_found"
        ):
            return error
        if error.message != "Not Found":
            return error
        model = str(exchange.model)
        others = [
            m
            for m in self.state.admission.capacity.models()
            if m != model and serving(self.endpoint, self.state.fleet.kinds_of(m))
        ]
        return UnsupportedEndpoint(exchange.path, model, None, others, needs_of(self.endpoint))

    # -- around the stages -------------------------------------------------------------------

    async def refuse(self, arrival: Arrival, error: ApiError, send: Send) -> None:
        """Answer a request refused before it was queued, and account it."""
        self.state.observer.rejected(
            arrival.request_id,
            error.status,
            error.reason,
            arrival.at,
            arrival.tenant,
            arrival.request_class,
            arrival.model,
            endpoint=self.endpoint.name,
        )
        await send_error(send, error, [NOT_QUEUED], self.endpoint.dialect)

    async def fail(self, arrival: Arrival, exc: Exception, send: Send) -> None:
        """Answer 500 for an exception a stage raised unexpectedly (a bug in llmd): logged once,
        with the request id and the traceback, and accounted as an error."""
        log.error("unexpected_error", request_id=arrival.request_id, error=repr(exc), exc_info=exc)
        error = InternalError(arrival.request_id)
        self.state.observer.finished(
            Exchange(
                arrival.request_id,
                stream=False,
                started_at=arrival.at,
                tenant=arrival.tenant,
                request_class=arrival.request_class,
                status=error.status,
                error_code=error.reason,
                ended_at=time.monotonic(),
                model=arrival.model,
                endpoint=self.endpoint.name,
            )
        )
        await send_error(send, error, [NOT_QUEUED], self.endpoint.dialect)

    async def run(
        self,
        exchange: Exchange,
        arrival: Arrival,
        tenant: Tenant,
        body: Body,
        departure: Departure,
        writer: ClientWriter,
    ) -> None:
        """Validate, admit and relay until done or until the client leaves, whichever comes
        first (`departure`: the connection's protocol cancels the work when the client goes,
        with no task of its own; else a watcher task on `receive`). A client that leaves once
        it has its whole answer (a stream's `[DONE]`) while the backend has not closed its
        side yet has not cancelled anything."""
        work = asyncio.create_task(self._serve(exchange, arrival, tenant, body, writer))
        exchange.task = work
        self.state.inflight.add(exchange)
        try:
            if departure.by_protocol:
                departure.watch(functools.partial(_client_gone, exchange, work))
                try:
                    await work  # its outcome is read below; cancelling this task cancels it
                except asyncio.CancelledError:
                    if _cancelling():  # this task itself was cancelled, not only the work
                        raise
                except Exception:  # the work's failure: logged below
                    pass
            else:
                watcher = departure.watch(lambda: None)
                assert watcher is not None
                await asyncio.wait({work, watcher}, return_when=asyncio.FIRST_COMPLETED)
                _client_gone(exchange, work)
        finally:
            departure.stop()
            if not work.done():
                work.cancel()
                await asyncio.wait({work})
            self.state.inflight.remove(exchange)
            exchange.ended_at = time.monotonic()
        if not work.cancelled() and (exc := work.exception()) is not None:
            exchange.error_code = exchange.error_code or "internal_error"
            log.error("relay_failed", request_id=exchange.request_id, error=repr(exc))
        self.state.observer.finished(exchange)

    async def _serve(
        self, exchange: Exchange, arrival: Arrival, tenant: Tenant, body: Body, writer: ClientWriter
    ) -> None:
        """The last three stages; their errors become OpenAI-shaped answers (in-band once the
        response has started), a rejection when the request never reached a backend.
        Admission's capacity is given back however it ends."""
        ticket: Ticket | None = None
        prepared: Prepared | None = None
        try:
            model = str(exchange.model)
            validated = await self.validation.validate(arrival, exchange, tenant, body, model)
            if isinstance(validated, dict):  # answered here, by llmd's tokenizer
                await self.answer(writer, validated)
                return
            prepared = validated
            # Validation's notes (and the SLO guard's cap, added to the same list) go on the
            # response's start.
            writer.headers = prepared.response_headers
            ticket = await self.admit(exchange, prepared)
            prepared.cap(self.state.admission.guard)  # released under the guard's cap
            await self.relay(exchange, prepared, body, writer, ticket)
        except asyncio.CancelledError:
            if exchange.abort_error is None:
                raise  # the client left: nothing to answer
            await answer_error(writer, exchange.abort_error)
        except ApiError as error:
            # A rejection: refused before a backend, or by a backend for the client's input.
            exchange.rejected = exchange.admitted_at is None or error.status < 500
            await answer_error(writer, error)
        except Exception as exc:  # a bug in llmd: answered 500, logged once with its traceback
            log.error(
                "unexpected_error", request_id=exchange.request_id, error=repr(exc), exc_info=exc
            )
            await answer_error(writer, InternalError(exchange.request_id), log_it=False)
        finally:
            body.release()
            if prepared is not None:
                prepared.drop()
            if ticket is not None:
                self.state.admission.finish(ticket, exchange.output_tokens)


def _more_body(cycle: Any) -> bool:
    """Whether the request's body is still to come, as far as its uvicorn `cycle` (None: not
    llmd's protocol, unknown: True) knows: False once the parser has seen its end."""
    return cycle is None or bool(cycle.more_body)


def _cancelling() -> bool:
    """Whether the running task has a cancellation asked of it (asyncio's `cancelling`)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def _client_gone(exchange: Exchange, work: asyncio.Task[None]) -> None:
    """The client has gone (or, by `receive`, its response completed): `work` is cancelled,
    and counted as a cancellation (by phase) unless it was done or its answer all sent."""
    if not work.done():
        if not exchange.answered:
            exchange.client_gone = True  # the observer counts it, by phase
            log.debug("client_disconnected", request_id=exchange.request_id, phase=exchange.phase)
        work.cancel()
