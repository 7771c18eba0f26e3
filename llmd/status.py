"""The one `Status` contract: a frozen snapshot read by `llmd status`, the TUI and /metrics.

Serialised by `Status.to_dict` to JSON; fields are only ever added, never renamed. Times
are seconds, ratios 0..1, memory bytes; a figure llmd does not know (yet) is null. The shape is
pinned by tests/test_status.py and recorded in tests/data/status_example.json.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from typing import Any

from llmd import __version__
from llmd.admission.classes import Priority
from llmd.proxy.context import ProxyContext
from llmd.proxy.inflight import Exchange
from llmd.telemetry.events import Event, recent_events
from llmd.telemetry.gpu import GpuDevice
from llmd.telemetry.metrics import CANCEL_PHASES, CLASSES
from llmd.telemetry.windows import Percentiles

# Active sequences listed in a snapshot, oldest first; `in_flight` gives the full count.
MAX_SEQUENCES = 1000


@dataclasses.dataclass(frozen=True)
class EngineStatus:
    """The engine: phase, pid, model, version, uptime (s), restarts, last exit (kind and detail),
    exits by reason, its own running/waiting gauges (`metrics_age_s`: how old they are), and the
    diagnosis of its last boot or exit (findings: check, severity, message, hint, evidence)."""

    state: str
    pid: int | None
    model: str
    version: str
    max_model_len: int | None
    uptime_s: float | None
    restarts: int
    last_exit_reason: str | None
    last_exit_detail: str | None
    exits_by_reason: dict[str, int] = dataclasses.field(default_factory=dict)
    running: int | None = None
    waiting: int | None = None
    metrics_age_s: float | None = None
    diagnosis: tuple[dict[str, str], ...] = ()


@dataclasses.dataclass(frozen=True)
class KvCacheStatus:
    """The engine's KV cache: `usage` 0..1; capacity in tokens = `num_blocks` * `block_size`."""

    usage: float | None = None
    capacity_tokens: int | None = None
    block_size: int | None = None
    num_blocks: int | None = None


@dataclasses.dataclass(frozen=True)
class GpuStatus:
    """The GPUs NVML sees; none, with `reason`, when there is no NVIDIA GPU."""

    devices: tuple[GpuDevice, ...] = ()
    reason: str | None = None


@dataclasses.dataclass(frozen=True)
class QueueStatus:
    """llmd's queue for one class: requests waiting and the oldest one's wait (s)."""

    name: str
    depth: int = 0
    oldest_wait_s: float | None = None


@dataclasses.dataclass(frozen=True)
class TenantStatus:
    """One tenant: requests in flight and queued, and its limits (None: unlimited)."""

    name: str
    in_flight: int = 0
    queued: int = 0
    max_in_flight: int | None = None
    max_queued: int | None = None


@dataclasses.dataclass(frozen=True)
class SequenceStatus:
    """One live request: `phase` queued, prefill (no output yet) or decode; `age_s` since it was
    received; `ttft_s` when its first byte went out; `tokens_per_s` of output since then."""

    id: str
    tenant: str
    request_class: str
    phase: str
    stream: bool
    prompt_tokens: int | None
    output_tokens: int
    age_s: float
    ttft_s: float | None
    tokens_per_s: float | None


@dataclasses.dataclass(frozen=True)
class LatencyStatus:
    """Percentiles over one window: queue wait, time to first token, end to end (completed)."""

    queue_wait: Percentiles
    ttft: Percentiles
    e2e: Percentiles


@dataclasses.dataclass(frozen=True)
class LatencyWindows:
    """The same percentiles over the last minute and the last five minutes."""

    last_1m: LatencyStatus
    last_5m: LatencyStatus


@dataclasses.dataclass(frozen=True)
class ThroughputStatus:
    """Per second: finished requests and their tokens over the last minute (llmd's count), and
    the engine's own prompt and generation token rates over its last few seconds (live)."""

    requests_per_s: float
    prompt_tokens_per_s: float
    output_tokens_per_s: float
    engine_prompt_tokens_per_s: float | None
    engine_generation_tokens_per_s: float | None


@dataclasses.dataclass(frozen=True)
class CountsStatus:
    """Since llmd started: finished requests, rejections by reason (error code), cancellations
    by phase, timeouts, and failures after reaching the engine."""

    requests: int
    rejections: dict[str, int]
    cancellations: dict[str, int]
    timeouts: int
    errors: int


