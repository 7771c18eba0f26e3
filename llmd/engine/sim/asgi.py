"""The simulator's HTTP plumbing on Starlette requests and responses (vLLM 0.32 serves on
FastAPI, i.e. Starlette, under uvicorn): a route table answered as FastAPI answers unknown
paths and methods, each handler cancelled when its client disconnects, and SSE streams sent
chunk by chunk.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping

from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send

SSE_HEADERS = {"content-type": "text/event-stream; charset=utf-8"}


class SimRequest(Request):
    """A Starlette request that can be cut off (`cut`) and answered as a stream."""

    def __init__(self, scope: Scope, receive: Receive, send: Send) -> None:
        super().__init__(scope, receive, send)
        self.send = send
        self.dropped = False  # `cut` ran: nothing more is sent on this connection

    @property
    def mime_type(self) -> str:
        """The content-type without parameters, lower case; `application/octet-stream` when
        absent (RFC 9110 8.3)."""
        given = self.headers.get("content-type", "").partition(";")[0].strip().lower()
        return given or "application/octet-stream"

    def cut(self) -> None:
        """Abort the connection (no more bytes, a reset), as a dying engine process does.
        uvicorn gives an app no transport: it is reached through `send`, the bound method of
        uvicorn's RequestResponseCycle (httptools_impl and h11_impl, uvicorn 0.30-0.55)."""
        self.dropped = True
        transport = getattr(getattr(self.send, "__self__", None), "transport", None)
        if transport is not None:
            transport.abort()


class EventStream:
    """A 200 answer sent as it is written: `start` sends the head, each `write` one chunk at
    once (never buffered), `end` the end of the body. Writes after `SimRequest.cut` are
    dropped."""

    def __init__(self, request: SimRequest, headers: Mapping[str, str] = SSE_HEADERS) -> None:
        self.request = request
        self.headers = headers
        self.started = False
        self.ended = False

    async def start(self) -> None:
        self.started = True
        raw = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in self.headers.items()]
        await self._send({"type": "http.response.start", "status": 200, "headers": raw})

    async def write(self, data: bytes) -> None:
        if not self.started:
            await self.start()
        await self._send({"type": "http.response.body", "body": data, "more_body": True})

    async def end(self) -> None:
        if not self.started:
            await self.start()
        if not self.ended:
            self.ended = True
            await self._send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _send(self, message: dict[str, object]) -> None:
        if not self.request.dropped:
            await self.request.send(message)


class Dropped:
    """The answer of a request whose connection was cut: nothing is sent."""


DROPPED = Dropped()
Answer = Response | EventStream | Dropped
Handler = Callable[[SimRequest], Awaitable[Answer]]
Guard = Callable[[SimRequest], Response | None]


class Routes:
    """The ASGI app: handlers by path and method, answered as FastAPI answers (404 `{"detail":
    "Not Found"}`, 405 `{"detail": "Method Not Allowed"}`; GET routes answer HEAD too).
    `guard`, if set, may answer a request before routing (vLLM's API-key middleware)."""

    def __init__(self) -> None:
        self.table: dict[str, dict[str, Handler]] = {}
        self.guard: Guard | None = None

    def add_get(self, path: str, handler: Handler) -> None:
        self.table.setdefault(path, {}).update(GET=handler, HEAD=handler)

    def add_post(self, path: str, handler: Handler) -> None:
        self.table.setdefault(path, {})["POST"] = handler

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        request = SimRequest(scope, receive, send)
        refused = self.guard(request) if self.guard is not None else None
        if refused is not None:
            await refused(scope, receive, send)
            return
        methods = self.table.get(scope["path"])
        if methods is None:
            await JSONResponse({"detail": "Not Found"}, 404)(scope, receive, send)
        elif (handler := methods.get(scope["method"])) is None:
            allow = ", ".join(methods)
            answer = JSONResponse({"detail": "Method Not Allowed"}, 405, {"allow": allow})
            await answer(scope, receive, send)
        else:
            await answer_cancellable(handler, request)


async def answer_cancellable(handler: Handler, request: SimRequest) -> None:
    """Run `handler` and send its answer; cancel it the moment its client disconnects
    (vLLM 0.32's `with_cancellation`: the handler races `listen_for_disconnect`). The body is
    read first, so that afterwards the only message `receive` gives is the disconnect."""
    try:
        await request.body()
    except ClientDisconnect:
        return
    answering = asyncio.ensure_future(_answer(handler, request))
    gone = asyncio.ensure_future(_disconnect(request))
    await asyncio.wait((answering, gone), return_when=asyncio.FIRST_COMPLETED)
    if not answering.done():
        answering.cancel()
    gone.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await answering


async def _answer(handler: Handler, request: SimRequest) -> None:
    answer = await handler(request)
    if request.dropped:
        return
    if isinstance(answer, Response):
        await answer(request.scope, request.receive, request.send)
    elif isinstance(answer, EventStream):
        await answer.end()


async def _disconnect(request: SimRequest) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass
