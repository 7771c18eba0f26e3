"""The Prometheus gauges read from the Status snapshot at scrape time, and the suppressed log
lines. Names and labels are a contract (shared/DESIGN.md; pinned by
tests/telemetry/test_metrics.py).

- Per backend (label `engine`): up, restarts, the release it runs, drained, llmd's requests
  there, KV cache, running and waiting.
- llmd: draining, queue depth, in flight (relayed to a backend) and queued by tenant (global,
  over every pool), GPUs, the SLO guard's level and TTFT p95 by class, the device hold's
  batch requests held (llmd/admission/sharing.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from llmd.status import EngineStatus, Status
from llmd.telemetry.metrics import TenantLabels


class StatusCollector(Collector):
    """Gauges from the Status snapshot and counters kept elsewhere, built at scrape time:
    `status()` gives the snapshot, `suppressed()` the rate-limited log lines by event, and
    `tenant` maps tenants to their label (the request-path series' own mapping)."""

    def __init__(
        self,
        status: Callable[[], Status],
        suppressed: Callable[[], dict[str, int]],
        tenant: TenantLabels,
    ) -> None:
        self.status = status
        self.suppressed = suppressed
        self.tenant = tenant

    def describe(self) -> Iterator[Metric]:
        return iter(())  # registering must not take a snapshot (auto-describe would)

    def collect(self) -> Iterator[Metric]:
        suppressed = CounterMetricFamily(
            "llmd_log_lines_suppressed", "Log lines dropped by the rate limiter.", labels=["event"]
        )
        for event, count in sorted(self.suppressed().items()):
            suppressed.add_metric([event], count)
        yield suppressed
        yield from _status_families(self.status(), self.tenant)


def _status_families(status: Status, tenant: TenantLabels) -> Iterator[Metric]:
    yield from _engine_families(status)
    yield _gauge("llmd_draining", "1 while llmd admits no new requests.", status.draining)
    depth = GaugeMetricFamily("llmd_queue_depth", "Requests queued in llmd.", labels=["class"])
    for queue in status.queues:
        depth.add_metric([queue.name], queue.depth)
    yield depth
    in_flight = GaugeMetricFamily(
        "llmd_in_flight", "Requests relayed to the engine now.", labels=["tenant"]
    )
    queued = GaugeMetricFamily(
        "llmd_queued", "Requests waiting in llmd's queues now.", labels=["tenant"]
    )
    relayed: dict[str, int] = {}
    waiting: dict[str, int] = {}
    for row in status.tenants:
        label = tenant(row.name)
        relayed[label] = relayed.get(label, 0) + row.in_flight
        waiting[label] = waiting.get(label, 0) + row.queued
    for label in sorted(relayed):
        in_flight.add_metric([label], relayed[label])
        queued.add_metric([label], waiting[label])
    yield in_flight
    yield queued
    yield from _gpu_families(status)
    yield from _guard_families(status)
    if status.device_hold is not None:
        holds = CounterMetricFamily(
            "llmd_device_holds",
            "Batch requests held in llmd while an interactive request on another engine of "
            "their device waited for its first token.",
        )
        holds.add_metric([], status.device_hold.holds)
        yield holds


def _guard_families(status: Status) -> Iterator[Metric]:
    """The SLO guard's level and each class's TTFT p95 over its window (llmd/admission/slo.py)."""
    guard = status.guard
    if guard is None:
        return
    yield _gauge(
        "llmd_slo_guard_level", "The SLO guard's level in force, 0 (normal) to 4.", guard.level
    )
    p95 = GaugeMetricFamily(
        "llmd_class_ttft_p95_seconds",
        "Time to first token p95 by class over the SLO guard's window.",
        labels=["class"],
    )
    for row in guard.classes:
        if row.p95_s is not None:
            p95.add_metric([row.name], row.p95_s)
    yield p95


def _engine_families(status: Status) -> Iterator[Metric]:
    """One series per backend (label `engine`: its configured name), from its Status entry."""
    engines = status.engines or (status.engine,)
    restarts = CounterMetricFamily(
        "llmd_engine_restarts",
        "Engine exits llmd did not ask for, by engine and reason.",
        labels=["engine", "reason"],
    )
    for engine in engines:
        for reason, count in sorted(engine.exits_by_reason.items()):
            restarts.add_metric([engine.name, reason], count)
    yield restarts
    release = GaugeMetricFamily(
        "llmd_release_info",
        "1 for the release each engine runs (engines running a recorded release only).",
        labels=["engine", "release"],
    )
    for engine in engines:
        if engine.release is not None:
            release.add_metric([engine.name, engine.release], 1.0)
    yield release
    specs: tuple[tuple[str, str, Callable[[EngineStatus], float | None]], ...] = (
        ("llmd_engine_up", "1 when the backend serves requests.", lambda e: e.state == "serving"),
        ("llmd_engine_draining", "1 while an operator drained the backend.", lambda e: e.draining),
        ("llmd_engine_in_flight", "llmd's requests on the backend.", lambda e: e.in_flight),
        ("llmd_engine_kv_cache_usage_ratio", "Engine KV-cache usage, 0..1.", lambda e: e.kv_usage),
        (
            "llmd_engine_kv_cache_capacity_tokens",
            "Engine KV-cache capacity in tokens.",
            lambda e: e.kv_capacity_tokens,
        ),
        ("llmd_engine_requests_running", "Sequences the engine runs.", lambda e: e.running),
        ("llmd_engine_requests_waiting", "Requests the engine queues.", lambda e: e.waiting),
    )
    for name, documentation, value_of in specs:
        family = GaugeMetricFamily(name, documentation, labels=["engine"])
        for engine in engines:
            value = value_of(engine)
            if value is not None:
                family.add_metric([engine.name], float(value))
        yield family


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
