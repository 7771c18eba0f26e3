"""Operator actions on a running llmd: drain, resume, restart, reload, cancel, wake, sleep
and shutdown.
The admin API and the daemon's signal handling call these.

- Each returns a JSON-able summary, or raises ActionRefused (409) when it makes no sense in
  llmd's current state, NotFound (404) for an engine llmd does not have.
- Drain, resume and restart act on every engine, or on one (`engine`): drained alone, an engine
  takes no new request (its pool's other backends do; a pool with none left answers 503 with
  Retry-After) while those running there finish.
- Drain and resume take an upstream's name too (llmd stops and starts routing to it); a restart
  of one is refused, since llmd does not run it.

They run one at a time: a restart (it waits for the drain and for the new engine) or a shutdown
is under way until it ends, and what else may happen then is:

    asked \\ under way   restart                              shutdown
    drain               yes (admission stays closed after)   refused: shutting down
    resume              refused: the restart resumes         refused: shutting down
    restart             refused: one is under way            refused: shutting down
    reload              refused: reload after it             refused: shutting down
    cancel              yes                                  yes

A reload never yields to the event loop, so nothing runs during one. An action that waits (a
restart, `llmd deploy --wait`, `llmd rollback --wait`) ends at once when llmd begins to stop:
its work is cancelled and it answers 409 "llmd is stopping" (`unless_stopping`), so that the
stop is not held by it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable
from typing import Any, Protocol, TypeVar

import structlog

from llmd.daemon.backends import Backends
from llmd.daemon.reload import ReloadPlan
from llmd.daemon.swapping import Swapping
from llmd.errors import ActionRefused, Draining, NotFound, RequestCancelled
from llmd.routing.breaker import BreakerState
from llmd.state import DaemonState

log = structlog.get_logger("llmd.daemon.actions")
T = TypeVar("T")

RESTART = "restart"
SHUTDOWN = "shutdown"
_WHY = {
    RESTART: "a restart is under way",
    SHUTDOWN: "llmd is shutting down",
}


class ConfigOwner(Protocol):
    """The live config (llmd/daemon/live_config.py): it holds the config in use and applies it."""

    def reload(self) -> ReloadPlan:
        """Read the config file again and apply it. Raises ConfigError (nothing changed)."""
        ...

    async def apply_pending_engine(self, name: str) -> list[str]:
        """Apply engine `name`'s table a reload kept pending (adding or removing the engine);
        the keys it changed."""
        ...


class OperatorActions:
    """Drain, resume, restart, reload, cancel and shutdown over one daemon state and its
    backends (the engines' supervisors, the tables a reload kept pending), one at a time (see
    the module docstring)."""

    def __init__(self, state: DaemonState, backends: Backends, owner: ConfigOwner) -> None:
        self.state = state
        self.backends = backends
        self.owner = owner
        self.under_way: str | None = None
        # The operator asked for a drain that no resume has ended (of llmd, or of engines by
        # name): admission stays closed after a restart.
        self._drain_asked = False
        self._drained: set[str] = set()
        self._deadline: asyncio.Task[int] | None = None
        # The on-demand engines' swap groups (`llmd wake`, `llmd sleep`); set by the daemon.
        self.swapping: Swapping | None = None
        # Set when llmd begins to stop: what an action waits for ends then.
        self._stopping = asyncio.Event()

    def drain(
        self,
        deadline_s: float | None = None,
        reject_queued: bool = False,
        engine: str | None = None,
    ) -> dict[str, Any]:
        """Stop admitting (new requests get 503 `draining` with Retry-After); in-flight work
        finishes, and so does work queued in llmd unless `reject_queued`, which answers it 503
        `draining` now (and, for a drain of llmd, those still being validated as they reach
        admission, until a resume). After `deadline_s` seconds, what is still in flight ends
        with an in-band error. With `engine` (an engine's or an upstream's name), only that
        backend stops taking requests (its deadline ends only its requests). Idempotent; a
        new deadline replaces the old one. Refused during shutdown."""
        self._refuse_during("drain", SHUTDOWN)
        if engine is not None:
            self._check_backend(engine)
            self._drained.add(engine)
            self._set_draining(engine, True)
        else:
            self._drain_asked = True
            self.state.draining = True
        if reject_queued:
            error = Draining("llmd is draining; queued requests were turned away", retry_after_s=5)
            self.state.admission.reject_queued(error)  # llmd's drain only (the admin API)
        self._cancel_deadline()
        if deadline_s is not None:
            self._deadline = asyncio.create_task(self.wait_drained(deadline_s, engine=engine))
        relayed = self.state.inflight.relayed()
        log.info(
            "drain_started",
            engine=engine,
            in_flight=self._in_flight(engine),
            queued=len(self.state.inflight) - relayed,
            deadline_s=deadline_s,
        )
        return self.summary()

    def resume(self, engine: str | None = None) -> dict[str, Any]:
        """Admit requests again (ends a drain and its deadline); with `engine`, that engine
        takes requests again. Refused during a restart (it resumes by itself) and during
        shutdown."""
        self._refuse_during("resume", RESTART, SHUTDOWN)
        self._cancel_deadline()
        if engine is not None:
            self._check_backend(engine)
            self._drained.discard(engine)
            self._set_draining(engine, False)
        else:
            self._drain_asked = False
            self.state.draining = False
            self.state.admission.reopen()
            for name in self._drained:
                self._set_draining(name, False)
            self._drained.clear()
        log.info("drain_ended", engine=engine)
        return self.summary()

    async def restart(self, engine: str | None = None) -> dict[str, Any]:
        """Drain (up to server.drain_timeout_s; an operator's drain deadline keeps running),
        apply the engine tables a reload kept pending, restart the engines and wait until the
        new ones serve (up to each one's start_timeout_s), then admit again unless the
        operator drained. With `engine`, only that engine: the others serve on; an engine a
        reload added starts, one it removed stops, one that gave up boots again. An engine
        asleep on demand is not woken: its next wake boots a fresh process of its table
        (`boots_on_wake` names those). Refused while a restart or a shutdown is under way, and
        for an upstream (ActionRefused); ended with ActionRefused when llmd begins to stop
        meanwhile (`unless_stopping`)."""
        self._refuse_during("restart", RESTART, SHUTDOWN)
        if engine in self.state.fleet.upstreams:
            log.warning("action_refused", action="restart", reason="an upstream", engine=engine)
            raise ActionRefused(
                f"restart refused: {engine} is an upstream, which llmd does not run; restart "
                f"it where it runs (llmd drain --engine {engine} stops sending it requests)"
            )
        if engine is not None and engine not in self.backends.pending_engines():
            self._check_engine(engine)
        self.under_way = RESTART
        try:
            work = self._restart_all() if engine is None else self._restart_one(engine)
            result = await self.unless_stopping("restart", work)
        finally:
            if self.under_way == RESTART:
                self.under_way = None
                self.state.draining = self._drain_asked
        return {**self.summary(), **result}

    async def _restart_all(self) -> dict[str, Any]:
        self.state.draining = True
        ended = await self.wait_drained(self.state.config.server.drain_timeout_s)
        applied: list[str] = []
        for name in self.backends.pending_engines():
            applied += await self.owner.apply_pending_engine(name)
        supervisors = dict(self.backends.supervisors)
        fresh = {name for name in supervisors if self.backends.start_engine(name)}
        # Asleep on demand: not woken (its swap group wakes it), its next wake boots afresh.
        asleep = {name for name, s in supervisors.items() if name not in fresh and s.boot_on_wake()}
        done = await asyncio.gather(
            *(s.restart() for name, s in supervisors.items() if name not in fresh | asleep)
        )
        await asyncio.gather(
            *(
                s.wait_serving(s.engine.start_timeout_s)
                for name, s in supervisors.items()
                if name not in asleep
            )
        )
        return {
            "restarted": any(done) or bool(fresh),
            "boots_on_wake": sorted(asleep),
            "ended": ended,
            "applied": applied,
        }

    async def _restart_one(self, name: str) -> dict[str, Any]:
        draining = name in self.state.admission.capacity.names()
        if draining:
            self._set_draining(name, True)
        try:
            timeout = self.state.config.server.drain_timeout_s
            ended = await self.wait_drained(timeout, engine=name) if draining else 0
            applied = await self.owner.apply_pending_engine(name)
            supervisor = self.backends.supervisors.get(name)
            if supervisor is None:  # removed
                return {"restarted": False, "boots_on_wake": [], "ended": ended, "applied": applied}
            added = f"engines.{name}" in applied  # booting now, for the first time
            # Asleep on demand: not woken (its swap group wakes it), its next wake boots afresh.
            asleep = not added and supervisor.boot_on_wake()
            restarted = not asleep and (
                added or self.backends.start_engine(name) or await supervisor.restart()
            )
            if restarted:
                await supervisor.wait_serving(supervisor.engine.start_timeout_s)
        finally:
            if name in self.state.admission.capacity.names():
                self._set_draining(name, name in self._drained)
        on_wake = [name] if asleep else []
        return {
            "restarted": restarted,
            "boots_on_wake": on_wake,
            "ended": ended,
            "applied": applied,
        }

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
            "engines_pending": sorted(plan.engines),
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
        refused from now on. An action waiting (`unless_stopping`) ends now, refused; a
        restart under way ends without admitting again."""
        self.under_way = SHUTDOWN
        self.state.draining = True
        self._stopping.set()

    async def unless_stopping(self, action: str, work: Awaitable[T]) -> T:
        """`work`'s result, unless llmd begins to stop (`begin_shutdown`) before it ends: then
        `work` is cancelled and ActionRefused (409) says that `action` ended because llmd is
        stopping. Raises what `work` raises; cancelled, cancels `work`."""
        task = asyncio.ensure_future(work)
        stopping = asyncio.ensure_future(self._stopping.wait())
        try:
            await asyncio.wait({task, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
            if not task.done():
                task.cancel()
        if not self._stopping.is_set():
            return task.result()
        # llmd is stopping: whatever the work did, its end is the stop's (the engines stop).
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
        log.warning("action_ended", action=action, reason="llmd is stopping")
        raise ActionRefused(f"{action} ended: llmd is stopping")

    async def wait_drained(
        self, deadline_s: float, hurry: asyncio.Event | None = None, engine: str | None = None
    ) -> int:
        """Wait until nothing is in flight (nothing on `engine`, when given), at most
        `deadline_s` (or until `hurry` is set), then end what remains in-band. How many
        requests were ended."""
        inflight = self.state.inflight
        idle = asyncio.create_task(inflight.wait_idle(deadline_s, backend=engine))
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
            Draining("llmd is draining and the drain deadline passed", retry_after_s=1),
            backend=engine,
        )
        log.warning("drain_deadline_passed", engine=engine, ended=ended)
        await inflight.wait_idle(5.0, backend=engine)
        return ended

    def summary(self) -> dict[str, Any]:
        """What every action answers: whether llmd drains, requests in flight (relayed to a
        backend) and queued (waiting in llmd), the engine's phase (the `main` or first
        engine's), and each backend's state and whether it is drained: the engines (their
        phase) and then the upstreams (`UpstreamState.phase`: serving, unreachable, probing
        or unknown), by name."""
        capacity = self.state.admission.capacity
        relayed = self.state.inflight.relayed()
        now = time.monotonic()
        states = {name: state.phase.value for name, state in self.state.fleet.engines.items()}
        for name, upstream in self.state.fleet.upstreams.items():
            breaker = capacity.breaker(name) if name in capacity.names() else None
            states[name] = upstream.phase(
                breaker.state(now) if breaker is not None else BreakerState.CLOSED
            )
        return {
            "draining": self.state.draining,
            "in_flight": relayed,
            "queued": len(self.state.inflight) - relayed,
            "engine": self.state.engine.phase.value,
            "engines": {
                name: {
                    "state": state,
                    "draining": name in capacity.names() and capacity.draining(name),
                }
                for name, state in states.items()
            },
        }

    def swap(self, action: str, engine: str) -> dict[str, Any]:
        """`llmd wake` or `llmd sleep` (`action`) of on-demand `engine`, begun now. Raises
        NotFound (no such engine), ActionRefused (during a shutdown; the swap group's own
        refusals: llmd/daemon/swapping.py)."""
        self._refuse_during(action, SHUTDOWN)
        self._check_engine(engine)
        if self.swapping is None:
            raise ActionRefused(f"{action} refused: no engine is on demand")
        if action == "wake":
            return self.swapping.operator_wake(engine)
        return self.swapping.operator_sleep(engine)

    def _check_engine(self, engine: str) -> None:
        supervisors = self.backends.supervisors
        if engine not in supervisors:
            upstreams = ", ".join(self.state.fleet.upstreams)
            raise NotFound(
                f"no engine {engine!r}; engines: {', '.join(supervisors) or 'none'}"
                + (f"; upstreams: {upstreams}" if upstreams else "")
            )

    def _check_backend(self, name: str) -> None:
        """An engine or an upstream (drain and resume act on either). Raises NotFound."""
        if name not in self.state.fleet.upstreams:
            self._check_engine(name)

    def _set_draining(self, engine: str, draining: bool) -> None:
        capacity = self.state.admission.capacity
        if engine in capacity.names():
            hint = self.state.config.server.drain_timeout_s if draining else None
            capacity.set_draining(engine, hint)
            self.state.admission.pump()

    def _in_flight(self, engine: str | None) -> int:
        inflight = self.state.inflight
        return inflight.relayed() if engine is None else len(inflight.on_backend(engine))

    def _refuse_during(self, action: str, *states: str) -> None:
        if self.under_way in states:
            why = _WHY[self.under_way]
            log.warning("action_refused", action=action, reason=why)
            raise ActionRefused(f"{action} refused: {why}")

    def _cancel_deadline(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
