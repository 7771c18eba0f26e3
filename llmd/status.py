"""The one `Status` contract: a frozen snapshot read by `llmd status`, the TUI and /metrics.

Serialised by `Status.to_dict` to JSON; fields are only ever added, never renamed. Times
are seconds, ratios 0..1, memory bytes; a figure llmd does not know (yet) is null. The shape is
pinned by tests/test_status.py and recorded in tests/data/status_example.json.

Only the shapes live here. Each subsystem gives its own part (`as_snapshot()`: the engine
state, the in-flight registry, admission, the observer) and `DaemonState.snapshot` sums them.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

from llmd.events import Event
from llmd.gpu.nvml import GpuDevice
from llmd.telemetry.windows import Percentiles

# Active sequences listed in a snapshot, oldest first; `in_flight` gives the full count.
MAX_SEQUENCES = 1000


@dataclasses.dataclass(frozen=True)
class PhaseTimes:
    """One phase of the engine's requests over a window, from its own histograms: mean and
    p50/p95 in seconds (estimated within the engine's buckets, as Prometheus's
    `histogram_quantile` does; None when no request ended there) and how many requests (or,
    for the inter-token latency, output steps) it rests on."""

    mean_s: float | None = None
    p50_s: float | None = None
    p95_s: float | None = None
    count: int = 0


@dataclasses.dataclass(frozen=True)
class EngineLatencyStatus:
    """The engine's side of latency over its last `window_s` seconds (vLLM's own series,
    llmd/engine/metrics.py): time in its queue, prefill (scheduled to first token) and decode
    (first to last token) of the requests that ended there, its inter-token latency,
    `prefill_share` (prefill's part of prefill + decode time, 0..1), preemptions per second
    and since the engine started, and the prefix cache's hit ratio (cached prompt tokens over
    those looked up, 0..1) over the window and since start. None: the engine gave no figure
    (or nothing happened in the window)."""

    window_s: float
    queue: PhaseTimes = PhaseTimes()
    prefill: PhaseTimes = PhaseTimes()
    decode: PhaseTimes = PhaseTimes()
    inter_token: PhaseTimes = PhaseTimes()
    prefill_share: float | None = None
    preemptions_per_s: float | None = None
    preemptions: int | None = None
    prefix_cache_hit_ratio: float | None = None
    prefix_cache_hit_ratio_total: float | None = None


@dataclasses.dataclass(frozen=True)
class EngineStatus:
    """One backend (an engine llmd supervises or an upstream it does not): its process, its
    gauges, its diagnosis and where it stands in the fleet."""

    # An engine's phase; an upstream's: serving, unreachable (breaker open), probing (half
    # open) or unknown (no answer yet).
    state: str
    pid: int | None
    model: str
    version: str
    max_model_len: int | None
    uptime_s: float | None
    restarts: int
    last_exit_reason: str | None  # its kind
    last_exit_detail: str | None
    exits_by_reason: dict[str, int] = dataclasses.field(default_factory=dict)
    running: int | None = None  # its own gauges
    waiting: int | None = None
    metrics_age_s: float | None = None  # how old those gauges are
    # The diagnosis of its last boot or exit (findings: check, severity, message, hint,
    # evidence).
    diagnosis: tuple[dict[str, str], ...] = ()
    name: str = "main"
    kind: str = "engine"  # `engine` llmd supervises, `upstream` it does not
    gpus: tuple[str, ...] = ()
    release: str | None = None  # the release it runs; null when it runs no recorded release
    # Why, when llmd chose the release at start-up from the state directory's deploy history;
    # else null.
    release_note: str | None = None
    kv_usage: float | None = None  # 0..1, from its metrics
    kv_capacity_tokens: int | None = None  # from its metrics
    in_flight: int = 0  # llmd's requests there
    draining: bool = False  # an operator drained it
    url: str | None = None  # an upstream's
    breaker: str | None = None  # an upstream's circuit breaker: closed, open, half_open
    latency: EngineLatencyStatus | None = None  # its own figures; null until it reported any


@dataclasses.dataclass(frozen=True)
class ModelStatus:
    """One served model: its pool's backends (config order) and whether one of them can take
    a request now (`available`)."""

    name: str
    backends: tuple[str, ...]
    available: bool


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
class BudgetStatus:
    """One token budget of a tenant (`name`: its tenants-file key, e.g.
    `input_tokens_per_minute`): its size, the tokens left now and the seconds until it is full
    again."""

    name: str
    limit: int
    remaining: int
    reset_s: float


@dataclasses.dataclass(frozen=True)
class TenantStatus:
    """One tenant: requests in flight (relayed to the engine) and queued (in admission's
    queue), and its limits (None: unlimited); the KV tokens its running requests hold and its
    share in tokens (both summed over the pools; None: no share, or one of a pool not measured
    yet); where it stands in each token budget (none: it has none)."""

    name: str
    in_flight: int = 0
    queued: int = 0
    max_in_flight: int | None = None
    max_queued: int | None = None
    kv_tokens: int = 0
    max_kv_tokens: int | None = None
    budgets: tuple[BudgetStatus, ...] = ()


@dataclasses.dataclass(frozen=True)
class SequenceStatus:
    """One live request: `phase` queued, prefill (no output yet) or decode; `age_s` since it was
    received; `ttft_s` when its first byte went out; `tokens_per_s` of output since then;
    the `model` it asked for, the `backend` it runs on (null while queued) and its `endpoint`
    (its name in the endpoint table)."""

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
    model: str | None = None
    backend: str | None = None
    endpoint: str | None = None


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
    """Since llmd started: ended requests, each in exactly one of `answered`, `rejections` (by
    error code), `cancellations` (the client left; by phase), `aborted` (llmd ended it:
    operator cancel, drain deadline, client send timeout; by code) and `errors` (failed after
    reaching a backend, or in llmd; by code), so `requests` is their sum. `timeouts` counts
    again those a queue timeout or deadline ended."""

    requests: int
    answered: int
    rejections: dict[str, int]
    cancellations: dict[str, int]
    aborted: dict[str, int]
    errors: dict[str, int]
    timeouts: int


@dataclasses.dataclass(frozen=True)
class EndpointStatus:
    """One endpoint (its name in the endpoint table, llmd/endpoints/table.py; `other`: refused
    before llmd knew it) that had a request since llmd started: now, its requests relayed to a
    backend (`in_flight`) and waiting in llmd (`queued`); since start, its ended `requests`,
    each once in `answered`, `rejected`, `cancelled`, `aborted` or `errors` (as `counts`);
    `requests_per_s`: those that ended over the last minute."""

    name: str
    in_flight: int = 0
    queued: int = 0
    requests: int = 0
    answered: int = 0
    rejected: int = 0
    cancelled: int = 0
    aborted: int = 0
    errors: int = 0
    requests_per_s: float = 0.0


@dataclasses.dataclass(frozen=True)
class ClassTtftStatus:
    """One class as the SLO guard sees it: its TTFT p95 (s; None before any request) over the
    guard's window, how many requests it rests on, and its budget (s; None: none)."""

    name: str
    p95_s: float | None
    samples: int
    budget_s: float | None


