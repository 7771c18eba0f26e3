"""The Prometheus gauges read from the Status snapshot at scrape time, and the suppressed log
lines. Names and labels are a contract (shared/DESIGN.md; pinned by
tests/telemetry/test_metrics.py).

- Per backend (label `engine`): up, restarts, the release it runs, drained, llmd's requests
  there, KV cache, running and waiting; and the engine's side of latency as it reports it
  (its queue, prefill, decode and inter-token histograms with its own buckets, preemptions,
  prefix-cache hits and queries: cumulative since that engine started, so a restart is a
  counter reset to Prometheus).
- llmd: draining, queue depth, in flight (relayed to a backend) and queued by tenant (global,
  over every pool), each tenant's KV share in use and token budgets left, GPUs, the SLO
  guard's level and TTFT p95 by class, the device hold's batch requests held
  (llmd/admission/sharing.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from llmd.engine.histograms import EngineHistogram
from llmd.engine.metrics import EngineSample
from llmd.status import EngineStatus, Status
from llmd.telemetry.metrics import TenantLabels


class StatusCollector(Collector):
    """Gauges from the Status snapshot and counters kept elsewhere, built at scrape time:
    `status()` gives the snapshot, `suppressed()` the rate-limited log lines by event, and
    `tenant` maps tenants to their label (the request-path series' own mapping), and
    `samples()` the latest read of each backend's own metrics."""

    def __init__(
        self,
        status: Callable[[], Status],
        suppressed: Callable[[], dict[str, int]],
        tenant: TenantLabels,
        samples: Callable[[], Mapping[str, EngineSample]] = dict,
    ) -> None:
        self.status = status
        self.suppressed = suppressed
        self.tenant = tenant
        self.samples = samples

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
        yield from _engine_latency_families(self.samples())


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
    yield from _tenant_limit_families(status, tenant)
    yield from _gpu_families(status)
    yield from _guard_families(status)
    if status.device_hold is not None:
        hold = status.device_hold
        for name, documentation, value in (
            (
                "llmd_device_holds",
                "Batch requests held in llmd while an interactive request on another engine "
                "of their device waited for its first token.",
                hold.holds,
            ),
            (
                "llmd_device_pauses",
                "Times the device pause (admission.device_pause) stopped an engine while an "
                "interactive request on another engine of its device waited for its first token.",
                hold.pauses,
            ),
            (
                "llmd_device_paused_seconds",
                "Seconds engines spent stopped by the device pause, the pauses under way included.",
                hold.paused_s,
            ),
        ):
            family = CounterMetricFamily(name, documentation)
            family.add_metric([], value)
            yield family


def _tenant_limit_families(status: Status, tenant: TenantLabels) -> Iterator[Metric]:
    """Each tenant's KV share in use and its share, and the tokens left in each of its token
    budgets (llmd/admission/shares.py, budgets.py); tenants past the label bound are summed
    under `other`."""
    held = GaugeMetricFamily(
        "llmd_tenant_kv_tokens",
        "KV tokens the tenant's running requests hold, as llmd prices them, over every pool.",
        labels=["tenant"],
    )
    share = GaugeMetricFamily(
        "llmd_tenant_kv_limit_tokens",
        "The tenant's share of the KV cache, in tokens, over every pool (tenants with one).",
        labels=["tenant"],
    )
    left = GaugeMetricFamily(
        "llmd_tenant_budget_remaining_tokens",
        "Tokens left in each token budget of the tenant (budget: input_tokens_per_minute, "
        "output_tokens_per_minute or tokens_per_day).",
        labels=["tenant", "budget"],
    )
    sums: dict[str, dict[tuple[str, ...], float]] = {"held": {}, "share": {}, "left": {}}
    for row in status.tenants:
        label = tenant(row.name)
        _add(sums["held"], (label,), row.kv_tokens)
        if row.max_kv_tokens is not None:
            _add(sums["share"], (label,), row.max_kv_tokens)
        for budget in row.budgets:
            _add(sums["left"], (label, budget.name), budget.remaining)
    for family, name in ((held, "held"), (share, "share"), (left, "left")):
        for labels, value in sorted(sums[name].items()):
            family.add_metric(list(labels), value)
        yield family


def _add(sums: dict[tuple[str, ...], float], labels: tuple[str, ...], value: float) -> None:
    sums[labels] = sums.get(labels, 0) + value


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
    budget = GaugeMetricFamily(
        "llmd_class_ttft_budget_seconds",
        "Time to first token budget by class (the SLO guard's; classes with one only).",
        labels=["class"],
    )
    for row in guard.classes:
        if row.p95_s is not None:
            p95.add_metric([row.name], row.p95_s)
        if row.budget_s is not None:
            budget.add_metric([row.name], row.budget_s)
    yield p95
    yield budget


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
    breaker = GaugeMetricFamily(
        "llmd_engine_breaker_open",
        "1 while an upstream's circuit breaker is open (nothing is sent to it), else 0.",
        labels=["engine"],
    )
    for engine in engines:
        if engine.breaker is not None:
            breaker.add_metric([engine.name], float(engine.breaker == "open"))
    yield breaker
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


# The engine's histograms and counters passed through, engine-labelled: one series set per
# backend (bounded by the config), each with the engine's own buckets (vLLM 0.32's: about 20).
_ENGINE_HISTOGRAMS = (
    ("llmd_engine_queue_time_seconds", "queue_time", "Time requests waited in the engine."),
    (
        "llmd_engine_prefill_time_seconds",
        "prefill_time",
        "Engine prefill time: scheduled to first token.",
    ),
    (
        "llmd_engine_decode_time_seconds",
        "decode_time",
        "Engine decode time: first token to last.",
    ),
    (
        "llmd_engine_inter_token_latency_seconds",
        "inter_token_latency",
        "Engine time between a request's output steps.",
    ),
)
_ENGINE_COUNTERS = (
    ("llmd_engine_preemptions", "preemptions_total", "Sequences the engine preempted."),
    (
        "llmd_engine_prefix_cache_hits",
        "prefix_cache_hits_total",
        "Prompt tokens the engine found in its prefix cache.",
    ),
    (
        "llmd_engine_prefix_cache_queries",
        "prefix_cache_queries_total",
        "Prompt tokens the engine looked up in its prefix cache.",
    ),
)


def _engine_latency_families(samples: Mapping[str, EngineSample]) -> Iterator[Metric]:
    """The engine's side of latency, from each backend's latest read (cumulative since that
    engine started)."""
    for name, field, documentation in _ENGINE_HISTOGRAMS:
        family = HistogramMetricFamily(name, documentation, labels=["engine"])
        for engine, sample in sorted(samples.items()):
            histogram: EngineHistogram | None = getattr(sample, field)
            if histogram is not None:
                buckets = [(_le(le), count) for le, count in histogram.buckets]
                family.add_metric([engine], buckets, histogram.sum)
        yield family
    for name, field, documentation in _ENGINE_COUNTERS:
        counter = CounterMetricFamily(name, documentation, labels=["engine"])
        for engine, sample in sorted(samples.items()):
            value = getattr(sample, field)
            if value is not None:
                counter.add_metric([engine], value)
        yield counter


def _le(bound: float) -> str:
    return "+Inf" if math.isinf(bound) else repr(bound)


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
