"""The backend side of a relayed request: one request to one backend, its answer passed to the
client.

The request goes through the backend's pool (llmd/engine/wire.py, llmd's own HTTP/1.1 client);
the backend's body is forwarded chunk by chunk as it arrives, never waiting to fill a buffer (a
stream's chunks from the engine connection's callback while the client keeps up:
`ClientWriter.stream`). The answer is closed however the relay ends, never put
back in the pool mid-body: closing it is what makes vLLM abort the sequence; an answer read to its
end leaves its connection kept alive for the next request. A request whose kept-alive connection
the backend had closed before it reached the backend is sent once more on a new one (`Pool.post`;
one the backend may have taken is not: it would run twice). Failures of the
backend or of its connection become OpenAI-shaped errors here (the one place they are
translated), and are recorded in an upstream's circuit breaker: a refused or lost connection,
a timeout or a 5xx is a failure, any other answer a success (a 4xx is the request's fault: it
reaches the client as llmd's own errors do, llmd/proxy/refusals.py).
"""

from __future__ import annotations

import asyncio
import time

import structlog

from llmd.engine.connection import ConnectFailed, ConnectionLost
from llmd.errors import ApiError, EngineError, EngineUnavailable
from llmd.inflight import Exchange
from llmd.proxy.refusals import backend_refusal
from llmd.proxy.writer import ClientWriter
from llmd.routing.breaker import CircuitBreaker
from llmd.state import DaemonState

log = structlog.get_logger("llmd.proxy")
_UPSTREAM_LOST = (asyncio.TimeoutError, OSError)  # ConnectFailed, ConnectionLost are OSErrors


async def forward(
    state: DaemonState,
    backend: str,
    path: str,
    exchange: Exchange,
    body: bytes,
    writer: ClientWriter,
    *,
    content_type: str = "application/json",
    headers: dict[str, str] | None = None,
) -> None:
    """POST `body` (of `content_type`, with the client's `headers` the dialect passes on) to
    `path` on `backend` and relay its answer through `writer`; this function
    lets `body` go once sent (the caller keeps it only while a retry on another backend may
    still send it, llmd/routing/retry.py).

    Raises EngineUnavailable (503: the backend is not accepting, or answered 503) or
    EngineError (502: it failed, or its connection did, or a stream ended mid-event); whether
    the client has seen a byte by then is `exchange.response_started`.
    """
    client = state.fleet.client(backend)
    breaker = _breaker(state, backend)
    headers = {**(headers or {}), **client.pool_headers(), "x-request-id": exchange.request_id}
    headers["content-type"] = content_type
    headers.update(state.observer.tracing.outgoing(exchange))  # W3C traceparent, tracestate
    try:
        response = await client.pool().post(client.request_path(path), body, headers)
    except _UPSTREAM_LOST as exc:
        _record(breaker, failed=True)
        raise _connection_error(state, backend, exc) from exc
    del body  # sent (the backend answered): not kept here for the length of the generation
    try:
        _record(breaker, failed=response.status >= 500)
        if response.status >= 500:
            raise _engine_status_error(response.status, await response.read())
        if response.status >= 400:  # the client's input refused: a rejection, in llmd's shape
            retry_after = response.headers.get("retry-after")
            raise backend_refusal(response.status, await response.read(), retry_after)
        answer_type = response.headers.get("content-type", "application/json").encode()
        queue_ms = str(round(exchange.queue_ms())).encode()
        response_headers = [(b"content-type", answer_type), (b"x-llmd-queue-ms", queue_ms)]
        metadata = response.headers.get("metadata")  # vLLM's layout of a bytes embeddings body
        if metadata is not None:
            response_headers.append((b"metadata", metadata.encode("latin-1")))
        if not (exchange.stream and response.status == 200):
            payload = await response.read()
            response_headers.append((b"content-length", str(len(payload)).encode()))
            await writer.start(response.status, response_headers)
            await writer.body(payload, more=False)
            return
        await writer.start(200, [*response_headers, (b"cache-control", b"no-cache")])
        await writer.stream(response.content)
        if not (writer.between_events or writer.answer.done):
            raise EngineError("the engine closed the stream mid-event")  # a failure, not an end
        await writer.body(b"", more=False)
    except _UPSTREAM_LOST as exc:
        if writer.answer.done:  # lost after the stream's last event: the client has it all
            await writer.body(b"", more=False)
            return
        _record(breaker, failed=True)
        raise _connection_error(state, backend, exc) from exc
    finally:
        response.close()


def _breaker(state: DaemonState, backend: str) -> CircuitBreaker | None:
    """`backend`'s breaker (an upstream's; None for an engine, or one a reload removed)."""
    try:
        return state.admission.capacity.breaker(backend)
    except KeyError:
        return None


def _record(breaker: CircuitBreaker | None, *, failed: bool) -> None:
    if breaker is None:
        return
    if failed:
        breaker.record_failure(time.monotonic())
    else:
        breaker.record_success(time.monotonic())


def _connection_error(state: DaemonState, backend: str, exc: BaseException) -> ApiError:
    """The error for a lost or refused connection to `backend`, by what became of the request
    (DESIGN.md's error table), never by how soon the supervisor noticed an exit: no connection
    could be made, so nothing was sent (no engine to send to) → 503 `engine_unavailable` with
    Retry-After; it was sent and the connection was lost before the answer ended (the engine
    died under it) → 502 `engine_error`."""
    engine = state.fleet.engines.get(backend)
    if isinstance(exc, ConnectFailed):
        # Refused or missing socket: an engine that died a moment ago, or is between boots.
        if engine is not None and not engine.serving:
            return engine.unavailable_error()
        retry_after = engine.retry_after_s() if engine is not None else 1.0
        return EngineUnavailable(
            f"{backend} refused the connection (it may have just stopped); retry later",
            retry_after_s=retry_after,
        )
    if isinstance(exc, _CUT_OFF):
        return EngineError(
            f"{backend} closed the connection during the request (it may have exited; llmd "
            f"restarts an engine that exits): {type(exc).__name__}"
        )
    return EngineError(f"the engine connection failed: {type(exc).__name__}: {exc}".rstrip(": "))


# A connection the backend ended mid-request: reset, closed, or an answer cut short.
_CUT_OFF = (ConnectionLost, ConnectionResetError, BrokenPipeError)


def _engine_status_error(status: int, body: bytes) -> ApiError:
    """Translate an engine 5xx: 503 is 'unavailable, retry', anything else an engine error."""
    detail = body.decode(errors="replace")[:300]
    if status == 503:
        return EngineUnavailable(
            f"the engine is overloaded or not ready: {detail}", retry_after_s=1
        )
    return EngineError(f"the engine failed with HTTP {status}: {detail}")