@dataclasses.dataclass(frozen=True)
class GuardStatus:
    """The SLO guard (llmd/admission/guard.py): its level in force (0-4) and that level's
    name, why it is there, for how long (s), its `mode` (`auto`, `off` or `pinned` by the
    operator), and each class's TTFT p95 against its budget."""

    level: int
    name: str
    reason: str
    since_s: float
    mode: str
    classes: tuple[ClassTtftStatus, ...] = ()


@dataclasses.dataclass(frozen=True)
class DeviceHoldStatus:
    """The device hold (llmd/admission/sharing.py): the groups of engines sharing a device,
    the longest a batch request is held (ms), the engines held now each with why (`reasons`,
    same order), how many batch requests were held since llmd started, the seat limit
    (`batch_seats`, 0: none) and the engines it limits now each with why (`limit_reasons`);
    with `admission.device_pause`, the engines stopped now (`paused`), how many times engines
    were stopped since llmd started (`pauses`) and the seconds they spent stopped (`paused_s`,
    the pauses under way included)."""

    groups: tuple[tuple[str, ...], ...]
    bound_ms: float
    held: tuple[str, ...] = ()
    reasons: tuple[str, ...] = ()
    holds: int = 0
    batch_seats: int = 0
    limited: tuple[str, ...] = ()
    limit_reasons: tuple[str, ...] = ()
    paused: tuple[str, ...] = ()
    pauses: int = 0
    paused_s: float = 0.0


@dataclasses.dataclass(frozen=True)
class Status:
    """Everything an operator sees at a glance. Times `taken_at` and `started_at` are Unix
    time (s); `engine` and `kv_cache` are the `main` engine's (or the first backend's)."""

    llmd_version: str
    taken_at: float
    listen: str
    draining: bool
    in_flight: int  # requests relayed to a backend now
    engine: EngineStatus
    kv_cache: KvCacheStatus = KvCacheStatus()
    gpus: GpuStatus = GpuStatus()
    queues: tuple[QueueStatus, ...] = ()
    tenants: tuple[TenantStatus, ...] = ()
    sequences: tuple[SequenceStatus, ...] = ()
    latency: LatencyWindows | None = None
    throughput: ThroughputStatus | None = None
    counts: CountsStatus | None = None
    started_at: float | None = None  # when this llmd process started: new means it restarted
    events: tuple[Event, ...] = ()  # the recent notable log events, oldest first (llmd.events)
    queued: int = 0  # requests waiting in llmd (being validated or in admission's queue)
    engines: tuple[EngineStatus, ...] = ()  # one per backend: engines, then upstreams, config order
    models: tuple[ModelStatus, ...] = ()  # one per served model
    guard: GuardStatus | None = None
    device_hold: DeviceHoldStatus | None = None  # None: no engines share a device
    # One per deploy in progress or ended since llmd started, the latest per engine
    # (llmd/releases/deploy_events.py `DeployState.as_snapshot`: deploy, engine, strategy, old,
    # new, phase, step, steps, share, verdict, reason).
    deploys: tuple[dict[str, Any], ...] = ()
    # One per endpoint with a request live or ended since llmd started, in the order each was
    # first seen (so rows keep their place).
    endpoints: tuple[EndpointStatus, ...] = ()

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
