"""Operator actions on a running llmd: drain, resume, restart, reload, cancel a request.

The admin API and the daemon's signal handling call these; each returns a JSON-able summary.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import structlog

from llmd.errors import Draining, RequestCancelled
from llmd.state import DaemonState
from llmd.supervisor.supervisor import Supervisor

log = structlog.get_logger("llmd.actions")


class OperatorActions:
    """Drain, resume, restart and cancel over one proxy context and supervisor.

    `reload` is the daemon's config reload (it owns the config); it returns the keys that
    changed but need a restart.
    """

    def __init__(
        self, state: DaemonState, supervisor: Supervisor, reload: Callable[[], list[str]]
    ) -> None:
        self.state = state
        self.supervisor = supervisor
        self._reload = reload
        self._deadline: asyncio.Task[None] | None = None

    def drain(self, deadline_s: float | None = None, reject_queued: bool = False) -> dict[str, Any]:
        """Stop admitting (new requests get 503 `draining` with Retry-After); in-flight work
        finishes, and so does work queued in llmd unless `reject_queued`, which answers it 503
        `draining` now. After `deadline_s` seconds, what is still in flight ends with an in-band
        error. Idempotent; a new deadline replaces the old one."""
        self.state.draining = True
        if reject_queued:
            error = Draining("llmd is draining; queued requests were turned away", retry_after_s=5)
            self.state.admission.reject_queued(error)
        self._cancel_deadline()
        if deadline_s is not None:
            self._deadline = asyncio.create_task(self._end_after(deadline_s))
        log.info("drain_started", in_flight=len(self.state.inflight), deadline_s=deadline_s)
        return self.summary()

    def resume(self) -> dict[str, Any]:
        """Admit requests again (ends a drain and its deadline)."""
        self._cancel_deadline()
        self.state.draining = False
        log.info("drain_ended")
        return self.summary()

    async def wait_drained(self, deadline_s: float, hurry: asyncio.Event | None = None) -> int:
        """Wait until nothing is in flight, at most `deadline_s` (or until `hurry` is set), then
        end what remains in-band. How many requests were ended."""
        idle = asyncio.create_task(self.state.inflight.wait_idle(deadline_s))
        waits: set[asyncio.Future[Any]] = {idle}
        if hurry is not None:
            waits.add(asyncio.ensure_future(hurry.wait()))
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        for waiter in waits:
            waiter.cancel()
        if idle.done() and not idle.cancelled() and idle.result():
            return 0
        ended = self.state.inflight.abort_all(
            Draining("llmd is draining and the drain deadline passed", retry_after_s=1)
        )
        log.warning("drain_deadline_passed", ended=ended)
        await self.state.inflight.wait_idle(5.0)
        return ended

    async def restart(self) -> dict[str, Any]:
        """Drain (up to server.drain_timeout_s), restart the engine, resume admitting."""
        was_draining = self.state.draining
        self.drain()
        ended = await self.wait_drained(self.state.config.server.drain_timeout_s)
        restarted = await self.supervisor.restart()
        if not was_draining:
            self.resume()
        return {**self.summary(), "restarted": restarted, "ended": ended}

    def reload(self) -> dict[str, Any]:
        """Re-read the config file; what needs a restart is listed, not applied. Raises
        ConfigError when the file is invalid (nothing changes then)."""
        return {**self.summary(), "needs_restart": self._reload()}

    def cancel(self, request_id: str) -> dict[str, Any] | None:
        """End one in-flight request (in-band error for a stream). None when not found."""
        exchange = self.state.inflight.find(request_id)
        error = RequestCancelled("the request was cancelled by the operator")
        if exchange is None or not self.state.inflight.abort(exchange, error):
            return None
        log.warning("request_cancelled", request_id=request_id)
        return {"cancelled": request_id}

    def summary(self) -> dict[str, Any]:
        return {
            "draining": self.state.draining,
            "in_flight": len(self.state.inflight),
            "engine": self.state.engine.phase.value,
        }

    async def _end_after(self, deadline_s: float) -> None:
        await self.wait_drained(deadline_s)

    def _cancel_deadline(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
