"""The public ASGI app: routes, the backends' clients' lifespan, error handlers, and the
middleware around them (outermost first): CORS → request id (and internal errors) → the API
key of `/v1` routes → routes; a generation request takes a shorter way to its relay when CORS
is off (`ProxyApp`)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from llmd.config import ServerConfig
from llmd.endpoints.store import ResponseStore
from llmd.endpoints.table import by_path
from llmd.errors import (
    ApiError,
    InvalidRequest,
    MethodNotAllowed,
    ModelNotFound,
    NotFound,
    PermissionDenied,
)
from llmd.proxy.cors import Cors
from llmd.proxy.middleware import NOT_QUEUED, KeyRequired, RequestIdMiddleware
from llmd.proxy.relay import Relay
from llmd.proxy.responses import ResponsesRelay, StoredResponses
from llmd.proxy.stalls import watch_stalls
from llmd.proxy.writer import ErrorResponse
from llmd.state import DaemonState


class ProxyApp:
    """Pure ASGI, outermost: a POST to a relay's path goes straight to that relay under the
    request-id middleware alone while no CORS origins are configured (`server_config()`, read
    at each request); every other request, and every one while CORS is on, goes through
    `app`, Starlette's stack. The relay answers each of its errors itself (OpenAI-shaped,
    with the request id; a bug's exception is the request-id middleware's 500), so the stack
    has nothing to add to it but a frame per send of every streamed chunk (issue 20)."""

    def __init__(
        self,
        app: ASGIApp,
        relays: dict[str, ASGIApp],
        server_config: Callable[[], ServerConfig],
    ) -> None:
        self.app = app
        self.relays = {path: RequestIdMiddleware(relay) for path, relay in relays.items()}
        self.server_config = server_config

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            relay = self.relays.get(scope["path"])
            if relay is not None and not self.server_config().cors_allowed_origins:
                await relay(scope, receive, send)
                return
        await self.app(scope, receive, send)


def build_app(state: DaemonState, store: ResponseStore | None = None) -> ProxyApp:
    """The proxy app for `state`, keeping Responses in `store` (None: one in memory). The
    backends' HTTP clients and the store are closed at the end of the app's lifespan, which
    also loads the validators' tokenizers and runs the stall watcher."""
    store = store or ResponseStore(None, lambda: state.config.responses)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        state.validators.start_loading()
        stalls = asyncio.create_task(watch_stalls(state), name="stall-watch")
        try:
            yield
        finally:
            stalls.cancel()
            state.validators.close()
            await state.fleet.close()
            store.close()

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def ready(request: Request) -> Response:
        """200 when every model llmd serves (or `?model=NAME`) has a backend that can take a
        request now, or engines asleep on demand that will wake for it (listed in `asleep`);
        else 503 with the reason and Retry-After (404: no such model)."""
        model = request.query_params.get("model")
        error = state.not_ready(model)
        if error is not None:
            return ErrorResponse(error)
        capacity, now = state.admission.capacity, time.monotonic()
        models = [model] if model is not None else list(capacity.models())
        asleep = [m for m in models if capacity.wake_s(m, now) is not None]
        return JSONResponse(
            {"status": "ready", "model": models[0], "models": models, "asleep": asleep}
        )

    async def models(request: Request) -> Response:
        """The models llmd serves, the union of its backends' (each with a backend's own card:
        max_model_len, root), as vLLM's `/v1/models` answers. 503 while llmd drains or no
        model has a backend that can take a request."""
        capacity, now = state.admission.capacity, time.monotonic()
        error = state.unavailable()
        served = [
            m for m in capacity.models()
            if capacity.available(m, now) or capacity.wake_s(m, now) is not None
        ]  # fmt: skip
        if error is None and not served:
            error = min(
                (state.pool_unavailable(m) for m in capacity.models()),
                key=lambda e: e.retry_after_s or 0.0,
                default=None,
            )
        if error is not None:
            return ErrorResponse(error, [NOT_QUEUED])
        cards = [state.fleet.card(model) for model in capacity.models()]
        if "anthropic-version" in request.headers:  # Claude Code reads Anthropic's shape
            return JSONResponse(anthropic_models(cards), headers={"x-llmd-queue-ms": "0"})
        return JSONResponse({"object": "list", "data": cards}, headers={"x-llmd-queue-ms": "0"})

    async def root(request: Request) -> Response:
        """`GET /` and `HEAD /`: 200, which clients such as Claude Code probe at start."""
        return JSONResponse({"status": "ok", "service": "llmd"})

    async def model(request: Request) -> Response:
        """One model's card, as in `/v1/models` (vLLM has only the list; the openai client's
        `models.retrieve` asks for this), in Anthropic's shape when the request has an
        `anthropic-version` header, as the list is (the anthropic client's
        `models.retrieve`). 404 `model_not_found` for a model llmd does not serve (in the same
        shape: `ErrorResponse` reads it from the header, `dialect_of`); 503 while llmd drains."""
        model_id = request.path_params["model"]
        error = state.unavailable()
        if error is not None:
            return ErrorResponse(error, [NOT_QUEUED])
        served = list(state.admission.capacity.models())
        if model_id not in served:
            names = state.engine.api.names_models_when_not_found
            return ErrorResponse(ModelNotFound(model_id, served, names), [NOT_QUEUED])
        card = state.fleet.card(model_id)
        if "anthropic-version" in request.headers:
            card = anthropic_models([card])["data"][0]
        return JSONResponse(card, headers={"x-llmd-queue-ms": "0"})

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

    relays: dict[str, Relay] = {
        path: ResponsesRelay(state, endpoint, store) if endpoint.stored else Relay(state, endpoint)
        for path, endpoint in by_path().items()
    }
    responses = relays["/v1/responses"]
    assert isinstance(responses, ResponsesRelay)
    stored = StoredResponses(state, store, responses)
    routes = [
        *(Route(path, relay, methods=["POST"]) for path, relay in relays.items()),
        Route("/v1/responses/{response_id}", stored.retrieve, methods=["GET"]),
        Route("/v1/responses/{response_id}", stored.delete, methods=["DELETE"]),
        Route("/v1/responses/{response_id}/cancel", stored.cancel, methods=["POST"]),
        Route("/v1/responses/{response_id}/input_items", stored.input_items, methods=["GET"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/v1/models/{model:path}", model, methods=["GET"]),
        Route("/health", health, methods=["GET"]),
        Route("/", root, methods=["GET", "HEAD"]),
        Route("/ready", ready, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
    ]
    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        exception_handlers={HTTPException: _http_exception, ApiError: _api_error},
    )
    # A path with a trailing slash is an unknown route (404 in its dialect), not Starlette's
    # 307 to a Location built from the client's Host header.
    app.router.redirect_slashes = False
    # add_middleware puts each one outside those added before it.
    app.add_middleware(  # admission is read at each request: a reload may replace its tenants
        KeyRequired,
        authenticate=lambda headers: state.admission.authenticate(headers),
        own_check=frozenset(relays),
    )
    app.add_middleware(RequestIdMiddleware)
    app.add_middleware(Cors, server_config=lambda: state.config.server)
    return ProxyApp(app, dict(relays), lambda: state.config.server)


def anthropic_models(cards: list[dict[str, Any]]) -> dict[str, Any]:
    """OpenAI model `cards` as Anthropic's model list (`type: "model"`, `id`,
    `display_name`, `created_at` in RFC 3339, `has_more`, `first_id`, `last_id`), with the
    context length kept beside them."""
    data = [
        {
            "type": "model",
            "id": card["id"],
            "display_name": card["id"],
            "created_at": _rfc3339(card.get("created")),
            **({"max_model_len": card["max_model_len"]} if "max_model_len" in card else {}),
        }
        for card in cards
    ]
    first, last = (data[0]["id"], data[-1]["id"]) if data else (None, None)
    return {"data": data, "has_more": False, "first_id": first, "last_id": last}


def _rfc3339(unix_s: object) -> str:
    seconds = unix_s if isinstance(unix_s, int | float) else 0
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


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
