"""Pure ASGI middleware (never BaseHTTPMiddleware: it hides client disconnects, vllm#10087):
the request id (and the headers every answer on `/v1` carries), and the API key every `/v1`
request needs."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Set
from typing import Any

import structlog
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from llmd.endpoints.table import dialect_of
from llmd.errors import ApiError, InternalError
from llmd.proxy.writer import send_error

log = structlog.get_logger("llmd.proxy")
# A client's id is kept when it is 1-128 characters of printable ASCII, spaces and quotes
# included (a header value's own leading and trailing spaces are not part of it: RFC 9110
# §5.5); control characters, other bytes or a longer id get a fresh one.
_REQUEST_ID = re.compile(rb"^[\x20-\x7e]{1,128}$")
REQUEST_ID_KEY = "llmd.request_id"
# The `send` this middleware was given: a response's body may go there directly, past this
# middleware's and Starlette's exception handling's wrappers, which touch only a response's
# start (llmd/proxy/writer.py's ClientWriter does it for every streamed chunk, issue 20).
BODY_SEND_KEY = "llmd.body_send"
# The time a request spent in llmd's queue, on every answer on /v1 (README): 0 for an answer
# given before it was queued (a 401, 404, 405, a refused body), unless its route says more.
QUEUE_MS = b"x-llmd-queue-ms"
NOT_QUEUED = (QUEUE_MS, b"0")


def new_request_id() -> str:
    """A fresh request id: 32 lowercase hex digits of 128 random bits (as `uuid4().hex` looks,
    without its six fixed version bits). `os.urandom(16).hex()` is 0.5 µs, `uuid4().hex` 2.3 µs
    (issue 37 item 3: a fresh id is made for nearly every request)."""
    return os.urandom(16).hex()


def on_v1(path: str) -> bool:
    """Whether `path` is an OpenAI API path (`/v1` or under it)."""
    return path == "/v1" or path.startswith("/v1/")


class RequestIdMiddleware:
    """Keeps the client's `x-request-id` (printable ASCII, spaces included, <= 128 bytes) or
    makes one (32 hex digits), and answers an exception that escaped the routes (a bug in
    llmd) with that id.

    - The id is put in `scope["llmd.request_id"]` and echoed on the response.
    - An answer on `/v1` that does not say its queue time gets `x-llmd-queue-ms: 0` (a 404, 405,
      401 or 503 answered before any queue), so every `/v1` answer carries both.
    - The `send` under this middleware goes in `scope["llmd.body_send"]`, for a response's body.
    - An exception before the response started is answered 500 `internal_error`; either way it
      is logged once (`unexpected_error`, with the id and the traceback) and never reaches
      uvicorn, which would log it again without the id.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = next((v for k, v in scope["headers"] if k == b"x-request-id"), b"")
        request_id = given if _REQUEST_ID.match(given) else new_request_id().encode()
        scope[REQUEST_ID_KEY] = request_id.decode()
        scope[BODY_SEND_KEY] = send
        started = False
        v1 = on_v1(scope["path"])

        async def send_with_id(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                headers: list[Any] = list(message.get("headers", []))
                headers.append((b"x-request-id", request_id))
                if v1 and not any(name == QUEUE_MS for name, _ in headers):
                    headers.append(NOT_QUEUED)
                message = {**message, "headers": headers}
                started = True
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        except Exception as exc:
            log.error(
                "unexpected_error",
                request_id=scope[REQUEST_ID_KEY],
                method=scope.get("method"),
                path=scope.get("path"),
                response_started=started,
                error=repr(exc),
                exc_info=exc,
            )
            if not started:
                error = InternalError(scope[REQUEST_ID_KEY])
                await send_error(
                    send_with_id, error, dialect=dialect_of(scope["path"], scope["headers"])
                )


class KeyRequired:
    """Every request to a path under `/v1` passes `authenticate` (its ASGI headers: raises
    ApiError, InvalidApiKey when keys are configured and its key is missing or unknown)
    before its route, or a 404 or 405, answers it, so no `/v1` answer needs less than a
    generation request does. A POST to an `own_check` path (a relay) is passed on as it comes:
    the relay authenticates in its own first stage, where the refusal is accounted."""

    def __init__(
        self, app: ASGIApp, authenticate: Callable[[list[Any]], object], own_check: Set[str]
    ) -> None:
        self.app = app
        self.authenticate = authenticate
        self.own_check = own_check

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if (
            scope["type"] == "http"
            and on_v1(path)
            and not (scope["method"] == "POST" and path in self.own_check)
        ):
            try:
                self.authenticate(scope["headers"])
            except ApiError as error:
                await send_error(send, error, dialect=dialect_of(path, scope["headers"]))
                return
        await self.app(scope, receive, send)
