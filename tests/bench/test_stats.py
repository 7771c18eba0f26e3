"""Percentiles, step figures, the stability verdict, the operating point and the ratios."""

from __future__ import annotations

import dataclasses
import random

import pytest

from llmd.bench.client import RequestResult
from llmd.bench.sampler import GaugeSample
from llmd.bench.stats import (
    StepSummary,
    indexing_summary,
    operating_point,
    prefix_hit_rate,
    ratios,
    stability,
    summarize,
)
from llmd.telemetry.windows import percentile


def result(index: int, start: float, ttft: float | None, **fields: object) -> RequestResult:
    """A finished request of 5 output tokens (unless `fields` say otherwise)."""
    e2e = None if ttft is None else ttft + 0.1
    base = RequestResult(index, "short", 10, 5, start, ttft=ttft, e2e=e2e, output_tokens=5)
    return dataclasses.replace(base, **fields)  # type: ignore[arg-type]


def test_percentile_interpolates_like_numpy_linear() -> None:
    """Linear interpolation between closest ranks, as numpy.percentile's default."""
    values = [1.0, 2.0, 3.0, 4.0]
    assert percentile(values, 50) == 2.5
    assert percentile(values, 0) == 1.0 and percentile(values, 100) == 4.0
    assert percentile(values, 95) == pytest.approx(3.85)
    assert percentile([7.0], 99) == 7.0
    assert percentile([], 50) is None


def test_percentiles_are_ordered() -> None:
    """p50 <= p95 <= p99 on any sample."""
    rng = random.Random(3)
    for _ in range(100):
        values = [rng.expovariate(1) for _ in range(rng.randint(1, 50))]
        p50, p95, p99 = (percentile(values, q) for q in (50, 95, 99))
        assert p50 is not None and p95 is not None and p99 is not None
        assert p50 <= p95 <= p99


def test_summary_counts_tokens_outcomes_and_peaks() -> None:
    """Output tokens add up over finished and disconnected requests; errors are counted by kind;
    gauge peaks are the maxima of the samples."""
    results = [
        result(0, 0.0, 0.05),
        result(1, 0.1, 0.06),
        result(2, 0.2, 0.07, outcome="disconnected", output_tokens=2),
        result(3, 0.3, None, outcome="error", error_kind="429 queue_full", e2e=None),
        result(4, 0.4, None, outcome="timeout", error_kind="timeout", e2e=None, output_tokens=0),
    ]
    samples = [GaugeSample(0.0, 0.1, 0, 2), GaugeSample(0.5, 0.4, 3, 1), GaugeSample(1, None, 1, 0)]
    summary = summarize("llmd", 4, results, 2.0, samples, client_cpu_s=0.2)
    assert (summary.ok, summary.disconnected, summary.errors, summary.timeouts) == (2, 1, 1, 1)
    assert summary.errors_by_kind == {"429 queue_full": 1, "timeout": 1}
    assert summary.output_tokens == 5 + 5 + 2
    assert summary.output_tokens_per_s == 6.0 and summary.requests_per_s == 1.0
    assert summary.output_mismatches == 0 and summary.prompt_mismatches == 0
    assert (summary.peak_kv_usage, summary.peak_waiting, summary.peak_running) == (0.4, 3, 2)
    assert summary.client_cpu_share == 0.1
    assert summary.ttft_ms["p50"] == 60.0  # ok and disconnected requests both have a TTFT
    assert summary.verdict == "unstable"


def test_summary_without_gauges_has_no_peaks() -> None:
    """No /metrics samples: peaks are None, not zero."""
    summary = summarize("target", 1, [result(0, 0.0, 0.01)], 1.0, [], 0.0)
    assert summary.peak_kv_usage is None and summary.peak_waiting is None


def test_stability_flags_errors_and_rising_ttft() -> None:
    """Over 1% failures is unstable; TTFT rising over 2x from first to last third is degrading;
    flat TTFT is stable; no requests is idle."""
    flat = [result(i, i * 0.1, 0.2) for i in range(30)]
    assert stability(flat, 3.0).state == "stable"
    rising = [result(i, i * 0.1, 0.05 + i * 0.05) for i in range(30)]
    assert stability(rising, 3.0).state == "degrading"
    tiny_rise = [result(i, i * 0.1, 0.001 + i * 0.001) for i in range(30)]
    assert stability(tiny_rise, 3.0).state == "stable"  # under the 100 ms floor: noise
    failing = [*flat, result(30, 2.9, None, outcome="error", error_kind="500 x")]
    assert stability(failing, 3.0).state == "unstable"
    assert stability([], 1.0).state == "idle"


def step(
    concurrency: int, tokens_per_s: float, ttft_p95: float, verdict: str = "stable"
) -> StepSummary:
    """A step summary with the given throughput, TTFT p95 and verdict."""
    summary = summarize("llmd", concurrency, [result(0, 0.0, 0.01)], 1.0, [], 0.0)
    return dataclasses.replace(
        summary,
        output_tokens_per_s=tokens_per_s,
        ttft_ms={"p50": ttft_p95 / 2, "p95": ttft_p95, "p99": ttft_p95 * 2},
        verdict=verdict,
    )


