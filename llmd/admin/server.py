"""The admin API: a small pure-ASGI app served on the admin Unix socket.

Routes: `GET /status` (the Status snapshot), `POST /drain` (JSON body, optional
`{"deadline_s": S, "queued": "wait" | "reject"}`), `POST /resume`, `POST /restart`, `POST /reload`,
`POST /requests/{id}/cancel`. Access control is the socket's mode (0660: root and the llmd
group), set when the daemon binds it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from starlette.types import Receive, Scope, Send

from llmd.actions import OperatorActions
from llmd.errors import ConfigError
from llmd.status import Status

_CANCEL_PREFIX = "/requests/"
_CANCEL_SUFFIX = "/cancel"


class AdminApp:
    """ASGI app answering admin requests from `snapshot()` and acting through `actions`."""

    def __init__(self, snapshot: Callable[[], Status], actions: OperatorActions) -> None:
        self.snapshot = snapshot
        self.actions = actions

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # served with lifespan off
            return
        method, path = scope["method"], scope["path"]
        body = await _read_json(receive)
        if body is None:
            await _json(send, 400, _error("the body must be a JSON object", "invalid_request"))
            return
        try:
            status, payload = await self._route(method, path, body)
        except ConfigError as exc:
            status, payload = 400, _error(str(exc), "invalid_config")
        await _json(send, status, payload)

    async def _route(self, method: str, path: str, body: dict[str, Any]) -> tuple[int, Any]:
        if method == "GET" and path == "/status":
            return 200, self.snapshot().to_dict()
        if method != "POST":
            return 404, _error(f"no admin route {method} {path}", "not_found")
        if path == "/drain":
            deadline = body.get("deadline_s")
            if deadline is not None and (not isinstance(deadline, int | float) or deadline < 0):
                return 400, _error("deadline_s must be a number >= 0", "invalid_request")
            queued = body.get("queued", "wait")
            if queued not in ("wait", "reject"):
                return 400, _error("queued must be 'wait' or 'reject'", "invalid_request")
            return 200, self.actions.drain(deadline, reject_queued=queued == "reject")
        if path == "/resume":
            return 200, self.actions.resume()
        if path == "/restart":
            return 200, await self.actions.restart()
        if path == "/reload":
            return 200, self.actions.reload()
        if path.startswith(_CANCEL_PREFIX) and path.endswith(_CANCEL_SUFFIX):
            request_id = path[len(_CANCEL_PREFIX) : -len(_CANCEL_SUFFIX)]
            result = self.actions.cancel(request_id)
            if result is None:
                return 404, _error(f"no request {request_id} in flight", "not_found")
            return 200, result
        return 404, _error(f"no admin route {method} {path}", "not_found")


def _error(message: str, code: str) -> dict[str, Any]:
    return {
        "error": {"message": message, "type": "invalid_request_error", "param": None, "code": code}
    }


async def _read_json(receive: Receive) -> dict[str, Any] | None:
    """The request body as a JSON object ({} when empty); None when it is not one."""
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    raw = b"".join(chunks)
    if not raw.strip():
        return {}
    try:
        payload = json.loads(raw)
    except ValueError:
        return None
    return payload if isinstance(payload, dict) else None


async def _json(send: Send, status: int, payload: Any) -> None:
    body = json.dumps(payload).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
