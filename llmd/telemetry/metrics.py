"""llmd's Prometheus series: request-path counters and histograms, and gauges read from the
Status snapshot at scrape time. One `CollectorRegistry` per instance (never the global one).

Names and labels are a contract (shared/DESIGN.md; pinned by tests/telemetry/test_metrics.py):
prefix `llmd_`, base units (seconds, bytes, ratios 0..1), bounded label sets. Tenant labels past
the first `top_tenants` distinct tenants read `other`; prompt lengths are four buckets.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from llmd.status import Status

CLASSES = ("interactive", "normal", "batch")
CANCEL_PHASES = ("queued", "prefill", "decode")
OTHER_TENANT = "other"
# Input-length buckets (prompt tokens) on the latency histograms.
INPUT_LENGTHS = ((512, "le512"), (2048, "le2048"), (8192, "le8192"))
INPUT_LONGER = "gt8192"
INPUT_UNKNOWN = "unknown"
# Seconds: from a cache-warm TTFT on a GPU (a few ms) to a long batch generation (30 min).
LATENCY_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0,
    7.5, 10.0, 15.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0,
)  # fmt: skip


def input_length_label(prompt_tokens: int | None) -> str:
    """The `input_length` label for a prompt of `prompt_tokens` tokens."""
    if prompt_tokens is None:
        return INPUT_UNKNOWN
    for limit, label in INPUT_LENGTHS:
        if prompt_tokens <= limit:
            return label
    return INPUT_LONGER


class TenantLabels:
    """Maps tenants to label values: the first `limit` distinct tenants keep their name (stable
    for the process's life, so series never flap), later ones read `other`."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._known: set[str] = set()

    def __call__(self, tenant: str) -> str:
        if tenant in self._known:
            return tenant
        if len(self._known) < self.limit:
            self._known.add(tenant)
            return tenant
        return OTHER_TENANT


class ProxyMetrics:
    """The series llmd updates per request, and a collector for the rest (read from `Status`)."""

    def __init__(self, top_tenants: int) -> None:
        # No `_created` series: they double the text format for nothing Prometheus uses there.
        # (A process-wide switch of prometheus_client; llmd's process has no other exporter.)
        disable_created_metrics()  # type: ignore[no-untyped-call]
        self.registry = CollectorRegistry()
        self.tenant = TenantLabels(top_tenants)
        r = self.registry
        self.requests = Counter(
            "llmd_requests", "Finished requests by tenant, class and HTTP status.",
            ["tenant", "class", "status"], registry=r,
        )  # fmt: skip
        self.queue_wait = _histogram(r, "llmd_queue_wait_seconds", "Time queued before release.")
        self.ttft = _histogram(
            r, "llmd_time_to_first_token_seconds", "Arrival to the first response byte."
        )
        self.e2e = _histogram(
            r, "llmd_e2e_request_latency_seconds", "Arrival to the last byte, completed requests."
        )
        self.prompt_tokens = Counter(
            "llmd_prompt_tokens", "Prompt tokens of relayed requests.", ["tenant"], registry=r
        )
        self.generation_tokens = Counter(
            "llmd_generation_tokens", "Output tokens sent to clients.", ["tenant"], registry=r
        )
        self.rejections = Counter(
            "llmd_rejections", "Requests answered with an error before reaching the engine.",
            ["reason"], registry=r,
        )  # fmt: skip
        self.cancellations = Counter(
            "llmd_cancellations", "Requests whose client left, by phase.", ["phase"], registry=r
        )
        for phase in CANCEL_PHASES:
            self.cancellations.labels(phase)
        self.timeouts = Counter(
            "llmd_timeouts", "Requests ended by a queue timeout or deadline.", ["class"],
            registry=r,
        )  # fmt: skip
        self._status: Callable[[], Status] | None = None
        self._suppressed: Callable[[], dict[str, int]] = dict
        r.register(_StatusCollector(self))

    def bind(
        self, status: Callable[[], Status], suppressed: Callable[[], dict[str, int]] | None = None
    ) -> None:
        """Read gauges at scrape time from `status()`, suppressed log lines from `suppressed()`."""
        self._status = status
        if suppressed is not None:
            self._suppressed = suppressed

    def exposition(self) -> bytes:
        """The Prometheus text format of every llmd series."""
        return generate_latest(self.registry)


def _histogram(registry: CollectorRegistry, name: str, documentation: str) -> Histogram:
    return Histogram(
        name, documentation, ["class", "input_length"], buckets=LATENCY_BUCKETS, registry=registry
    )


class _StatusCollector(Collector):
    """Gauges from the Status snapshot and counters kept elsewhere, built at scrape time."""

    def __init__(self, metrics: ProxyMetrics) -> None:
        self.metrics = metrics

    def describe(self) -> Iterator[Metric]:
        return iter(())  # unknown until bound; auto-describe must not take a snapshot

    def collect(self) -> Iterator[Metric]:
        suppressed = CounterMetricFamily(
            "llmd_log_lines_suppressed", "Log lines dropped by the rate limiter.", labels=["event"]
        )
        for event, count in sorted(self.metrics._suppressed().items()):
            suppressed.add_metric([event], count)
        yield suppressed
        if self.metrics._status is None:
            return
        yield from _status_families(self.metrics._status(), self.metrics.tenant)


def _status_families(status: Status, tenant: TenantLabels) -> Iterator[Metric]:
    engine = status.engine
    yield _gauge("llmd_engine_up", "1 when the engine serves requests.", engine.state == "serving")
    restarts = CounterMetricFamily(
        "llmd_engine_restarts", "Engine exits llmd did not ask for, by reason.", labels=["reason"]
    )
    for reason, count in sorted(engine.exits_by_reason.items()):
        restarts.add_metric([reason], count)
    yield restarts
    yield _gauge("llmd_draining", "1 while llmd admits no new requests.", status.draining)
    if status.kv_cache.usage is not None:
        yield _gauge(
            "llmd_engine_kv_cache_usage_ratio",
            "Engine KV-cache usage, 0..1.",
            status.kv_cache.usage,
        )
    if status.kv_cache.capacity_tokens is not None:
        yield _gauge(
            "llmd_engine_kv_cache_capacity_tokens",
            "Engine KV-cache capacity in tokens.",
            status.kv_cache.capacity_tokens,
        )
    if engine.running is not None:
        yield _gauge("llmd_engine_requests_running", "Sequences the engine runs.", engine.running)
    if engine.waiting is not None:
        yield _gauge("llmd_engine_requests_waiting", "Requests the engine queues.", engine.waiting)
    depth = GaugeMetricFamily("llmd_queue_depth", "Requests queued in llmd.", labels=["class"])
    for queue in status.queues:
        depth.add_metric([queue.name], queue.depth)
    yield depth
    in_flight = GaugeMetricFamily(
        "llmd_in_flight", "Requests relayed to the engine now.", labels=["tenant"]
    )
    by_label: dict[str, int] = {}
    for row in status.tenants:
        label = tenant(row.name)
        by_label[label] = by_label.get(label, 0) + row.in_flight
    for label, count in sorted(by_label.items()):
        in_flight.add_metric([label], count)
    yield in_flight
    yield from _gpu_families(status)


def _gpu_families(status: Status) -> Iterator[Metric]:
    specs = (
        ("llmd_gpu_utilization_ratio", "GPU utilisation, 0..1 (NVML).", "utilization"),
        ("llmd_gpu_memory_used_bytes", "GPU memory in use.", "memory_used_bytes"),
        ("llmd_gpu_memory_total_bytes", "GPU memory in all.", "memory_total_bytes"),
        ("llmd_gpu_temperature_celsius", "GPU temperature.", "temperature_c"),
        ("llmd_gpu_power_watts", "GPU power draw.", "power_w"),
    )
    for name, documentation, field in specs:
        family = GaugeMetricFamily(name, documentation, labels=["gpu", "name"])
        for device in status.gpus.devices:
            value = getattr(device, field)
            if value is not None:
                family.add_metric([str(device.index), device.name], value)
        yield family


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=float(value))
