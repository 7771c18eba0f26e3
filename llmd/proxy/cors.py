"""CORS by config: which web pages may call the API (`server.cors_allowed_origins`, none by
default).

- Starlette's `CORSMiddleware` (pure ASGI, so disconnects still reach the relay) does the work:
  preflights answered per the Fetch standard, `Access-Control-Allow-Origin` on every response of
  an allowed origin, streams included.
- llmd shapes its refused preflight as an OpenAI error and rebuilds it when a reload changes the
  origins.
- With no origins configured nothing is added: a preflight is then a 405 with `Allow`, and a
  browser refuses the call.
"""

from __future__ import annotations

from collections.abc import Callable

from starlette.datastructures import Headers
from starlette.middleware.cors import CORSMiddleware
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from llmd.config import ServerConfig
from llmd.errors import InvalidRequest
from llmd.proxy.writer import ErrorResponse

ALLOWED_METHODS = ("GET", "POST")
# Response headers a page may read beyond the CORS-safelisted ones.
EXPOSED_HEADERS = (
    "x-request-id",
    "x-llmd-queue-ms",
    "x-llmd-max-tokens-clamped",
    "x-llmd-max-tokens-capped",
    "retry-after",
)
PREFLIGHT_MAX_AGE_S = 600


class _OpenAIShapedCors(CORSMiddleware):
    """Starlette's CORS middleware, its refused preflight (a plain-text 400) an OpenAI error."""

    def preflight_response(self, request_headers: Headers) -> Response:
        response = super().preflight_response(request_headers)
        if response.status_code == 200:
            return response
        reason = bytes(response.body).decode()
        first = reason.removeprefix("Disallowed CORS ").split(",")[0]
        error = InvalidRequest(
            f"CORS preflight refused: {reason} (allowed origins: server.cors_allowed_origins; "
            f"methods: {', '.join(ALLOWED_METHODS)})",
            param="origin" if first == "origin" else "access-control-request-" + first,
        )
        error.extra_headers.append((b"vary", response.headers["vary"].encode()))
        return ErrorResponse(error)


class Cors:
    """Pure ASGI: CORS for the origins `server_config().cors_allowed_origins`, read at each
    request (a reload applies to the next one). Requests and answers pass untouched when none
    are configured."""

    def __init__(self, app: ASGIApp, server_config: Callable[[], ServerConfig]) -> None:
        self.app = app
        self.server_config = server_config
        self._origins: tuple[str, ...] = ()
        self._cors: ASGIApp = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        origins = self.server_config().cors_allowed_origins
        if scope["type"] != "http" or not origins:
            await self.app(scope, receive, send)
            return
        if origins != self._origins:
            self._cors = _OpenAIShapedCors(
                self.app,
                allow_origins=origins,
                allow_methods=ALLOWED_METHODS,
                allow_headers=("*",),  # any header the page asks for: the origin is the gate
                expose_headers=EXPOSED_HEADERS,
                max_age=PREFLIGHT_MAX_AGE_S,
            )
            self._origins = origins
        await self._cors(scope, receive, send)