@dataclasses.dataclass(frozen=True)
class Status:
    """Everything an operator sees at a glance; `taken_at` and `started_at` (when this llmd
    process started: a new value means the daemon restarted) are Unix time (s); `events` are
    the recent notable log events, oldest first (llmd.telemetry.events)."""

    llmd_version: str
    taken_at: float
    listen: str
    draining: bool
    in_flight: int
    engine: EngineStatus
    kv_cache: KvCacheStatus = KvCacheStatus()
    gpus: GpuStatus = GpuStatus()
    queues: tuple[QueueStatus, ...] = ()
    tenants: tuple[TenantStatus, ...] = ()
    sequences: tuple[SequenceStatus, ...] = ()
    latency: LatencyWindows | None = None
    throughput: ThroughputStatus | None = None
    counts: CountsStatus | None = None
    started_at: float | None = None
    events: tuple[Event, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The snapshot as JSON-ready dicts and lists (what `dataclasses.asdict` gives, without
        its deep copies: a snapshot with 500 sequences converts in a few milliseconds)."""
        plain: dict[str, Any] = _plain(self)
        return plain


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in _fields(type(value))}
    if isinstance(value, tuple | list):
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    return value


@functools.cache
def _fields(cls: type[Any]) -> tuple[dataclasses.Field[Any], ...]:
    return dataclasses.fields(cls)


def take_snapshot(ctx: ProxyContext) -> Status:
    """A snapshot of llmd now, from the proxy context: the engine state, the live exchanges and
    the observer's readings, windows and tallies."""
    now = time.monotonic()
    engine = ctx.engine
    observer = ctx.observer
    sample = observer.engine_sample
    uptime = engine.uptime_s()
    exchanges = ctx.inflight.exchanges()
    return Status(
        llmd_version=__version__,
        taken_at=time.time(),
        listen=ctx.config.server.listen,
        draining=ctx.draining,
        in_flight=len(exchanges),
        engine=EngineStatus(
            state=engine.phase.value,
            pid=engine.pid,
            model=engine.model or ctx.config.engine.model_name,
            version=engine.engine_version,
            max_model_len=engine.max_model_len,
            uptime_s=round(uptime, 1) if uptime is not None else None,
            restarts=engine.restarts,
            last_exit_reason=engine.last_exit.kind if engine.last_exit else None,
            last_exit_detail=engine.last_exit.detail if engine.last_exit else None,
            exits_by_reason=dict(engine.exits_by_reason),
            running=sample.running if sample else None,
            waiting=sample.waiting if sample else None,
            metrics_age_s=round(now - sample.taken_at, 2) if sample else None,
            diagnosis=tuple(finding.to_dict() for finding in engine.diagnosis),
        ),
        kv_cache=KvCacheStatus(
            usage=sample.kv_usage,
            capacity_tokens=sample.kv_capacity_tokens,
            block_size=sample.block_size,
            num_blocks=sample.num_gpu_blocks,
        )
        if sample
        else KvCacheStatus(),
        gpus=GpuStatus(observer.gpus.devices, observer.gpus.reason),
        queues=_queues(ctx),
        tenants=_tenants(ctx),
        sequences=tuple(_sequence(x, now) for x in exchanges[:MAX_SEQUENCES]),
        latency=LatencyWindows(_latency(ctx, 60), _latency(ctx, 300)),
        throughput=_throughput(ctx),
        counts=_counts(ctx),
        started_at=round(ctx.started_at, 3),
        events=recent_events().recent(),
    )


def _queues(ctx: ProxyContext) -> tuple[QueueStatus, ...]:
    """One row per class: requests waiting in admission's queue and the oldest one's wait."""
    scheduler = ctx.admission.scheduler
    now = time.monotonic()
    oldest: dict[str, float] = {}
    for entry in scheduler.entries():
        oldest[entry.cls.label] = min(oldest.get(entry.cls.label, now), entry.enqueued_at)
    return tuple(
        QueueStatus(
            name,
            depth=scheduler.queued(Priority.parse(name)),
            oldest_wait_s=round(now - oldest[name], 3) if name in oldest else None,
        )
        for name in CLASSES
    )


def _tenants(ctx: ProxyContext) -> tuple[TenantStatus, ...]:
    """One row per configured tenant and per tenant with work: in flight (relayed or queued
    in llmd), queued, and the tenant's limits."""
    in_flight: dict[str, int] = {}
    for exchange in ctx.inflight.exchanges():
        in_flight[exchange.tenant] = in_flight.get(exchange.tenant, 0) + 1
    queued: dict[str, int] = {}
    for entry in ctx.admission.scheduler.entries():
        queued[entry.tenant.name] = queued.get(entry.tenant.name, 0) + 1
    limits = {tenant.name: tenant for tenant in ctx.admission.tenants.tenants()}
    return tuple(
        TenantStatus(
            name,
            in_flight=in_flight.get(name, 0),
            queued=queued.get(name, 0),
            max_in_flight=limits[name].max_concurrency or None if name in limits else None,
            max_queued=limits[name].max_queued or None if name in limits else None,
        )
        for name in sorted({*in_flight, *limits})
    )


def _sequence(exchange: Exchange, now: float) -> SequenceStatus:
    first = exchange.first_byte_at
    decode_s = now - first if first is not None else 0.0
    return SequenceStatus(
        id=exchange.request_id,
        tenant=exchange.tenant,
        request_class=exchange.request_class,
        phase=exchange.phase,
        stream=exchange.stream,
        prompt_tokens=exchange.prompt_tokens,
        output_tokens=exchange.output_tokens,
        age_s=round(now - exchange.started_at, 3),
        ttft_s=round(first - exchange.started_at, 4) if first is not None else None,
        tokens_per_s=round(exchange.output_tokens / decode_s, 1) if decode_s > 0.05 else None,
    )


def _latency(ctx: ProxyContext, window_s: int) -> LatencyStatus:
    windows = ctx.observer.windows
    return LatencyStatus(
        queue_wait=windows.queue_wait.percentiles(window_s),
        ttft=windows.ttft.percentiles(window_s),
        e2e=windows.e2e.percentiles(window_s),
    )


def _throughput(ctx: ProxyContext) -> ThroughputStatus:
    observer = ctx.observer
    requests, prompt, output = observer.windows.throughput.rates(60, 3)
    engine_rates = observer.engine_token_rates
    return ThroughputStatus(
        requests_per_s=round(requests, 2),
        prompt_tokens_per_s=round(prompt, 1),
        output_tokens_per_s=round(output, 1),
        engine_prompt_tokens_per_s=round(engine_rates[0], 1) if engine_rates else None,
        engine_generation_tokens_per_s=round(engine_rates[1], 1) if engine_rates else None,
    )


def _counts(ctx: ProxyContext) -> CountsStatus:
    tallies = ctx.observer.tallies
    return CountsStatus(
        requests=tallies.requests,
        rejections=dict(tallies.rejections),
        cancellations={phase: tallies.cancellations[phase] for phase in CANCEL_PHASES},
        timeouts=tallies.timeouts,
        errors=tallies.errors,
    )
