"""The Prometheus contract: series names, types and label names (parsed back with
prometheus_client.parser), tenant folding, input-length buckets, gauges from the snapshot."""

from __future__ import annotations

import dataclasses
import math
import time
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from llmd.admission.classes import Priority
from llmd.admission.entries import Entry
from llmd.admission.tenants import Tenant, TenantDirectory
from llmd.config import Config, EngineConfig
from llmd.engine.histograms import EngineHistogram
from llmd.engine.metrics import EngineSample
from llmd.gpu.nvml import GpuDevice, GpuReading
from llmd.inflight import Exchange
from llmd.state import DaemonState
from llmd.supervisor.state import EnginePhase, EngineState
from llmd.telemetry.metrics import input_length_label
from llmd.telemetry.observer import Observer
from llmd.telemetry.status_metrics import StatusCollector
from tests.support.exchanges import finished_exchange
from tests.support.state import daemon_state

HISTOGRAM_LABELS = {"tenant", "class", "input_length", "model", "endpoint", "release", "le"}
ENGINE = {"engine"}
ENGINE_HISTOGRAM = {"engine", "le"}
# name -> (type, label names). The contract: change only with the README and the dashboard.
SERIES = {
    "llmd_requests": (
        "counter",
        {"tenant", "class", "status", "model", "endpoint", "outcome", "code"},
    ),
    "llmd_backend_requests": ("counter", {"engine", "model", "outcome", "release"}),
    "llmd_queue_wait_seconds": ("histogram", HISTOGRAM_LABELS),
    "llmd_time_to_first_token_seconds": ("histogram", HISTOGRAM_LABELS),
    "llmd_e2e_request_latency_seconds": ("histogram", HISTOGRAM_LABELS),
    "llmd_inter_token_latency_seconds": ("histogram", {"class", "model", "le"}),
    "llmd_prompt_tokens": ("counter", {"tenant", "endpoint"}),
    "llmd_generation_tokens": ("counter", {"tenant"}),
    "llmd_rejections": ("counter", {"reason"}),
    "llmd_cancellations": ("counter", {"phase"}),
    "llmd_timeouts": ("counter", {"class"}),
    # On-demand engines': no wake or eviction in this context, so no labels yet.
    "llmd_engine_wakes": ("counter", set()),
    "llmd_engine_wake_seconds": ("histogram", set()),
    "llmd_engine_evictions": ("counter", set()),
    "llmd_wake_wait_seconds": ("histogram", set()),
    "llmd_log_lines_suppressed": ("counter", {"event"}),
    "llmd_engine_up": ("gauge", ENGINE),
    "llmd_engine_restarts": ("counter", {"engine", "reason"}),
    "llmd_release_info": ("gauge", {"engine", "release"}),
    "llmd_engine_draining": ("gauge", ENGINE),
    "llmd_engine_in_flight": ("gauge", ENGINE),
    "llmd_draining": ("gauge", set()),
    "llmd_engine_kv_cache_usage_ratio": ("gauge", ENGINE),
    "llmd_engine_kv_cache_capacity_tokens": ("gauge", ENGINE),
    "llmd_engine_requests_running": ("gauge", ENGINE),
    "llmd_engine_requests_waiting": ("gauge", ENGINE),
    "llmd_queue_depth": ("gauge", {"class"}),
    "llmd_in_flight": ("gauge", {"tenant"}),
    "llmd_queued": ("gauge", {"tenant"}),
    "llmd_tenant_kv_tokens": ("gauge", {"tenant"}),
    "llmd_tenant_kv_limit_tokens": ("gauge", {"tenant"}),
    "llmd_tenant_budget_remaining_tokens": ("gauge", {"tenant", "budget"}),
    "llmd_gpu_utilization_ratio": ("gauge", {"gpu", "name"}),
    "llmd_gpu_memory_used_bytes": ("gauge", {"gpu", "name"}),
    "llmd_gpu_memory_total_bytes": ("gauge", {"gpu", "name"}),
    "llmd_gpu_temperature_celsius": ("gauge", {"gpu", "name"}),
    "llmd_gpu_power_watts": ("gauge", {"gpu", "name"}),
    "llmd_slo_guard_level": ("gauge", set()),
    "llmd_class_ttft_p95_seconds": ("gauge", {"class"}),
    "llmd_class_ttft_budget_seconds": ("gauge", {"class"}),
    "llmd_engine_breaker_open": ("gauge", set()),  # upstreams only: none here
    "llmd_deploys": ("counter", set()),  # engine, strategy, outcome once a deploy ended
    "llmd_engine_queue_time_seconds": ("histogram", ENGINE_HISTOGRAM),
    "llmd_engine_prefill_time_seconds": ("histogram", ENGINE_HISTOGRAM),
    "llmd_engine_decode_time_seconds": ("histogram", ENGINE_HISTOGRAM),
    "llmd_engine_inter_token_latency_seconds": ("histogram", ENGINE_HISTOGRAM),
    "llmd_engine_preemptions": ("counter", ENGINE),
    "llmd_engine_prefix_cache_hits": ("counter", ENGINE),
    "llmd_engine_prefix_cache_queries": ("counter", ENGINE),
}


