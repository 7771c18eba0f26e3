"""The admin API: a small pure-ASGI app served on the admin Unix socket.

Routes: `GET /status` (the Status snapshot as JSON). Access control is the socket's mode (0660,
root and the llmd group), set when the daemon binds it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from starlette.types import Receive, Scope, Send

from llmd.status import Status


class AdminApp:
    """ASGI app answering admin requests from `snapshot()`."""

    def __init__(self, snapshot: Callable[[], Status]) -> None:
        self.snapshot = snapshot

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # served with lifespan off
            return
        route = (scope["method"], scope["path"])
        if route == ("GET", "/status"):
            await _json(send, 200, self.snapshot().to_dict())
        else:
            await _json(
                send,
                404,
                {
                    "error": {
                        "message": f"no admin route {route[0]} {route[1]}",
                        "type": "invalid_request_error",
                        "param": None,
                        "code": "not_found",
                    }
                },
            )


async def _json(send: Send, status: int, payload: dict[str, Any]) -> None:
    body = json.dumps(payload).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
