"""Operator actions on a running llmd: drain, resume, restart, reload, cancel, and shutdown.

The admin API and the daemon's signal handling call these; each returns a JSON-able summary or
raises ActionRefused (409) when it makes no sense in llmd's current state. They run one at a
time: a restart (it waits for the drain and for the new engine) or a shutdown is under way until
it ends, and what else may happen then is:

    asked \\ under way   restart                              shutdown
    drain               yes (admission stays closed after)   refused: shutting down
    resume              refused: the restart resumes         refused: shutting down
    restart             refused: one is under way            refused: shutting down
    reload              refused: reload after it             refused: shutting down
    cancel              yes                                  yes

A reload never yields to the event loop, so nothing runs during one.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

import structlog

from llmd.errors import ActionRefused, Draining, RequestCancelled
from llmd.reload import ReloadPlan
from llmd.state import DaemonState
from llmd.supervisor.supervisor import Supervisor

log = structlog.get_logger("llmd.actions")

RESTART = "restart"
SHUTDOWN = "shutdown"
_WHY = {
    RESTART: "a restart is under way",
    SHUTDOWN: "llmd is shutting down",
}


class ConfigOwner(Protocol):
    """The daemon: it owns the config and applies it to every part."""

    def reload(self) -> ReloadPlan:
        """Read the config file again and apply it. Raises ConfigError (nothing changed)."""
        ...

    def apply_pending_engine(self) -> list[str]:
        """Apply the engine table a reload kept pending; the keys it changed."""
        ...


class OperatorActions:
    """Drain, resume, restart, reload, cancel and shutdown over one daemon state and its
    supervisor, one at a time (see the module docstring)."""

    def __init__(self, state: DaemonState, supervisor: Supervisor, owner: ConfigOwner) -> None:
        self.state = state
        self.supervisor = supervisor
        self.owner = owner
        self.under_way: str | None = None
        # The operator asked for a drain that no resume has ended: admission stays closed
        # after a restart.
        self._drain_asked = False
        self._deadline: asyncio.Task[int] | None = None

    def drain(self, deadline_s: float | None = None, reject_queued: bool = False) -> dict[str, Any]:
        """Stop admitting (new requests get 503 `draining` with Retry-After); in-flight work
        finishes, and so does work queued in llmd unless `reject_queued`, which answers it 503
        `draining` now (and those still being validated as they reach admission, until a
        resume). After `deadline_s` seconds, what is still in flight ends with an in-band
        error. Idempotent; a new deadline replaces the old one. Refused during shutdown."""
        self._refuse_during("drain", SHUTDOWN)
        self._drain_asked = True
        self.state.draining = True
        if reject_queued:
            error = Draining("llmd is draining; queued requests were turned away", retry_after_s=5)
            self.state.admission.reject_queued(error)
        self._cancel_deadline()
        if deadline_s is not None:
            self._deadline = asyncio.create_task(self.wait_drained(deadline_s))
        log.info(
            "drain_started",
            in_flight=self.state.inflight.relayed(),
            queued=len(self.state.inflight) - self.state.inflight.relayed(),
            deadline_s=deadline_s,
        )
        return self.summary()

    def resume(self) -> dict[str, Any]:
        """Admit requests again (ends a drain and its deadline). Refused during a restart (it
        resumes by itself) and during shutdown."""
        self._refuse_during("resume", RESTART, SHUTDOWN)
        self._cancel_deadline()
        self._drain_asked = False
        self.state.draining = False
        self.state.admission.reopen()
        log.info("drain_ended")
        return self.summary()

    async def restart(self) -> dict[str, Any]:
        """Drain (up to server.drain_timeout_s; an operator's drain deadline keeps running),
        apply an engine table a reload kept pending, restart the engine and wait until the new
        one serves (up to engine.start_timeout_s), then admit again unless the operator drained.
        Refused while a restart or a shutdown is under way."""
        self._refuse_during("restart", RESTART, SHUTDOWN)
        self.under_way = RESTART
        try:
            self.state.draining = True
            ended = await self.wait_drained(self.state.config.server.drain_timeout_s)
            applied = self.owner.apply_pending_engine()
            restarted = await self.supervisor.restart()
            if restarted:
                await self.supervisor.wait_serving(self.state.config.engine.start_timeout_s)
        finally:
            if self.under_way == RESTART:
                self.under_way = None
                self.state.draining = self._drain_asked
        return {**self.summary(), "restarted": restarted, "ended": ended, "applied": applied}

    def reload(self) -> dict[str, Any]:
        """Re-read the config file and apply it; what cannot apply now is listed. Raises
        ConfigError when the file is invalid (nothing changes then); refused while a restart or
        a shutdown is under way."""
        self._refuse_during("reload", RESTART, SHUTDOWN)
        plan = self.owner.reload()
        return {
            **self.summary(),
            "needs_restart": plan.needs_restart,
            "llmd_restart": plan.llmd_restart,
            "engine_pending": plan.engine_keys,
        }

    def cancel(self, request_id: str) -> dict[str, Any] | None:
        """End one in-flight request (in-band error for a stream). None when not found."""
        exchange = self.state.inflight.find(request_id)
        error = RequestCancelled("the request was cancelled by the operator")
        if exchange is None or not self.state.inflight.abort(exchange, error):
            return None
        log.warning("request_cancelled", request_id=request_id)
        return {"cancelled": request_id}

    def begin_shutdown(self) -> None:
        """The daemon is stopping: admission closes for good, and every action but cancel is
        refused from now on. A restart under way ends without admitting again."""
        self.under_way = SHUTDOWN
        self.state.draining = True

    async def wait_drained(self, deadline_s: float, hurry: asyncio.Event | None = None) -> int:
        """Wait until nothing is in flight, at most `deadline_s` (or until `hurry` is set), then
        end what remains in-band. How many requests were ended."""
        inflight = self.state.inflight
        idle = asyncio.create_task(inflight.wait_idle(deadline_s))
        waits: set[asyncio.Future[Any]] = {idle}
        if hurry is not None:
            waits.add(asyncio.ensure_future(hurry.wait()))
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waits:
                waiter.cancel()
        if idle.done() and not idle.cancelled() and idle.result():
            return 0
        ended = inflight.abort_all(
            Draining("llmd is draining and the drain deadline passed", retry_after_s=1)
        )
        log.warning("drain_deadline_passed", ended=ended)
        await inflight.wait_idle(5.0)
        return ended

    def summary(self) -> dict[str, Any]:
        """What every action answers: whether llmd drains, requests in flight (relayed to the
        engine) and queued (waiting in llmd), the engine's phase."""
        relayed = self.state.inflight.relayed()
        return {
            "draining": self.state.draining,
            "in_flight": relayed,
            "queued": len(self.state.inflight) - relayed,
            "engine": self.state.engine.phase.value,
        }

    def _refuse_during(self, action: str, *states: str) -> None:
        if self.under_way in states:
            why = _WHY[self.under_way]
            log.warning("action_refused", action=action, reason=why)
            raise ActionRefused(f"{action} refused: {why}")

    def _cancel_deadline(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
