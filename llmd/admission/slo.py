"""The SLO guard at work (its level machine is llmd/admission/guard.py): each class's TTFT over a
sliding window, the machine evaluated as admission runs, and what the level in force does to a
request: batch releases held, max_tokens capped at release, new requests shed.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import structlog

from llmd.admission.classes import Priority
from llmd.admission.entries import Entry, Gate
from llmd.admission.guard import (
    ClassReading,
    GuardPolicy,
    GuardState,
    Level,
    effective_level,
    holds_release,
    max_tokens_cap,
    next_state,
    overridden,
    retry_after_s,
    sheds,
)
from llmd.admission.scheduler import Scheduler
from llmd.config import AdmissionConfig
from llmd.errors import Overloaded
from llmd.status import ClassTtftStatus, GuardStatus
from llmd.telemetry.windows import LatencyWindow

log = structlog.get_logger("llmd.admission")

CAPPED_HEADER = b"x-llmd-max-tokens-capped"
# The level machine runs at most this often (s): a pump runs on every request's end, and a
# reading walks three windows' buckets.
EVALUATE_EVERY_S = 0.25


class SloGuard:
    """The guard of one llmd: per-class TTFT windows fed by the observer (`observed`), the
    level (`state`), evaluated at most every EVALUATE_EVERY_S by admission's pump (`gate`),
    and its measures: `gate` holds batch, `check_shed` sheds, `cap_body` caps max_tokens.
    `clock` is monotonic seconds."""

    def __init__(
        self, config: AdmissionConfig, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.clock = clock
        self.state = GuardState()
        self.window_s = 0
        self._evaluated_at = float("-inf")
        self.configure(config)

    def configure(self, config: AdmissionConfig) -> None:
        """Take `config` (start-up and each reload): budgets and settings; the windows start
        empty when `window_s` changed; an operator's override ends (a reload resets it), and
        with no budget left the level is 0 at once."""
        guard = config.guard
        classes = {
            Priority.INTERACTIVE: config.interactive,
            Priority.NORMAL: config.normal,
            Priority.BATCH: config.batch,
        }
        self.policy = GuardPolicy(
            budgets_s={
                cls: c.ttft_p95_budget_ms / 1000
                for cls, c in classes.items()
                if c.ttft_p95_budget_ms > 0
            },
            min_samples=guard.min_samples,
            dwell_s=guard.dwell_s,
            recover_ratio=guard.recover_ratio,
            max_tokens_cap=guard.max_tokens_cap,
        )
        # Level 1 holds batch only where aging bounds its wait (a held pick of a class that
        # does not age would stop its whole pool, llmd/admission/scheduler.py).
        self.batch_ages = config.batch.aging_s > 0
        if guard.window_s != self.window_s:
            self.window_s = guard.window_s
            windows = (guard.window_s,)
            self._ttft = {cls: LatencyWindow(self.clock, windows) for cls in Priority}
            self._after_queue = LatencyWindow(self.clock, windows)
        manual = not self.state.enabled or self.state.pinned is not None
        if manual or not self.policy.budgets_s:
            why = "operator override reset by a reload" if manual else "no class has a budget"
            self._change(GuardState(since=self.clock(), reason=why))

    def observed(self, request_class: str, ttft_s: float, queue_s: float) -> None:
        """A streamed request of class `request_class` got its first token `ttft_s` after it
        arrived, `queue_s` of it in admission's queue (the observer calls this for each
        answered streamed request)."""
        self._ttft[Priority.parse(request_class)].add(ttft_s)
        self._after_queue.add(ttft_s - queue_s)

    def override(self, mode: str) -> GuardStatus:
        """The operator's `llmd guard off|on|level N` (llmd/admission/guard.py `overridden`),
        in force until the next `on`, `off`, `level` or reload. Raises ValueError."""
        self._change(overridden(self.state, mode, self.clock()))
        return self.as_snapshot()

    def gate(
        self, inner: Gate, scheduler: Scheduler, outage: Callable[[], bool] = lambda: False
    ) -> Gate:
        """Evaluate the level (at most every EVALUATE_EVERY_S) with `scheduler`'s queues, and
        the gate a pump releases through: `inner`, refusing batch picks while the level holds
        them unless aging made them overdue (so batch waits at most its aging bound).
        `outage()`: whether a pool has no backend that can take a request (an engine booting,
        drained, or held by a deploy); the level then stays as it is, since its queue's wait
        measures the outage, not load, and shedding would not shorten it. Asked only when the
        level is due for evaluation (it walks every pool: about 2.4 µs, where a pump is run
        at least twice a request, issue 37 item 3)."""
        now = self.clock()
        if now - self._evaluated_at >= EVALUATE_EVERY_S and not outage():
            self._evaluated_at = now
            self._change(next_state(self.state, self._readings(scheduler, now), self.policy, now))
        if self.batch_ages and holds_release(self.state, Priority.BATCH):
            return _HoldingBatch(inner)
        return inner

    def check_shed(self, cls: Priority) -> None:
        """Raises Overloaded (503, Retry-After from the expected recovery) when the level sheds
        new requests of `cls` (batch from level 3, normal from 4, interactive never)."""
        if sheds(self.state, cls):
            level = effective_level(self.state)
            retry = retry_after_s(self.state, cls, self.policy, self.clock())
            raise Overloaded(
                f"llmd is shedding new {cls.label} requests to keep its latency budgets "
                f"(SLO guard level {int(level)}: {self.state.reason}); retry later",
                retry_after_s=retry,
            )

    def cap_body(self, cls: Priority, bodies: list[bytes]) -> tuple[list[bytes], bytes | None]:
        """`bodies` (the JSON requests to send, '' for none) with max_tokens lowered to the cap
        when the level caps `cls` (from level 2; normal and batch) and the request asks for
        more or leaves it unset; and the header value `FROM->TO` (FROM `unset` when it was),
        or None when nothing changed."""
        cap = max_tokens_cap(self.state, cls, self.policy)
        if cap is None:
            return bodies, None
        said: bytes | None = None
        out: list[bytes] = []
        for raw in bodies:
            if not raw:
                out.append(raw)
                continue
            body = json.loads(raw)
            field = "max_completion_tokens" if "max_completion_tokens" in body else "max_tokens"
            asked = body.get(field)
            if isinstance(asked, int) and asked <= cap:
                out.append(raw)
                continue
            body[field] = cap
            said = f"{'unset' if asked is None else asked}->{cap}".encode()
            out.append(json.dumps(body, separators=(",", ":")).encode())
        return out, said

    def as_snapshot(self) -> GuardStatus:
        """The guard's part of the Status: level in force, why, since when, mode, and each
        class's p95 over the window against its budget."""
        state = self.state
        level = effective_level(state)
        mode = "off" if not state.enabled else "pinned" if state.pinned is not None else "auto"
        rows = []
        for cls in Priority:
            reading = self._ttft[cls].percentiles(self.window_s)
            budget = self.policy.budgets_s.get(cls)
            rows.append(ClassTtftStatus(cls.label, reading.p95, reading.count, budget))
        since = max(0.0, self.clock() - state.since) if state.since > float("-inf") else 0.0
        return GuardStatus(
            level=int(level),
            name=level.name.lower(),
            reason=state.reason,
            since_s=round(since, 1),
            mode=mode,
            classes=tuple(rows),
        )

    def _readings(self, scheduler: Scheduler, now: float) -> dict[Priority, ClassReading]:
        """Each budgeted class's p95 and samples, and the first-token time its oldest queued
        request can expect: its wait so far plus the recent median from release to first
        token."""
        after = self._after_queue.percentiles(self.window_s).p50 or 0.0
        readings = {}
        for cls in self.policy.budgets_s:
            window = self._ttft[cls].percentiles(self.window_s)
            oldest = scheduler.oldest(cls)
            predicted = None if oldest is None else now - oldest + after
            readings[cls] = ClassReading(window.p95, window.count, predicted)
        return readings

    def _change(self, state: GuardState) -> None:
        """Take `state`; one log line when the level in force changes."""
        before, after = effective_level(self.state), effective_level(state)
        self.state = state
        if after != before:
            log.warning(
                "slo_guard_level_changed",
                guard_level=int(after),
                previous=int(before),
                name=Level(after).name.lower(),
                reason=state.reason,
            )


class _HoldingBatch:
    """A gate that refuses batch picks not overdue by aging, and passes the rest to `inner`."""

    def __init__(self, inner: Gate) -> None:
        self.inner = inner

    def admits(self, entry: Entry, overdue: bool) -> str | None:
        if entry.cls is Priority.BATCH and not overdue:
            return None
        return self.inner.admits(entry, overdue)

    def on_release(self, entry: Entry, backend: str) -> None:
        self.inner.on_release(entry, backend)
