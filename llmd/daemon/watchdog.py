"""The stall watchdog task: a few times a second, the stall rule (llmd/supervisor/stall.py) over
each serving backend's latest scrape and llmd's requests there.

- An engine stalled: every request on it ends with `503 engine_stalled` (in-band, then
  `[DONE]`, once its stream started), and its supervisor kills the process group and restarts
  it with the usual backoff, the exit classified `stalled`. An upstream stalled: the same
  answer, and its circuit breaker opens.
- A request idle past its own timeout ends the same way alone: cancelling its relay closes its
  backend connection, which makes vLLM abort the sequence.
- A request whose send to its client waits is the client's, not the backend's: `held` for the
  rule, and past `server.send_timeout_s` llmd/proxy/stalls.py ends it as a slow consumer.
- Started by the daemon, cancelled at shutdown; a failure of one check is logged, never fatal.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping

import structlog

from llmd.engine.metrics import EngineSample
from llmd.errors import EngineStalled
from llmd.inflight import Exchange
from llmd.routing.breaker import BreakerState
from llmd.state import DaemonState
from llmd.supervisor.stall import Relayed, Stall, StallWatch
from llmd.supervisor.supervisor import Supervisor

log = structlog.get_logger("llmd.watchdog")

# How often the rule is checked, s: well under any timeout, and cheap (a pass over the
# requests in flight).
WATCH_S = 0.25


class Watchdog:
    """The watchdog over `state`'s fleet; `supervisors` is the daemon's live map of engine
    supervisors (a stalled engine is restarted through its own)."""

    def __init__(self, state: DaemonState, supervisors: Mapping[str, Supervisor]) -> None:
        self.state = state
        self.supervisors = supervisors
        self.task: asyncio.Task[None] | None = None
        self._watches: dict[str, StallWatch] = {}
        self._seen: dict[str, EngineSample] = {}
        self._restarts: set[asyncio.Task[bool]] = set()

    def start(self) -> None:
        """Run the watchdog until cancelled (the daemon cancels `task` at shutdown)."""
        self.task = asyncio.create_task(self._run(), name="stall-watchdog")

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(WATCH_S)
            try:
                self.check(time.monotonic())
            except Exception as exc:  # a bug here must not take the daemon down
                log.error("watchdog_failed", error=repr(exc), exc_info=exc)

    def check(self, now: float) -> None:
        """One pass at `now` (monotonic s) over every backend that serves."""
        fleet, capacity = self.state.fleet, self.state.admission.capacity
        relayed: dict[str, list[Exchange]] = {}
        for exchange in self.state.inflight.exchanges():
            if exchange.backend is not None and exchange.admitted_at is not None:
                relayed.setdefault(exchange.backend, []).append(exchange)
        serving: dict[str, tuple[float, float]] = {}  # its stall and idle timeouts
        for name, engine in fleet.engines.items():
            supervisor = self.supervisors.get(name)
            if engine.serving and supervisor is not None:
                table = supervisor.engine  # the table it runs with
                serving[name] = (table.stall_timeout_s, table.request_idle_timeout_s)
        for name, upstream in fleet.upstreams.items():
            config = self.state.config.upstreams.get(name)
            breaker = capacity.breaker(name) if name in capacity.names() else None
            closed = breaker is not None and breaker.state(now) is BreakerState.CLOSED
            if upstream.healthy is True and closed and config is not None:
                serving[name] = (config.stall_timeout_s, config.request_idle_timeout_s)
        for name, (stall_s, idle_s) in serving.items():
            self._judge(name, stall_s, idle_s, now, relayed.get(name, []))
        for name in set(self._watches) - set(serving):  # restarting, gone, or breaker open
            self._forget(name)

    def _judge(
        self, name: str, stall_s: float, idle_s: float, now: float, exchanges: list[Exchange]
    ) -> None:
        watch = self._watches.get(name)
        if watch is None or (watch.configured, watch.configured_idle) != (stall_s, idle_s):
            watch = self._watches[name] = StallWatch(stall_s, idle_s, now)
        sample = self.state.observer.engine_samples.get(name)
        if sample is not None and sample is not self._seen.get(name):
            self._seen[name] = sample
            watch.observe(sample)
        live = [e for e in exchanges if e.abort_error is None and _running(e.task)]
        requests = [_relayed(e) for e in live]
        stall = watch.stalled(now, requests)
        if stall is not None:
            self._stalled(name, stall, now)
            return
        for exchange, request in zip(live, requests, strict=True):
            idle = watch.idle_past(now, request, requests)
            if idle is not None:
                log.warning(
                    "request_stalled",
                    request_id=exchange.request_id,
                    backend=name,
                    detail=idle.detail,
                )
                message = f"no output from {name} for this request: {idle.detail}"
                self.state.inflight.abort(exchange, EngineStalled(message, retry_after_s=1))

    def _stalled(self, name: str, stall: Stall, now: float) -> None:
        """End every request on `name` and restart it (an engine) or open its breaker."""
        supervisor = self.supervisors.get(name)
        self._forget(name)
        if supervisor is not None:
            engine = self.state.fleet.engines[name]
            backoff = self.state.config.supervisor.backoff_initial_s
            retry_after = backoff + (engine.boot_s or 60.0)
            what = "restarted"
        else:
            breaker = self.state.admission.capacity.breaker(name)
            assert breaker is not None  # judged only while it has one (`check`)
            breaker.trip(now)
            retry_after = breaker.retry_after_s(now)
            what = "taken out of routing (its circuit breaker opened)"
            log.error("upstream_stalled", upstream=name, detail=stall.detail)
        error = EngineStalled(
            f"{name} stalled: {stall.detail}; it is {what}", retry_after_s=retry_after
        )
        ended = self.state.inflight.abort_all(error, backend=name)
        if supervisor is not None:
            restart = asyncio.create_task(supervisor.stalled(f"{stall.detail}; {ended} ended"))
            self._restarts.add(restart)
            restart.add_done_callback(self._restarts.discard)
        else:
            self.state.admission.pump()

    def _forget(self, name: str) -> None:
        self._watches.pop(name, None)
        self._seen.pop(name, None)


def _running(task: asyncio.Task[None] | None) -> bool:
    """The relay runs and nothing ends it yet (a client past its send timeout has its task
    cancelled, llmd/proxy/stalls.py: its request is no longer the backend's to answer)."""
    return task is not None and not task.done() and not task.cancelling()


def _relayed(exchange: Exchange) -> Relayed:
    """`exchange` as the stall rule reads it: `held` while its send to the client waits."""
    assert exchange.admitted_at is not None
    return Relayed(
        exchange.admitted_at,
        exchange.progress_at,
        exchange.stream,
        exchange.prompt_tokens or 0,
        exchange.max_tokens,
        held=exchange.send_since is not None,
        resumed_at=exchange.resumed_at,
    )
