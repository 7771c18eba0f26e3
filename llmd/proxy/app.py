"""The public ASGI app: routes, the shared upstream client's lifespan, and error handlers."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import aiohttp
import structlog
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from llmd.errors import (
    ApiError,
    Draining,
    EngineUnavailable,
    InvalidRequest,
    MethodNotAllowed,
    NotFound,
)
from llmd.proxy.middleware import RequestIdMiddleware
from llmd.proxy.relay import Relay
from llmd.proxy.stalls import watch_stalls
from llmd.proxy.writer import ErrorResponse
from llmd.state import DaemonState
from llmd.validation.validator import Validator

log = structlog.get_logger("llmd.proxy")


def build_app(state: DaemonState) -> Starlette:
    """The proxy app for `state`. One aiohttp session to the engine's Unix socket lives in the
    app's lifespan.
    """
    sessions: list[aiohttp.ClientSession] = []

    def session() -> aiohttp.ClientSession:
        return sessions[0]

    validator = Validator(state.config, state.engine, session)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        # One connection per request (force_close): a Unix-socket connect costs microseconds,
        # and a pooled keep-alive connection that the engine's uvicorn has just timed out fails
        # the next request with "Can not write request body" (seen here under load).
        connector = aiohttp.UnixConnector(
            path=str(state.paths.engine_socket), limit=0, force_close=True
        )
        # No total timeout: a long generation is legitimate; drain and disconnects end requests.
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=10)
        async with aiohttp.ClientSession(
            connector=connector,
            timeout=timeout,
            auto_decompress=False,
            skip_auto_headers=("User-Agent",),
        ) as client:
            sessions.append(client)
            loading = asyncio.create_task(validator.load_tokenizer(), name="tokenizer-load")
            stalls = asyncio.create_task(watch_stalls(state), name="stall-watch")
            yield
            stalls.cancel()
            loading.cancel()
            validator.close()
            sessions.clear()

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def ready(request: Request) -> Response:
        if state.draining:
            error: ApiError = Draining(
                "llmd is draining", retry_after_s=state.config.server.drain_timeout_s
            )
        elif not state.engine.serving:
            error = EngineUnavailable(
                f"the engine is {state.engine.phase.value}",
                retry_after_s=state.engine.retry_after_s(),
            )
        else:
            return JSONResponse({"status": "ready", "model": state.engine.model})
        return ErrorResponse(error)

    async def metrics(request: Request) -> Response:
        return Response(state.observer.metrics.exposition(), media_type=CONTENT_TYPE_LATEST)

    routes = [
        Route(
            "/v1/chat/completions",
            Relay(state, session, "/v1/chat/completions", validator=validator),
            methods=["POST"],
        ),
        Route(
            "/v1/completions",
            Relay(state, session, "/v1/completions", validator=validator),
            methods=["POST"],
        ),
        Route("/v1/models", Relay(state, session, "/v1/models", method="GET"), methods=["GET"]),
        Route("/health", health, methods=["GET"]),
        Route("/ready", ready, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
    ]
    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        exception_handlers={HTTPException: _http_exception, Exception: _unexpected},
    )
    app.add_middleware(RequestIdMiddleware)
    return app


async def _http_exception(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        return ErrorResponse(NotFound(f"no route {request.method} {request.url.path}"))
    if exc.status_code == 405:
        return ErrorResponse(
            MethodNotAllowed(f"{request.method} is not allowed on {request.url.path}")
        )
    return ErrorResponse(InvalidRequest(str(exc.detail)))


async def _unexpected(request: Request, exc: Exception) -> Response:
    log.error("unexpected_error", path=request.url.path, error=repr(exc))
    return ErrorResponse(ApiError("internal error in llmd; see its log"))