CAPPED = Tenant("capped", max_kv_tokens=4096, tokens_per_day=10_000)


def busy_context(top_tenants: int = 20) -> DaemonState:
    """A context with a serving engine, one exit, engine and GPU readings, traffic, and a
    tenant with a KV share and a token budget."""
    engine = EngineState(phase=EnginePhase.SERVING, exits_by_reason={"oom_killed": 1}, release="r1")
    ctx = daemon_state(Config(engine=EngineConfig(model="tiny")), engine, Observer(top_tenants))
    histogram = EngineHistogram(((0.5, 2.0), (1.0, 3.0), (math.inf, 4.0)), 3.5, 4.0)
    ctx.observer.engine_samples["main"] = EngineSample(
        taken_at=0.0,
        running=3,
        waiting=1,
        kv_usage=0.4,
        num_gpu_blocks=100,
        block_size=16,
        queue_time=histogram,
        prefill_time=histogram,
        decode_time=histogram,
        inter_token_latency=histogram,
        preemptions_total=7.0,
        prefix_cache_hits_total=30.0,
        prefix_cache_queries_total=100.0,
    )
    ctx.observer.gpus = GpuReading(
        (GpuDevice(0, "NVIDIA H100", 0.9, 10 * 2**30, 80 * 2**30, 60.0, 300.0),), None
    )
    metrics = ctx.observer.metrics
    collector = StatusCollector(
        ctx.snapshot,
        lambda: {"engine_output": 4},
        metrics.tenant,
        lambda: ctx.observer.engine_samples,
    )
    metrics.registry.register(collector)
    live = Exchange("live", stream=True, tenant="acme")
    ctx.inflight.add(live)
    ctx.admission.tenants = TenantDirectory({"0" * 64: CAPPED})
    ctx.admission.budgets.configure([CAPPED], time.time())
    return ctx


def families(ctx: DaemonState) -> dict[str, tuple[str, set[str], list[object]]]:
    text = ctx.observer.metrics.exposition().decode()
    found = {}
    for family in text_string_to_metric_families(text):
        labels = {name for sample in family.samples for name in sample.labels}
        found[family.name] = (family.type, labels, family.samples)
    return found


def test_every_series_has_its_name_type_and_labels() -> None:
    """After one request of each kind, /metrics holds exactly the contracted series."""
    ctx = busy_context()
    observer = ctx.observer
    observer.finished(finished_exchange(gaps_s=(0.02, 0.03)))
    observer.finished(finished_exchange(client_gone=True, ttft_s=None))
    observer.rejected("r3", 503, "queue_timeout", started_at=0.0)
    found = families(ctx)
    assert {name: (kind, labels) for name, (kind, labels, _) in found.items()} == SERIES


def test_tenants_past_the_top_n_fold_into_other() -> None:
    """With top_tenants = 2, a third and fourth tenant are counted as `other`."""
    ctx = busy_context(top_tenants=2)
    for tenant in ("a", "b", "c", "d", "a"):
        ctx.observer.finished(finished_exchange(tenant=tenant))
    registry = ctx.observer.metrics.registry
    count = {
        tenant: registry.get_sample_value(
            "llmd_requests_total",
            {
                "tenant": tenant,
                "class": "normal",
                "status": "200",
                "model": "tiny",
                "endpoint": "chat",
                "outcome": "ok",
                "code": "",
            },
        )
        for tenant in ("a", "b", "c", "other")
    }
    assert count == {"a": 2.0, "b": 1.0, "c": None, "other": 2.0}


def test_input_length_buckets() -> None:
    """Prompt lengths map to four buckets (and `unknown` when not counted)."""
    labels = [input_length_label(n) for n in (None, 0, 512, 513, 2048, 8192, 8193)]
    assert labels == ["unknown", "le512", "le512", "le2048", "le2048", "le8192", "gt8192"]


