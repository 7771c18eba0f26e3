"""The admin API: a small pure-ASGI app served on the admin Unix socket.
Access control is the socket's mode (0660: root and the llmd group), set when the daemon binds it.

    GET  /status                  the Status snapshot
    POST /drain                   optional {"deadline_s": S, "queued": "wait" | "reject",
                                  "engine": NAME}
    POST /resume, /restart        optional {"engine": NAME}: that engine only
    POST /wake, /sleep            {"engine": NAME}: wake an on-demand engine, or put it to
                                  sleep (llmd/daemon/swapping.py); answered once begun
    POST /reload
    POST /tenants/reload          read the tenants file again, and only it (`llmd tenant ...`);
                                  answers {"tenants": [NAME, ...]}
    POST /requests/{id}/cancel
    POST /guard                   {"mode": "off" | "on" | "level N"}: the SLO guard's override
                                  until the next reload; answers the guard's status
    POST /deploy                  {"release": NAME, "engine": NAME, "strategy": "replace" |
                                  "canary", "canary": "5,25,50,100", "step_s": S, "wait": true}
                                  (with `wait`, answered when the deploy ends); answers the
                                  deploy's snapshot
    POST /rollback                {"engine": NAME, "wait": true}; answers the deploy's snapshot

Bodies are JSON, read with the public API's limit (`server.max_body_bytes`); errors are
OpenAI-shaped, as on the public API, an unexpected failure included (500 internal_error, logged
`admin_request_failed`).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import structlog
from starlette.types import Receive, Scope, Send

from llmd.binding import MAX_DURATION_S
from llmd.daemon.actions import OperatorActions
from llmd.errors import (
    ActionRefused,
    ApiError,
    ConfigError,
    InvalidConfig,
    InvalidRequest,
    NotFound,
    ReleaseError,
)
from llmd.proxy.body import ClientGone, check_length, parse_object, read_body
from llmd.proxy.writer import send_error
from llmd.releases.orchestrator import Deployer
from llmd.state import DaemonState

log = structlog.get_logger("llmd.admin")

_CANCEL_PREFIX = "/requests/"
_CANCEL_SUFFIX = "/cancel"


class AdminApp:
    """ASGI app answering admin requests from `state` (its snapshot, its body size limit) and
    acting through `actions` and `deployer`."""

    def __init__(self, state: DaemonState, actions: OperatorActions, deployer: Deployer) -> None:
        self.state = state
        self.actions = actions
        self.deployer = deployer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # served with lifespan off
            return
        try:
            limit = self.state.config.server.max_body_bytes
            check_length(scope["headers"], limit)
            raw = await read_body(receive, limit)
            body = parse_object(raw) if raw.strip() else {}
            payload = await self._route(scope["method"], scope["path"], body)
        except ClientGone:
            return
        except ConfigError as exc:
            await send_error(send, InvalidConfig(str(exc)))
            return
        except ApiError as error:
            await send_error(send, error)
            return
        except Exception as exc:
            # A bug: answered in the same JSON shape (the CLI prints its message), logged.
            log.exception("admin_request_failed", method=scope["method"], path=scope["path"])
            message = f"{scope['path'].lstrip('/')} failed inside llmd ({type(exc).__name__})"
            await send_error(send, ApiError(f"{message}; the log has the traceback"))
            return
        await _json(send, 200, payload)

    async def _route(self, method: str, path: str, body: dict[str, Any]) -> Any:
        """The answer to `method path`. Raises ApiError (404 for no such route), ConfigError."""
        if method == "GET" and path == "/status":
            return self.state.snapshot().to_dict()
        if method != "POST":
            raise NotFound(f"no admin route {method} {path}")
        if path == "/drain":
            deadline = body.get("deadline_s")
            if deadline is not None and not _seconds(deadline):
                raise InvalidRequest(
                    f"deadline_s must be a number of seconds in 0..{MAX_DURATION_S} (30 days)",
                    param="deadline_s",
                )
            queued = body.get("queued", "wait")
            if queued not in ("wait", "reject"):
                raise InvalidRequest("queued must be 'wait' or 'reject'", param="queued")
            engine = _engine(body)
            if engine is not None and queued == "reject":
                raise InvalidRequest(
                    "queued 'reject' drains all of llmd, not one engine", param="queued"
                )
            return self.actions.drain(deadline, reject_queued=queued == "reject", engine=engine)
        if path == "/resume":
            return self.actions.resume(_engine(body))
        if path == "/restart":
            return await self.actions.restart(_engine(body))
        if path in ("/wake", "/sleep"):
            engine = _engine(body)
            if engine is None:
                raise InvalidRequest(f"{path[1:]} needs an engine", param="engine")
            return self.actions.swap(path[1:], engine)
        if path == "/reload":
            return self.actions.reload()
        if path == "/tenants/reload":
            admission = self.state.admission
            tenants = admission.reload_tenants()
            log.info("tenants_reloaded", tenants=len(tenants))
            return {"tenants": tenants, "tenants_file": admission.config.tenants_file}
        if path == "/guard":
            return _guard(self.state, body)
        if path in ("/deploy", "/rollback"):
            return await self._deploy(path, body)
        if path.startswith(_CANCEL_PREFIX) and path.endswith(_CANCEL_SUFFIX):
            request_id = path[len(_CANCEL_PREFIX) : -len(_CANCEL_SUFFIX)]
            result = self.actions.cancel(request_id)
            if result is None:
                raise NotFound(f"no request {request_id} in flight")
            return result
        raise NotFound(f"no admin route {method} {path}")

    async def _deploy(self, path: str, body: dict[str, Any]) -> Any:
        """Start a deploy or a rollback (ActionRefused, 409, carries a release error's reason);
        with `wait`, its snapshot once it ended (ActionRefused when llmd begins to stop
        first)."""
        engine = _engine(body)
        try:
            if path == "/rollback":
                snapshot = self.deployer.rollback(engine)
            else:
                release, strategy = body.get("release"), body.get("strategy", "replace")
                if not isinstance(release, str) or not isinstance(strategy, str):
                    raise InvalidRequest("release must be a release's name", param="release")
                steps, step_s = body.get("canary"), body.get("step_s")
                if not (steps is None or isinstance(steps, str)) or not (
                    step_s is None or (_seconds(step_s) and step_s > 0)
                ):
                    raise InvalidRequest(
                        f"canary is a string like 5,25,50,100; step_s in (0, {MAX_DURATION_S}]"
                    )
                snapshot = self.deployer.deploy(release, engine, strategy, steps, step_s)
        except ReleaseError as exc:
            raise ActionRefused(f"{path[1:]} refused: {exc}") from exc
        if body.get("wait"):
            # Ends at once, refused, when llmd begins to stop (the deploy is cut then).
            waited = self.deployer.wait(snapshot["engine"])
            return await self.actions.unless_stopping(path[1:], waited)
        return snapshot


def _seconds(value: object) -> bool:
    """Whether `value` is a JSON number of seconds in 0..MAX_DURATION_S."""
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and 0 <= value <= MAX_DURATION_S
    )


def _engine(body: dict[str, Any]) -> str | None:
    """The body's `engine` (None: every engine). Raises InvalidRequest for a non-string."""
    engine = body.get("engine")
    if engine is not None and not isinstance(engine, str):
        raise InvalidRequest("engine must be an engine's name", param="engine")
    return engine


def _guard(state: DaemonState, body: dict[str, Any]) -> Any:
    """Override the SLO guard with `body["mode"]`; its status. Raises InvalidRequest."""
    try:
        return dataclasses.asdict(state.admission.guard.override(str(body.get("mode"))))
    except ValueError as exc:
        raise InvalidRequest(str(exc), param="mode") from None


async def _json(send: Send, status: int, payload: Any) -> None:
    body = json.dumps(payload).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
