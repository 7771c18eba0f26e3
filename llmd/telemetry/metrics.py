"""llmd's request-path Prometheus series: counters and histograms updated as requests end.
One `CollectorRegistry` per instance (never the global one); the gauges read from the Status
snapshot at scrape time are `llmd.telemetry.status_metrics`'s.

Names and labels are a contract (shared/DESIGN.md; pinned by tests/telemetry/test_metrics.py):
prefix `llmd_`, base units (seconds, bytes, ratios 0..1), bounded label sets. Tenant labels past
the first `top_tenants` distinct tenants read `other`; prompt lengths are four buckets; `model`
is a model some backend serves ("" when the request never named one llmd serves), `engine`
a configured backend's name, and `endpoint` an entry's name in the endpoint table
(llmd/endpoints/table.py: chat, embeddings, rerank, ...; `OTHER_ENDPOINT` for a request refused
before llmd knew its endpoint). The callers give the table's names; this layer lies below the
table, so it takes them as they come.
"""

from __future__ import annotations

import enum
from typing import TypeVar

from prometheus_client import CollectorRegistry, generate_latest

from llmd.admission.classes import Priority
from llmd.telemetry.gaps import GAP_BUCKETS
from llmd.telemetry.series import CounterSeries, HistogramSeries


class RequestPhase(enum.StrEnum):
    """Where a request is: queued in llmd, prefill (in the engine, no output yet) or decode.
    The `phase` label of the cancellations (where the client left)."""

    QUEUED = "queued"
    PREFILL = "prefill"
    DECODE = "decode"


_Series = TypeVar("_Series", CounterSeries, HistogramSeries)

