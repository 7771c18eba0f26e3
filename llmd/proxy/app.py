"""The public ASGI app: routes, the shared upstream client's lifespan, error handlers, and the
middleware around them (outermost first): CORS → request id (and internal errors) → routes."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from prometheus_client import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from llmd.errors import (
    ApiError,
    InvalidRequest,
    MethodNotAllowed,
    NotFound,
    PermissionDenied,
)
from llmd.proxy.cors import Cors
from llmd.proxy.middleware import RequestIdMiddleware
from llmd.proxy.relay import Relay
from llmd.proxy.stalls import watch_stalls
from llmd.proxy.writer import ErrorResponse
from llmd.state import DaemonState


def build_app(state: DaemonState) -> Starlette:
    """The proxy app for `state`. The HTTP client to the engine's Unix socket
    (`state.upstream`) is open for the app's lifespan, which also loads the validator's
    tokenizer and runs the stall watcher."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with state.upstream.open():
            state.validator.start_loading()
            stalls = asyncio.create_task(watch_stalls(state), name="stall-watch")
            yield
            stalls.cancel()
            state.validator.close()

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def ready(request: Request) -> Response:
        error = state.unavailable()
        if error is not None:
            return ErrorResponse(error)
        return JSONResponse({"status": "ready", "model": state.engine.model})

    async def metrics(request: Request) -> Response:
        # With keys configured, /metrics names tenants and their traffic: only a key whose
        # tenant has `metrics = true` may read it (401 without a key, 403 with another).
        if state.admission.tenants.keys_required:
            tenant = state.admission.authenticate(request.scope["headers"])
            if not tenant.metrics:
                raise PermissionDenied(
                    f"tenant {tenant.name} may not read /metrics (set metrics = true in its "
                    "table of the tenants file)"
                )
        return Response(state.observer.metrics.exposition(), media_type=CONTENT_TYPE_LATEST)

    routes = [
        Route("/v1/chat/completions", Relay(state, "/v1/chat/completions"), methods=["POST"]),
        Route("/v1/completions", Relay(state, "/v1/completions"), methods=["POST"]),
        Route("/v1/models", Relay(state, "/v1/models", method="GET"), methods=["GET"]),
        Route("/health", health, methods=["GET"]),
        Route("/ready", ready, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
    ]
    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        exception_handlers={HTTPException: _http_exception, ApiError: _api_error},
    )
    # add_middleware puts each one outside those added before it.
    app.add_middleware(RequestIdMiddleware)
    app.add_middleware(Cors, server_config=lambda: state.config.server)
    return app


async def _http_exception(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        return ErrorResponse(NotFound(f"no route {request.method} {request.url.path}"))
    if exc.status_code == 405:
        allow = (exc.headers or {}).get("Allow", "")
        return ErrorResponse(
            MethodNotAllowed(
                f"{request.method} is not allowed on {request.url.path}; it takes {allow}",
                allow=allow,
            )
        )
    return ErrorResponse(InvalidRequest(str(exc.detail)))


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return ErrorResponse(exc)