def test_latency_lands_in_the_class_and_length_series() -> None:
    """A 3,000-token interactive request is observed under class=interactive, le8192, and
    the release its engine runs (r1)."""
    ctx = busy_context()
    ctx.observer.finished(
        finished_exchange(request_class="interactive", prompt_tokens=3000, ttft_s=0.2)
    )
    registry = ctx.observer.metrics.registry
    labels = {"tenant": "anonymous", "class": "interactive", "input_length": "le8192",
              "model": "tiny", "endpoint": "chat", "release": "r1"}  # fmt: skip
    assert registry.get_sample_value("llmd_time_to_first_token_seconds_count", labels) == 1
    ttft_sum = registry.get_sample_value("llmd_time_to_first_token_seconds_sum", labels)
    assert ttft_sum == pytest.approx(0.2)


def test_gauges_come_from_the_snapshot() -> None:
    """Engine, KV, GPU, queue and suppressed-line figures are read at scrape time."""
    ctx = busy_context()
    registry = ctx.observer.metrics.registry
    value = registry.get_sample_value
    main = {"engine": "main"}
    assert value("llmd_engine_up", main) == 1
    assert value("llmd_engine_kv_cache_usage_ratio", main) == 0.4
    assert value("llmd_engine_kv_cache_capacity_tokens", main) == 1600
    assert value("llmd_engine_requests_running", main) == 3
    assert value("llmd_engine_restarts_total", {"engine": "main", "reason": "oom_killed"}) == 1
    assert value("llmd_engine_draining", main) == 0
    assert value("llmd_queue_depth", {"class": "batch"}) == 0
    assert value("llmd_gpu_power_watts", {"gpu": "0", "name": "NVIDIA H100"}) == 300
    assert value("llmd_log_lines_suppressed_total", {"event": "engine_output"}) == 4


def test_in_flight_counts_what_is_relayed_and_queued_has_its_own_gauge() -> None:
    """A tenant with one request in the engine and one in llmd's queue: llmd_in_flight 1 (its
    help says "relayed to the engine"), llmd_queued 1; the Status agrees."""
    ctx = busy_context()  # its live exchange for 'acme' is still being validated
    tenant = ctx.admission.tenants.tenants()[0]
    relayed = Exchange("relayed", stream=True, tenant=tenant.name)
    relayed.admitted_at = time.monotonic()
    ctx.inflight.add(relayed)
    ctx.inflight.add(Exchange("queued", stream=True, tenant=tenant.name))
    ctx.admission.scheduler.submit(Entry(tenant, Priority.NORMAL, 10), time.monotonic())
    value = ctx.observer.metrics.registry.get_sample_value
    assert value("llmd_in_flight", {"tenant": tenant.name}) == 1
    assert value("llmd_queued", {"tenant": tenant.name}) == 1
    assert not value("llmd_in_flight", {"tenant": "acme"})  # validating: not relayed
    status = ctx.snapshot()
    assert (status.in_flight, status.queued) == (1, 2)


def test_each_tenants_kv_share_and_budgets_left_are_gauges() -> None:
    """llmd_tenant_kv_tokens: what its running requests hold; llmd_tenant_kv_limit_tokens: its
    share; llmd_tenant_budget_remaining_tokens: each budget's tokens left."""
    ctx = busy_context()
    value = ctx.observer.metrics.registry.get_sample_value
    scheduler = ctx.admission.scheduler
    entry = Entry(CAPPED, Priority.NORMAL, 1500, model="tiny")
    scheduler.shares.take(entry)
    ctx.admission.budgets.charge("capped", 1000, 500, time.time())
    assert value("llmd_tenant_kv_tokens", {"tenant": "capped"}) == 1500
    assert value("llmd_tenant_kv_limit_tokens", {"tenant": "capped"}) == 4096
    left = value(
        "llmd_tenant_budget_remaining_tokens", {"tenant": "capped", "budget": "tokens_per_day"}
    )
    assert left == 8500


