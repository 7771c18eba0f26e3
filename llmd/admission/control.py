"""Admission control at work: requests wait here until the scheduler releases them to a
backend (each backend's gate: llmd/admission/gates.py).

`Admission.admit` queues a request and returns once a backend of its model's pool may take it
(or raises the rejection as an ApiError); `finish` gives its capacity back. Each of those,
every scrape of a backend's metrics, a supervisor's phase change, an interactive request's first
byte while the device hold holds engines (`first_byte`, llmd/admission/holds.py) and a timer at
the next queue timeout or hold bound run the pure scheduler (`pump`) over every pool's capacity
(llmd/admission/pools.py: one capacity gate per backend), which wakes the released waiters and
fails the rejected ones; a timer also runs it when an engine's batch pacing lets more batch in
(llmd/admission/pacing.py).
A waiter whose task is cancelled (its client left) is removed from the queue at once and never
reaches a backend.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import structlog

from llmd.admission import charges
from llmd.admission.alarm import Alarm
from llmd.admission.bodies import BodyBudget, BodyHold
from llmd.admission.budgets import Budgets
from llmd.admission.classes import PRIORITY_HEADER, Priority, requested_class
from llmd.admission.cost import Cost
from llmd.admission.entries import ClassPolicy, Entry, State
from llmd.admission.gates import BackendGates
from llmd.admission.holds import DeviceHolds
from llmd.admission.lanes import BatchLane
from llmd.admission.pools import PoolCapacity, PoolGate
from llmd.admission.refusals import bodies_full, rejection_error
from llmd.admission.requests import AdmissionRequest, Ticket
from llmd.admission.scheduler import Scheduler
from llmd.admission.slo import SloGuard
from llmd.admission.snapshot import AdmissionSnapshot, admission_snapshot
from llmd.admission.tenants import Tenant, configured_tenants
from llmd.allocator import HeapTrimmer
from llmd.config import AdmissionConfig, Config
from llmd.engine.metrics import EngineSample
from llmd.errors import (
    ApiError,
    EngineUnavailable,
    InvalidRequest,
)
from llmd.routing.backend import BackendKind
from llmd.supervisor.state import EngineState

log = structlog.get_logger("llmd.admission")


class Admission:
    """Tenants, their token budgets, the scheduler, the body budget, the SLO guard, the device
    hold, the batch lane (`lane`: batch requests' turns through llmd's own work, before the
    queue) and every backend's capacity gate in pools (`gates`, `capacity`); lives as long as
    the proxy. `engines` are the supervised engines' published states by name (their serving state
    reaches the gates at each pump)."""

    def __init__(self, config: Config, engines: Mapping[str, EngineState]) -> None:
        self.budgets = Budgets()  # configured with the tenants: `configure`
        self.scheduler = Scheduler(_policies(config.admission))
        self.guard = SloGuard(config.admission)  # configured again on reload: `configure`
        self.gates = BackendGates(config, engines)
        self.holds = DeviceHolds()  # the device hold (llmd/admission/sharing.py)
        self.lane = BatchLane()
        self.bodies = BodyBudget(config.admission.max_queued_bytes, on_drained=HeapTrimmer())
        self._waiters: dict[Entry, asyncio.Future[None]] = {}
        self._alarm = Alarm(self.pump)  # the next queue timeout or hold bound: `_arm_timer`
        # Set by a drain that turns the queue away: new admissions get it too, until a resume.
        self.turned_away: ApiError | None = None
        # On-demand engines (llmd/daemon/swapping.py): told of each request queued (its model),
        # and run after each pass.
        self.on_queued: Callable[[str], None] | None = None
        self.after_pump: Callable[[], None] | None = None
        # Told (model, seconds queued) of each request that came while its model slept.
        self.on_woken: Callable[[str, float], None] | None = None
        # The device pause (llmd/admission/sharing.py): told (engine, True) to stop an engine's
        # processes and (engine, False) to let them go on (`DeviceHolds.orders`).
        self.pauser: Callable[[str, bool], None] | None = None
        for name, state in engines.items():
            engine = config.engine_tables.get(name)
            self.gates.add(name, BackendKind.ENGINE, [engine.model_name if engine else state.model])
        for name, upstream in config.upstreams.items():
            self.gates.add(name, BackendKind.UPSTREAM, upstream.models)
        self.configure(config)

    @property
    def capacity(self) -> PoolCapacity:
        """Every backend's capacity gate, in pools by model."""
        return self.gates.capacity

    def add_backend(self, name: str, kind: BackendKind, models: Sequence[str]) -> None:
        """A backend joins the pools of `models` (`BackendGates.add`). Raises ValueError for a
        name already there."""
        self.gates.add(name, kind, models)

    def upstream_answered(self, name: str) -> None:
        """A probe of upstream `name` succeeded: it serves from now on, and the queue is run."""
        self.gates.upstream_answered(name)
        self.pump()

    def remove_backend(self, name: str) -> None:
        """Take a backend out of the pools: requests running there finish there."""
        self.gates.remove(name)

    def configure(self, config: Config) -> None:
        """Take `config` (at start-up and on each reload): tenants read again from their file,
        the class policies, the SLO guard, each backend's gate (`BackendGates.configure`) and
        the body budget. Raises ConfigError (the tenants file) before anything has changed.
        Requests in flight keep their slots; queued ones are released by the new limits at
        once; token budgets kept keep what was spent."""
        admission = config.admission
        self.tenants = configured_tenants(admission)
        self.budgets.configure(self.tenants.tenants(), time.time())
        self.config = admission
        self.scheduler.set_policies(_policies(admission))
        self.guard.configure(admission)
        self.gates.configure(config)
        self.holds.configure(config)
        self.bodies.limit = admission.max_queued_bytes
        if self._waiters:
            self.pump()

    def reload_tenants(self) -> list[str]:
        """Read the tenants file again, and only it (`llmd tenant ...` edited it): keys added,
        rotated or revoked apply from the next request; token budgets kept keep what was
        spent. The tenants' names. Raises ConfigError, and then nothing changes."""
        self.tenants = configured_tenants(self.config)
        self.budgets.configure(self.tenants.tenants(), time.time())
        if self._waiters:
            self.pump()
        return [tenant.name for tenant in self.tenants.tenants()]

    # -- request side ----------------------------------------------------------------------

    def authenticate(self, headers: list[Any]) -> Tenant:
        """The request's tenant. Raises InvalidApiKey (401)."""
        return self.tenants.authenticate(headers)

    def check_wake(self, model: str, cls: Priority) -> None:
        """Refuse a request whose model's engines all sleep on demand (or are being woken)
        when their predicted wake passes its class's queue timeout; otherwise it waits in the
        queue for the wake. Raises EngineUnavailable (503, Retry-After: the prediction)."""
        wake_s = self.capacity.wake_s(model, time.monotonic())
        budget = self.scheduler.classes[cls].policy.queue_timeout_s
        if wake_s is not None and wake_s > budget:
            raise EngineUnavailable(
                f"model {model} is asleep and takes about {wake_s:.0f} s to wake, longer than "
                f"the {cls.label} queue's timeout ({budget:g} s); retry later",
                retry_after_s=wake_s,
            )

    def classify(self, tenant: Tenant, headers: list[Any]) -> Priority:
        """The request's class from `x-llmd-priority`, clamped to the tenant's highest.
        Raises InvalidRequest (400) for an unknown class name."""
        header = next((v for k, v in headers if k == PRIORITY_HEADER), None)
        return requested_class(header, tenant.default_class, tenant.highest_class)

    def hold_body(self) -> BodyHold:
        """An empty share of the body budget for a request about to be read, to grow with
        `grow_body` as its body arrives (llmd/admission/bodies.py). Raises QueueFull (429)
        while the budget is past `max_queued_bytes`."""
        hold = self.bodies.reserve(0)
        if hold is None:
            raise bodies_full(self.bodies, self.scheduler)
        return hold

    def grow_body(self, hold: BodyHold, nbytes: int) -> None:
        """`hold` now takes `nbytes`, the body read so far. Raises QueueFull (429) when that
        would pass `max_queued_bytes` while other requests hold bytes."""
        if not hold.grow(nbytes):
            raise bodies_full(self.bodies, self.scheduler)

    def check_share(self, tenant: Tenant, cost: Cost, model: str) -> None:
        """Refuse a request that could never start within `tenant`'s share of `model`'s
        KV cache (llmd/admission/shares.py). Raises InvalidRequest (400)."""
        why = self.scheduler.shares.never_fits(tenant, model, cost.tokens)
        if why is not None:
            raise InvalidRequest(
                f"this request cannot be served: {why}; lower n, the number of prompts or "
                "max_tokens"
            )

    async def admit(self, request: AdmissionRequest) -> Ticket:
        """Charge the tenant's token budgets (llmd/admission/charges.py), then wait until the
        request may go to the engine; the ticket carries the charge (settled at `finish`; all
        of it refunded when the request never reaches a backend) and the x-ratelimit headers
        for its answer. Raises the rejection as an ApiError (429 budget_exceeded/rate_limited/
        queue_full, 503 queue_timeout; 503 draining once a drain turned the queue away; 503
        overloaded while the SLO guard sheds its class; 400 past a whole budget); on
        cancellation (the client left) the request leaves the queue at once. The caller counts
        cancellations (it knows the phase)."""
        if self.turned_away is not None:
            raise self.turned_away
        self.guard.check_shed(request.cls)
        taken = charges.charge(self.budgets, request.tenant, request.cost, time.time())
        try:
            ticket = await self._queue(request)
        except BaseException:  # rejected or cancelled before it reached a backend
            self.budgets.refund(taken, time.time())
            raise
        ticket.charge = taken
        ticket.ratelimit = charges.headers(self.budgets, request.tenant.name, time.time())
        return ticket

    async def wait_awake(
        self, tenant: Tenant, cls: Priority, model: str, deadline: float | None
    ) -> None:
        """Wait in the queue, as a request of one seat that no token budget is charged for,
        until a backend of `model`'s pool may take a request (its engine woken on demand for
        it), then give the seat back: what a request whose prompt only the engine can count
        waits for while that engine is asleep (llmd/proxy/validation.py). Raises what `admit`
        raises (503 queue_timeout past the class's timeout plus the predicted wake)."""
        one = Cost(seats=1, tokens=1)
        self.finish(await self.admit(AdmissionRequest(tenant, cls, one, deadline, model=model)))

    async def _queue(self, request: AdmissionRequest) -> Ticket:
        """Queue the request and wait for its release (`admit`)."""
        now = time.monotonic()
        models = self.capacity.models()
        model = request.model or (models[0] if len(models) == 1 else "")
        cost = request.cost
        # A request for an asleep model may wait its class's timeout past the predicted wake.
        wake_s = self.capacity.wake_s(model, now)
        entry = Entry(
            tenant=request.tenant,
            cls=request.cls,
            cost=cost.tokens,
            seats=cost.seats,
            deadline=request.deadline,
            model=model,
            affinity=request.affinity,
            conversation=request.conversation,
            grace_s=wake_s or 0.0,
        )
        rejection = self.scheduler.submit(entry, now)
        if rejection is not None:
            raise rejection_error(rejection, self.scheduler)
        if self.on_queued is not None:
            self.on_queued(model)
        asleep = wake_s is not None
        future = asyncio.get_running_loop().create_future()
        self._waiters[entry] = future
        try:
            self.pump()
            if entry.state is not State.RELEASED:
                await future
        except asyncio.CancelledError:
            if self.scheduler.cancel(entry):
                self.pump()
            elif entry.state is State.RELEASED:  # released, but the client left meanwhile
                self.finish(Ticket(entry, 0.0))  # its tokens: refunded by `admit`
            raise
        finally:
            self._waiters.pop(entry, None)
        assert entry.released_at is not None
        queued_s = entry.released_at - entry.enqueued_at
        if asleep and self.on_woken is not None:
            self.on_woken(model, queued_s)
        return Ticket(entry, queue_ms=queued_s * 1000)

    def reject_queued(self, error: ApiError) -> int:
        """Answer every request still queued with `error` (a drain that turns the queue away),
        and every request that reaches admission from now on until `reopen` (those still being
        validated); how many were queued."""
        self.turned_away = error
        rejected = 0
        for entry in list(self.scheduler.entries()):
            future = self._waiters.get(entry)
            if self.scheduler.cancel(entry) and future is not None and not future.done():
                future.set_exception(error)
                rejected += 1
        self.pump()
        return rejected

    def reopen(self) -> None:
        """Queue requests again after `reject_queued` (a resume)."""
        self.turned_away = None

    def finish(self, ticket: Ticket, output_tokens: int = 0) -> None:
        """The request has ended (any way), having produced `output_tokens`: its capacity goes
        to the next in line, and its token budgets get back what it did not use."""
        entry = ticket.entry
        self.holds.finished(entry, time.monotonic())
        if ticket.charge is not None:
            self.budgets.settle(ticket.charge, output_tokens, time.time())
            ticket.charge = None
        if entry.state is State.RELEASED:
            self.scheduler.finish(entry)
            self.capacity.on_finish(entry)
            if not self._idle_pass():
                self.pump()

    def _idle_pass(self) -> bool:
        """Whether a pass now would change nothing: no request is queued (none to release,
        reject or time), no engines share a device (no hold to lift, no pause to end) and no
        swap group decides after each pass. A finish then runs none (a pass is about a quarter
        of a request's admission CPU, issue 37 item 3); the next pass (a request's, a
        scrape's every `telemetry.engine_interval_s`, the alarm's) brings the gates and the
        SLO guard up to date."""
        return not self.scheduler.queued() and self.holds.off and self.after_pump is None

    def first_byte(self, ticket: Ticket) -> None:
        """The request's first byte came back from its backend: an interactive one no longer
        holds batch off the engines sharing its device (llmd/admission/sharing.py)."""
        if self.holds.first_byte(ticket.entry):
            self.pump()

    def reroute(self, ticket: Ticket, exclude: frozenset[str]) -> str | None:
        """Move an admitted request whose backend failed before the first byte to another
        available backend of its pool not in `exclude` (its capacity moves with it); the new
        backend, or None when there is none (llmd/routing/retry.py: once)."""
        entry = ticket.entry
        backend = self.capacity.reroute(entry, exclude, time.monotonic())
        if backend is not None:
            entry.backend = backend
        return backend

    def as_snapshot(self, now: float, in_flight: Mapping[str, int]) -> AdmissionSnapshot:
        """The queues at `now` (monotonic s): depth and oldest wait per class; and one row per
        configured tenant and per tenant in `in_flight` (requests relayed to the engine, by
        tenant) or queued: in flight, queued, and its limits (None: unlimited)."""
        tenants = self.tenants.tenants()
        models = self.capacity.models()
        return admission_snapshot(self.scheduler, self.budgets, tenants, models, now, in_flight)

    # -- engine side -----------------------------------------------------------------------

    def engine_sampled(self, backend: str, sample: EngineSample | None) -> None:
        """A new read of `backend`'s /metrics (the telemetry task's, every
        `telemetry.engine_interval_s`; None: unknown or not serving): update its gate's view of
        its load, and each pool's KV capacity the tenants' shares are of, and release what it
        now allows."""
        self.gates.sampled(backend, sample)
        for model in self.capacity.models():
            self.scheduler.shares.measured(model, self.capacity.kv_tokens(model))
        self.pump()

    def pump(self) -> None:
        """Run the scheduler now: wake released waiters, fail rejected ones, re-arm the timer.
        Each engine's serving state (and when a down one should be back) reaches its gate
        first."""
        now = time.monotonic()
        self.gates.sync(now)
        capacity = self.capacity

        def outage() -> bool:  # a pool that no backend can serve now
            return not all(capacity.available(m, now) for m in capacity.models())

        inner = self.holds.gate(PoolGate(capacity, now), self.scheduler, capacity, now)
        gate = self.guard.gate(inner, self.scheduler, outage)
        decisions = self.scheduler.decide(now, gate)
        self.holds.decided(decisions.released)
        self._pause(now)
        for entry in decisions.released:
            future = self._waiters.get(entry)
            if future is not None and not future.done():
                future.set_result(None)
        for rejection in decisions.rejected:
            future = self._waiters.get(rejection.entry)
            if future is not None and not future.done():
                future.set_exception(rejection_error(rejection, self.scheduler))
        self._arm_timer(now)
        if self.after_pump is not None:
            self.after_pump()

    def _pause(self, now: float) -> None:
        """Tell the pauser which engines to stop and which to let go on (changes only)."""
        pauser = self.pauser
        if pauser is None:
            return
        go_on, stop = self.holds.orders(now)
        for name in go_on:
            pauser(name, False)
        for name in stop:
            pauser(name, True)

    def _arm_timer(self, now: float) -> None:
        """A pump at the next queue timeout, or sooner when the device hold's bound lets a
        held batch request go, or when an engine's batch pacing lets more batch in while batch
        requests wait (llmd/admission/pacing.py)."""
        expiry = self.scheduler.next_expiry()
        sooner = [self.holds.lapse_at]
        if self.scheduler.queued(Priority.BATCH):
            sooner.append(self.capacity.paced_until(now))
        for at in sooner:
            if at is not None:
                expiry = at if expiry is None else min(expiry, at)
        self._alarm.arm(expiry, now)


def _policies(admission: AdmissionConfig) -> dict[Priority, ClassPolicy]:
    classes = {
        Priority.INTERACTIVE: admission.interactive,
        Priority.NORMAL: admission.normal,
        Priority.BATCH: admission.batch,
    }
    return {
        cls: ClassPolicy(c.queue_size, c.queue_timeout_s, c.aging_s) for cls, c in classes.items()
    }