def test_operating_point_is_the_best_throughput_within_the_slo() -> None:
    """The highest tokens/s whose TTFT p95 is within the SLO wins, even if a later step has
    more throughput over the SLO; unstable steps never qualify."""
    steps = [
        step(1, 100, 50),
        step(2, 180, 80),
        step(4, 300, 400, verdict="unstable"),
        step(8, 320, 900),
        step(16, 330, 2000),
    ]
    point = operating_point(steps, slo_ttft_p95_ms=1000)
    assert (point.concurrency, point.output_tokens_per_s, point.ttft_p95_ms) == (8, 320, 900)
    assert "16" in point.reason
    assert operating_point(steps, slo_ttft_p95_ms=100).concurrency == 2


def test_operating_point_none_when_nothing_fits() -> None:
    """When every step breaks the SLO there is no operating point, and the reason says so."""
    point = operating_point([step(1, 100, 5000)], slo_ttft_p95_ms=1000)
    assert point.concurrency is None and "SLO" in point.reason


def test_ratios_pair_steps_by_concurrency() -> None:
    """Ratios are llmd / direct per concurrency present in both sweeps."""
    direct = [step(1, 100, 50), step(2, 200, 60)]
    proxied = [dataclasses.replace(step(1, 90, 55), target="llmd"), step(4, 10, 10)]
    rows = ratios(direct, proxied)
    assert len(rows) == 1 and rows[0]["concurrency"] == 1
    assert rows[0]["output_tokens_per_s"] == 0.9
    assert rows[0]["ttft_p95"] == 1.1


def test_prompt_counts_that_differ_from_the_plan_are_counted() -> None:
    """A finished request whose engine-counted prompt differs from the planned length (another
    tokenizer than the engine's) is a prompt mismatch; one without usage is not."""
    results = [
        result(0, 0.0, 0.01, prompt_tokens=10),
        result(1, 0.1, 0.01, prompt_tokens=12),
        result(2, 0.2, 0.01),
    ]
    summary = summarize("direct", 1, results, 1.0, [], 0.0)
    assert summary.prompt_mismatches == 1
    assert (summary.prompt_tokens, summary.planned_prompt_tokens) == (22, 30)


def test_prefix_hit_rate_is_hits_over_queries_across_the_step() -> None:
    """Counters are cumulative: the rate is their growth from the first to the last reading;
    without two readings, or without lookups, there is none."""
    samples = [
        GaugeSample(0.0, None, None, None, prefix_queries=1000.0, prefix_hits=100.0),
        GaugeSample(0.5, None, None, None),
        GaugeSample(1.0, None, None, None, prefix_queries=3000.0, prefix_hits=1700.0),
    ]
    assert prefix_hit_rate(samples) == 0.8
    assert prefix_hit_rate(samples[:1]) is None
    assert prefix_hit_rate([samples[0], samples[0]]) is None


def embedded(index: int, start: float, e2e: float | None, **fields: object) -> RequestResult:
    """An embeddings request of 8 documents (40 prompt tokens) answered after `e2e` s."""
    base = RequestResult(index, "embed", 40, 0, start, e2e=e2e, prompt_tokens=40, documents=8)
    return dataclasses.replace(base, **fields)  # type: ignore[arg-type]


def test_indexing_figures_and_the_chat_ttft_before_and_during() -> None:
    """H's embeddings from 1.0 s: their rates over their span (its start to the last answer),
    failures by kind, and the chat's TTFT p95 of the requests sent before and during it with
    their ratio; the ratios llmd / direct gain both figures."""
    chat = [result(i, 0.1 * i, 0.05 if i < 10 else 0.1) for i in range(20)]
    embeds = [
        embedded(0, 1.0, 0.5),
        embedded(1, 1.0, 1.0),
        embedded(2, 1.5, 0.5),
        embedded(3, 1.6, None, outcome="error", error_kind="503 queue_timeout"),
    ]
    figures = indexing_summary(chat, embeds, started_s=1.0)
    assert (figures.requests, figures.ok, figures.errors) == (4, 3, 1)
    assert figures.errors_by_kind == {"503 queue_timeout": 1}
    assert (figures.documents, figures.prompt_tokens) == (24, 120)
    assert (figures.requests_per_s, figures.documents_per_s) == (3.0, 24.0)  # over 1.0-2.0 s
    assert figures.e2e_ms["p50"] == 500.0
    assert figures.chat_ttft_before_ms["p95"] == pytest.approx(50.0)
    assert figures.chat_ttft_during_ms["p95"] == pytest.approx(100.0)
    assert figures.ttft_p95_during_over_before == 2.0
    summary = summarize("direct", 2, chat, 2.0, [], 0.0, figures)
    (row,) = ratios([summary], [dataclasses.replace(summary, target="llmd")])
    assert (row["ttft_p95_indexing"], row["embed_requests_per_s"]) == (1.0, 1.0)
