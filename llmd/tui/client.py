"""llmd-top's one door to the daemon: the admin API on its Unix socket (no widgets here).

Every call goes through `llmd.admin.client.admin_request`; failures arrive as `AdminUnreachable`
(no daemon, permission denied, no answer in time) or `AdminRefused` (the daemon said no).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from llmd.admin.client import AdminRefused, AdminUnreachable, admin_request

__all__ = ["AdminRefused", "AdminUnreachable", "DaemonClient", "Snapshot"]

# The Status snapshot as JSON (llmd.status.Status.to_dict): what every panel renders.
Snapshot = dict[str, Any]
# What an action answers: the daemon's summary (draining, in_flight, engine, ...).
Answer = dict[str, Any]
STATUS_TIMEOUT_S = 5.0
# A restart drains first (up to server.drain_timeout_s) and then boots the engine.
RESTART_TIMEOUT_S = 600.0


class DaemonClient:
    """The admin API of the daemon listening on `socket`."""

    def __init__(self, socket: Path) -> None:
        self.socket = socket

    async def status(self) -> Snapshot:
        """GET /status: the Status snapshot. Raises AdminUnreachable, AdminRefused."""
        answer: Snapshot = await self._call("GET", "/status", timeout_s=STATUS_TIMEOUT_S)
        return answer

    async def drain(self, engine: str | None = None) -> Answer:
        """POST /drain without a deadline: stop admitting, let in-flight work finish (with
        `engine`: that engine only takes no new request)."""
        return await self._call("POST", "/drain", _engine(engine))

    async def resume(self, engine: str | None = None) -> Answer:
        """POST /resume: admit requests again (with `engine`: that engine takes requests
        again)."""
        return await self._call("POST", "/resume", _engine(engine))

    async def restart(self, engine: str | None = None) -> Answer:
        """POST /restart: drain, restart the engines (with `engine`: that one), resume
        (answers when it is done)."""
        return await self._call("POST", "/restart", _engine(engine), timeout_s=RESTART_TIMEOUT_S)

    async def wake(self, engine: str) -> Answer:
        """POST /wake: wake on-demand `engine` (answered once the wake has begun)."""
        return await self._call("POST", "/wake", _engine(engine))

    async def sleep(self, engine: str) -> Answer:
        """POST /sleep: put on-demand `engine` to sleep (answered once begun)."""
        return await self._call("POST", "/sleep", _engine(engine))

    async def rollback(self, engine: str | None = None) -> Answer:
        """POST /rollback: abort the deploy in progress on `engine` (answered at once; the old
        release takes all traffic back)."""
        return await self._call("POST", "/rollback", _engine(engine))

    async def cancel(self, request_id: str) -> Answer:
        """POST /requests/{id}/cancel: end that request (in-band error for a stream)."""
        return await self._call("POST", f"/requests/{request_id}/cancel")

    async def _call(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        timeout_s: float = 30.0,
    ) -> Answer:
        answer: Answer = await admin_request(self.socket, method, path, body, timeout_s)
        return answer


def _engine(engine: str | None) -> dict[str, Any]:
    """The body naming one engine, or none (every engine)."""
    return {"engine": engine} if engine is not None else {}
