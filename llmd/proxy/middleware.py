"""Pure ASGI middleware (never BaseHTTPMiddleware: it hides client disconnects, vllm#10087)."""

from __future__ import annotations

import re
import uuid
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

_REQUEST_ID = re.compile(rb"^[\x21-\x7e]{1,128}$")
REQUEST_ID_KEY = "llmd.request_id"


class RequestIdMiddleware:
    """Keeps the client's `x-request-id` (printable ASCII, <= 128 bytes) or makes one.

    The id is put in `scope["llmd.request_id"]` and echoed on the response.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = next((v for k, v in scope["headers"] if k == b"x-request-id"), b"")
        request_id = given if _REQUEST_ID.match(given) else uuid.uuid4().hex.encode()
        scope[REQUEST_ID_KEY] = request_id.decode()

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers: list[Any] = list(message.get("headers", []))
                headers.append((b"x-request-id", request_id))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_id)