CLASSES = tuple(cls.label for cls in Priority)
CANCEL_PHASES = tuple(phase.value for phase in RequestPhase)
OTHER_TENANT = "other"
# The `endpoint` of a request refused before routing at a path no entry of the table has (the
# listener's connection limit answers any path).
OTHER_ENDPOINT = "other"
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
    """The series llmd updates per request, in their own registry (the status collector,
    `llmd.telemetry.status_metrics`, adds the gauges read from the Status snapshot). Each is
    a lock-free series (llmd/telemetry/series.py): update with `inc(labels)` or
    `observe(labels, value)`, the label values in the order of its label names."""

    def __init__(self, top_tenants: int) -> None:
        self.registry = CollectorRegistry()
        self.tenant = TenantLabels(top_tenants)
        self.requests = self._add(CounterSeries(
            "llmd_requests",
            "Ended requests by tenant, class, HTTP status, model, endpoint, outcome (ok, "
            "rejected, cancelled, aborted, error) and code (the error code of a rejected, "
            "aborted or failed request; empty otherwise).",
            # `endpoint` multiplies the series by at most the table's dozen names, and less in
            # practice: a model's engines serve either the generate endpoints or the pooling
            # ones, and a request to the others is one code (`unsupported_endpoint`).
            ["tenant", "class", "status", "model", "endpoint", "outcome", "code"],
        ))  # fmt: skip
        self.backend_requests = self._add(CounterSeries(
            "llmd_backend_requests",
            "Requests sent to each backend, by outcome: answered, failed (the client got the "
            "error) or retried (failed before the first byte, sent once more elsewhere); "
            "release: the release the backend ran (empty: none recorded).",
            ["engine", "model", "outcome", "release"],
        ))  # fmt: skip
        self.queue_wait = self._add(
            _latency("llmd_queue_wait_seconds", "Time queued before release.")
        )
        self.ttft = self._add(_latency(
            "llmd_time_to_first_token_seconds",
            "Arrival to the first response byte, streamed requests answered 200 only.",
        ))  # fmt: skip
        self.e2e = self._add(_latency(
            "llmd_e2e_request_latency_seconds", "Arrival to the last byte, completed requests."
        ))  # fmt: skip
        # Client-side inter-token latency of streams answered 200, by class and model: every
        # gap of the streamed requests that ended (llmd/telemetry/gaps.py). Bounded: three
        # classes by the models llmd serves (`model` as the request series give it).
        self.gaps = self._add(HistogramSeries(
            "llmd_inter_token_latency_seconds",
            "Gaps between the chunks of a streamed answer as llmd relays them to the client.",
            ["class", "model"], GAP_BUCKETS,
        ))  # fmt: skip
        # By endpoint: an embeddings burst is read in prompt tokens (it generates none);
        # tenants x the table's names stays a few hundred series at most.
        self.prompt_tokens = self._add(CounterSeries(
            "llmd_prompt_tokens", "Prompt tokens of relayed requests.", ["tenant", "endpoint"]
        ))  # fmt: skip
        # Not by endpoint: only chat and completions generate.
        self.generation_tokens = self._add(
            CounterSeries("llmd_generation_tokens", "Output tokens sent to clients.", ["tenant"])
        )
        self.rejections = self._add(CounterSeries(
            "llmd_rejections",
            "Requests refused for their own sake: before reaching a backend, or by a backend's "
            "4xx for the client's input.",
            # Not by endpoint: llmd_requests_total{outcome="rejected"} has it with the code.
            ["reason"],
        ))  # fmt: skip
        self.cancellations = self._add(CounterSeries(
            "llmd_cancellations", "Requests whose client left, by phase.", ["phase"]
        ))  # fmt: skip
        for phase in CANCEL_PHASES:
            self.cancellations.declare((phase,))
        self.timeouts = self._add(CounterSeries(
            "llmd_timeouts", "Requests ended by a queue timeout or deadline.", ["class"]
        ))  # fmt: skip
        # Bounded: engines x two strategies x three outcomes.
        self.deploys = self._add(CounterSeries(
            "llmd_deploys",
            "Ended deploys by engine, strategy (replace, canary) and outcome (promoted, "
            "rolled_back, failed).",
            ["engine", "strategy", "outcome"],
        ))  # fmt: skip

        # On-demand engines (llmd/daemon/swapping.py): bounded by the configured engines.
        self.wakes = self._add(CounterSeries(
            "llmd_engine_wakes", "Wakes of on-demand engines, by engine and mechanism "
            "(level1, level2: vLLM's sleep mode; stop: a boot).",
            ["engine", "mechanism"],
        ))  # fmt: skip
        self.wake_seconds = self._add(HistogramSeries(
            "llmd_engine_wake_seconds",
            "From the decision to wake an engine to its first token.",
            ["engine"], LATENCY_BUCKETS,
        ))  # fmt: skip
        self.wake_waits = self._add(HistogramSeries(
            "llmd_wake_wait_seconds",
            "Time queued of the requests that came while their model's engines slept.",
            ["model"], LATENCY_BUCKETS,
        ))  # fmt: skip
        self.evictions = self._add(CounterSeries(
            "llmd_engine_evictions", "On-demand engines put to sleep, by engine and reason "
            "(evicted: to make room for another; idle: its idle_sleep_s passed).",
            ["engine", "reason"],
        ))  # fmt: skip

    def _add(self, series: _Series) -> _Series:
        self.registry.register(series)
        return series

    def exposition(self) -> bytes:
        """The Prometheus text format of every llmd series."""
        return generate_latest(self.registry)


def _latency(name: str, documentation: str) -> HistogramSeries:
    # By endpoint: an embeddings request ends in milliseconds and a tokenize llmd answers itself
    # in microseconds, so mixed with chat under one model they would hide its latency. Bounded:
    # only requests relayed or answered are observed (a refusal is not), so a model has series
    # only for the endpoints its engines serve (generate: chat, completions, the two audio ones
    # and the two tokenizer ones; pooling: the six pooling ones and the tokenizer ones), and
    # TTFT only for those that stream (chat, completions, audio).
    # By tenant: the first `top_tenants` (20) and `other`, as the counters (TenantLabels). A
    # tenant's requests come in the classes it may use and the endpoints its app calls, so a
    # series set exists per combination seen, not per product: the worst case is
    # (top_tenants + 1) x 3 classes x 5 lengths x endpoints x models x releases (2 during a
    # canary) label sets of 28 series each; lower `telemetry.top_tenants` to shrink it.
    return HistogramSeries(
        name,
        documentation,
        ["tenant", "class", "input_length", "model", "endpoint", "release"],
        LATENCY_BUCKETS,
    )
