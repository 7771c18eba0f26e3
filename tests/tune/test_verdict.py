"""Verdicts in the seeds' words, and the recommendation: the most tokens/s within the SLO."""

from __future__ import annotations

import dataclasses

from llmd.bench.stats import summarize
from llmd.tune.settings import Setting
from llmd.tune.verdict import Candidate, recommend, verdict

BASE = summarize("target", 8, [], 1.0, [], 0.0)


def _summary(**fields: object) -> object:
    return dataclasses.replace(BASE, **fields)  # type: ignore[arg-type]


def test_failures_over_one_percent_are_timeouts() -> None:
    """2 of 100 requests timed out: 'timeouts', with the kinds."""
    summary = _summary(requests=100, timeouts=2, errors_by_kind={"timeout": 2})
    assert verdict(summary, None).word == "timeouts"  # type: ignore[arg-type]
    assert "timeout 2" in verdict(summary, None).reason  # type: ignore[arg-type]


def test_a_kv_cache_or_gpu_at_its_limit_is_near_full() -> None:
    """Peak KV 90% and up, or GPU memory 95% and up; below both and without errors: stable."""
    assert verdict(_summary(requests=10, peak_kv_usage=0.93), None).word == "near full"  # type: ignore[arg-type]
    assert verdict(_summary(requests=10, peak_kv_usage=0.5), 0.97).word == "near full"  # type: ignore[arg-type]
    assert verdict(_summary(requests=10, peak_kv_usage=0.5), 0.5).word == "stable"  # type: ignore[arg-type]


def test_the_recommendation_is_the_best_throughput_within_the_slo() -> None:
    """16 has the most tokens/s but misses the SLO; 32 failed; 8 is chosen, and the reason
    says where the SLO stopped holding."""
    candidates = [
        Candidate(Setting(4), 900.0, 120.0, "stable"),
        Candidate(Setting(8), 1500.0, 300.0, "near full"),
        Candidate(Setting(16), 1900.0, 700.0, "near full"),
        Candidate(Setting(32), 2000.0, 350.0, "timeouts"),
    ]
    chosen = recommend(candidates, 500.0)
    assert chosen.setting == Setting(8)
    assert "from --max-num-seqs 16 TTFT p95 is over the SLO" in chosen.reason
    nothing = recommend(candidates, 50.0)
    assert nothing.setting is None and "within 50 ms" in nothing.reason


def test_ties_go_to_fewer_sequences() -> None:
    """The same tokens/s from 8 and 16 sequences: 8."""
    candidates = [
        Candidate(Setting(16, True), 1000.0, 100.0, "stable"),
        Candidate(Setting(8, False), 1000.0, 100.0, "stable"),
    ]
    assert recommend(candidates, 500.0).setting == Setting(8, False)
