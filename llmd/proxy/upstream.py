"""The engine side of a relayed request: one upstream request, its answer passed to the client.

The upstream body is forwarded chunk by chunk as it arrives (`iter_any`: whatever the socket
has, never waiting to fill a buffer). The response is closed however the relay ends, never put
back in a pool mid-body: closing it is what makes vLLM abort the sequence. Failures of the
engine or of its connection become OpenAI-shaped errors here (the one place they are
translated).
"""

from __future__ import annotations

import asyncio

import aiohttp

from llmd.errors import ApiError, EngineError, EngineUnavailable
from llmd.proxy.inflight import Exchange
from llmd.proxy.writer import ClientWriter
from llmd.state import DaemonState

_UPSTREAM_LOST = (aiohttp.ClientError, asyncio.TimeoutError, OSError)


async def forward(
    state: DaemonState,
    method: str,
    path: str,
    exchange: Exchange,
    body: bytes,
    writer: ClientWriter,
) -> None:
    """Send `method path` with `body` to the engine and relay its answer through `writer`;
    `body` is let go once sent (the caller keeps no other reference).

    Raises EngineUnavailable (503: the engine is not accepting, or answered 503) or
    EngineError (502: it failed, or its connection did, or a stream ended mid-event).
    """
    headers = {**state.upstream.auth, "x-request-id": exchange.request_id}
    if body:
        headers["content-type"] = "application/json"
    try:
        response = await state.upstream.session().request(
            method, "http://engine" + path, data=body or None, headers=headers
        )
    except _UPSTREAM_LOST as exc:
        raise _connection_error(state, exc) from exc
    del body  # sent (the engine answered): not kept for the length of the generation
    try:
        if response.status >= 500:
            raise _engine_status_error(response.status, await response.read())
        content_type = response.headers.get("content-type", "application/json").encode()
        queue_ms = str(round(exchange.queue_ms())).encode()
        response_headers = [(b"content-type", content_type), (b"x-llmd-queue-ms", queue_ms)]
        if not (exchange.stream and response.status == 200):
            payload = await response.read()
            response_headers.append((b"content-length", str(len(payload)).encode()))
            await writer.start(response.status, response_headers)
            await writer.body(payload, more=False)
            return
        await writer.start(200, [*response_headers, (b"cache-control", b"no-cache")])
        async for chunk in response.content.iter_any():
            await writer.body(chunk, more=True)
        if not writer.between_events:  # the engine ended mid-event: a failure, not an ending
            raise EngineError("the engine closed the stream mid-event")
        await writer.body(b"", more=False)
    except _UPSTREAM_LOST as exc:
        raise _connection_error(state, exc) from exc
    finally:
        response.close()


def _connection_error(state: DaemonState, exc: BaseException) -> ApiError:
    """The error for a lost or refused engine connection."""
    # Refused or missing socket: the engine is not accepting (it died a moment ago, or is
    # between boots) and nothing was sent, so the client may simply retry.
    engine = state.engine
    if not engine.serving:
        return engine.unavailable_error()
    if isinstance(exc, aiohttp.ClientConnectorError):
        return EngineUnavailable(
            "the engine refused the connection (it may have just stopped); retry later",
            retry_after_s=engine.retry_after_s(),
        )
    return EngineError(f"the engine connection failed: {type(exc).__name__}: {exc}".rstrip(": "))


def _engine_status_error(status: int, body: bytes) -> ApiError:
    """Translate an engine 5xx: 503 is 'unavailable, retry', anything else an engine error."""
    detail = body.decode(errors="replace")[:300]
    if status == 503:
        return EngineUnavailable(
            f"the engine is overloaded or not ready: {detail}", retry_after_s=1
        )
    return EngineError(f"the engine failed with HTTP {status}: {detail}")