def test_the_grafana_dashboard_uses_only_contracted_series() -> None:
    """etc/grafana-llmd.json queries only series of the contract (so a rename breaks a test)."""
    import json
    import re

    dashboard = json.loads((Path(__file__).parents[2] / "etc" / "grafana-llmd.json").read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    names = {n for e in exprs for n in re.findall(r"\bllmd_[a-z0-9_]+", e)}
    bases = {re.sub(r"_(total|bucket|sum|count)$", "", n) for n in names}
    assert bases <= set(SERIES), bases - set(SERIES)
    titles = " ".join(panel["title"] for panel in dashboard["panels"])
    for topic in (
        "first token",
        "Queue depth",
        "KV",
        "Tokens per second",
        "Rejections",
        "restarts",
        "SLO guard",
    ):
        assert topic in titles


def test_the_slo_guard_level_and_class_ttft_p95_are_gauges() -> None:
    """llmd_slo_guard_level reads the level in force (an operator's pin included) and
    llmd_class_ttft_p95_seconds each class's p95 of streamed requests over the guard's window
    (none before a request of that class)."""
    ctx = busy_context()
    value = ctx.observer.metrics.registry.get_sample_value
    assert value("llmd_slo_guard_level") == 0
    assert value("llmd_class_ttft_p95_seconds", {"class": "interactive"}) is None
    ctx.observer.finished(finished_exchange(request_class="interactive", ttft_s=0.25))
    whole = finished_exchange(request_class="interactive", ttft_s=9.0, total_s=9.5)
    whole.stream = False  # its first byte is its last token: not a TTFT the guard counts
    ctx.observer.finished(whole)
    p95 = value("llmd_class_ttft_p95_seconds", {"class": "interactive"})
    assert p95 is not None and 0.24 <= p95 <= 0.27
    ctx.admission.guard.override("level 3")
    assert value("llmd_slo_guard_level") == 3


def test_latency_histograms_take_the_tenant_within_the_top_n() -> None:
    """With top_tenants = 2, the TTFT histogram has series for the first two tenants and
    `other`, never for a third name: the tenant slice stays bounded."""
    ctx = busy_context(top_tenants=2)
    for tenant in ("a", "b", "c", "d"):
        ctx.observer.finished(finished_exchange(tenant=tenant))
    _, _, samples = families(ctx)["llmd_time_to_first_token_seconds"]
    tenants = {sample.labels["tenant"] for sample in samples}  # type: ignore[attr-defined]
    assert tenants == {"a", "b", "other"}


def test_the_engines_side_of_latency_is_passed_through_by_engine() -> None:
    """The engine's own prefill histogram (its buckets, sum and count) and its preemption and
    prefix-cache counters appear under llmd_engine_*{engine="main"}."""
    ctx = busy_context()
    value = ctx.observer.metrics.registry.get_sample_value
    main = {"engine": "main"}
    assert value("llmd_engine_prefill_time_seconds_bucket", {**main, "le": "0.5"}) == 2.0
    assert value("llmd_engine_prefill_time_seconds_bucket", {**main, "le": "+Inf"}) == 4.0
    assert value("llmd_engine_prefill_time_seconds_count", main) == 4.0
    assert value("llmd_engine_decode_time_seconds_sum", main) == 3.5
    assert value("llmd_engine_preemptions_total", main) == 7.0
    assert value("llmd_engine_prefix_cache_hits_total", main) == 30.0
    assert value("llmd_engine_prefix_cache_queries_total", main) == 100.0


def test_an_upstreams_open_breaker_and_the_ttft_budgets_are_gauges() -> None:
    """llmd_engine_breaker_open is 1 for an upstream whose breaker is open, 0 for a closed
    one, absent for an engine; each class with a budget has llmd_class_ttft_budget_seconds."""
    ctx = busy_context()
    status = ctx.snapshot()
    engine = status.engines[0]
    upstreams = (
        dataclasses.replace(engine, name="lab", kind="upstream", breaker="open"),
        dataclasses.replace(engine, name="far", kind="upstream", breaker="closed"),
    )
    status = dataclasses.replace(status, engines=(engine, *upstreams))
    registry = CollectorRegistry()
    registry.register(StatusCollector(lambda: status, dict, ctx.observer.metrics.tenant))
    value = registry.get_sample_value
    assert value("llmd_engine_breaker_open", {"engine": "lab"}) == 1.0
    assert value("llmd_engine_breaker_open", {"engine": "far"}) == 0.0
    assert value("llmd_engine_breaker_open", {"engine": "main"}) is None
    assert status.guard is not None
    budgets = {row.name: row.budget_s for row in status.guard.classes if row.budget_s}
    for name, budget in budgets.items():
        assert value("llmd_class_ttft_budget_seconds", {"class": name}) == budget
    assert budgets


def test_an_ended_deploy_is_counted_by_engine_strategy_and_outcome() -> None:
    """llmd_deploys_total{engine, strategy, outcome} counts each deploy once it ended."""
    observer = Observer()
    observer.deploy_ended("main", "canary", "rolled_back")
    labels = {"engine": "main", "strategy": "canary", "outcome": "rolled_back"}
    assert observer.metrics.registry.get_sample_value("llmd_deploys_total", labels) == 1.0
