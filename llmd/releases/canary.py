"""A canary's live parts, and its promotion.

- The new release as a second engine beside the old one in its pool (`ENGINE.canary`).
- The split that sends each request to one of them (sticky per tenant and prefix key:
  llmd/routing/canary.py).
- Both releases' figures over the current step, from the requests that finished on each
  (llmd/releases/figures.py).

On promotion the engine itself takes the new release (drained while the canary serves all the
traffic, restarted with the new table), then the canary engine goes: names, metrics and the
config's engine stay what they were.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from llmd.releases.deploy_events import Booted, Observed
from llmd.releases.figures import StepTally
from llmd.releases.steps import DeployHost, boot, drained, hold
from llmd.releases.store import ReleaseStore
from llmd.routing.canary import goes_to_canary

CANARY_SUFFIX = ".canary"


def canary_name(engine: str) -> str:
    """The name of engine `engine`'s canary backend."""
    return engine + CANARY_SUFFIX


@dataclasses.dataclass(frozen=True)
class ShareSplit:
    """`share` percent of the pool's requests to `new`, the rest to `old`."""

    old: str
    new: str
    share: float

    def backend_for(self, tenant: str, key: str | None) -> str:
        """The backend of a request of `tenant` with prefix key `key` (sticky)."""
        return self.new if goes_to_canary(tenant, key or "", self.share) else self.old


class CanaryFigures:
    """Both releases' tallies over the current step: `engine` runs the old release, its canary
    the new one. `record` takes each finished request (the observer's `on_ended`)."""

    def __init__(self, engine: str, bounds: tuple[int, ...]) -> None:
        self.engine = engine
        self.canary = canary_name(engine)
        self.bounds = bounds
        self.reset()

    def reset(self) -> None:
        """Start a new step: both tallies empty."""
        self.tallies = {self.engine: StepTally(self.bounds), self.canary: StepTally(self.bounds)}

    def record(self, record: Any, assigned: str | None = None) -> None:
        """A request ended (an `llmd.inflight.Exchange`). One that ran on either release
        counts there: TTFT from its release to the engine to its first byte (s), an engine
        error (5xx), an answer without text, one cut off (finish_reason `length`). One llmd
        refused (429, 503) while it waited in the queue counts as a rejection of the release
        its split `assigned` it to. One its client left, or llmd ended (a drain), counts on
        neither: that is not the release's doing."""
        if record.rejected:
            tally = self.tallies.get(assigned or "")
            if tally is not None and record.queued_at is not None and record.status in (429, 503):
                tally.reject()
            return
        tally = self.tallies.get(record.backend)
        if tally is None or record.client_gone or record.abort_error is not None:
            return
        started = record.admitted_at or record.started_at
        ttft = None if record.first_byte_at is None else record.first_byte_at - started
        tally.answer(
            record.prompt_tokens or 0,
            ttft,
            record.output_tokens,
            record.finish_reason,
            error=(record.status or 0) >= 500,
            empty=not record.has_text,
        )

    def observed(self) -> Observed:
        """Both releases' figures since the step began, now."""
        old, new = self.tallies[self.engine], self.tallies[self.canary]
        return Observed(time.monotonic(), old.figures(), new.figures())


def set_split(host: DeployHost, engine: str, share: float) -> None:
    """Send `share` percent of engine `engine`'s pool to its canary (0: none, split removed)."""
    capacity = host.state.admission.capacity
    model = host.backends.supervisors[engine].engine.model_name
    if share > 0:
        capacity.splits[model] = ShareSplit(engine, canary_name(engine), share)
    else:
        capacity.splits.pop(model, None)
    host.state.admission.pump()


async def remove_canary(host: DeployHost, engine: str) -> None:
    """The canary takes no more requests, finishes those it runs, and goes."""
    name = canary_name(engine)
    set_split(host, engine, 0)
    if name in host.backends.supervisors:
        hold(host, name, True)
        await drained(host, name, "")
        await host.backends.remove_engine(name)


async def adopt(host: DeployHost, store: ReleaseStore, engine: str, release: str) -> Booted:
    """Promotion: the canary takes all the traffic while the engine drains and boots the
    new release; then the engine serves and the canary goes (`adopted`). The engine's boot:
    when it failed, the canary keeps all the traffic and the engine stays held while its
    supervisor restarts it as usual (with backoff); `adopted` finishes once it serves."""
    set_split(host, engine, 100)
    hold(host, engine, True)
    await drained(host, engine, "")
    booted = await boot(host, store, engine, release, False)
    if booted.ok:
        await adopted(host, engine, release)
    return booted


async def adopted(host: DeployHost, engine: str, release: str) -> None:
    """The engine serves `release`: it takes the traffic back and the canary goes."""
    host.state.fleet.engines[engine].release = release
    hold(host, engine, False)
    await remove_canary(host, engine)


async def adopt_when_serving(host: DeployHost, engine: str, release: str) -> bool:
    """After `adopt` failed: wait while the engine's supervisor restarts it (its backoff);
    once it serves `release`, `adopted` and True; False when the supervisor gave up or
    stops (the canary serves on)."""
    supervisor = host.backends.supervisors[engine]
    while not await supervisor.wait_serving(60.0):
        if supervisor.state.phase.value in ("failed", "stopping", "stopped"):
            return False
    await adopted(host, engine, release)
    return True
