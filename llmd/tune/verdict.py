"""Each step's verdict in the seeds' words (stable, near full, timeouts) and the recommendation.
Pure functions over the steps' figures."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from llmd.bench.stats import MAX_ERROR_SHARE, StepSummary
from llmd.tune.settings import Setting

# Peak KV-cache usage from which a step is "near full": the admission gate's default
# kv_high_watermark (0.9), past which vLLM soon preempts.
NEAR_FULL_KV = 0.9
# Peak GPU memory, as a share of the card, from which a step is "near full".
NEAR_FULL_GPU = 0.95


@dataclasses.dataclass(frozen=True)
class Verdict:
    """`word`: stable | near full | timeouts; `reason` in a few words."""

    word: str
    reason: str


def verdict(summary: StepSummary, gpu_share: float | None) -> Verdict:
    """timeouts: errors and timeouts over the bench's 1% (or the bench found it unstable);
    near full: peak KV usage >= 90% or GPU memory >= 95%; else stable (with the bench's note
    when TTFT kept climbing through the step)."""
    failed = summary.errors + summary.timeouts
    if summary.requests and (
        failed / summary.requests > MAX_ERROR_SHARE or summary.verdict == "unstable"
    ):
        kinds = ", ".join(f"{kind} {n}" for kind, n in summary.errors_by_kind.items())
        return Verdict("timeouts", f"{failed} of {summary.requests} failed ({kinds})")
    kv = summary.peak_kv_usage
    if kv is not None and kv >= NEAR_FULL_KV:
        return Verdict("near full", f"peak KV cache {kv:.0%}")
    if gpu_share is not None and gpu_share >= NEAR_FULL_GPU:
        return Verdict("near full", f"peak GPU memory {gpu_share:.0%}")
    if summary.verdict == "degrading":
        return Verdict("stable", summary.verdict_reason)
    return Verdict("stable", "no errors" + (f", peak KV {kv:.0%}" if kv is not None else ""))


@dataclasses.dataclass(frozen=True)
class Candidate:
    """What the recommendation weighs of one step."""

    setting: Setting
    output_tokens_per_s: float
    ttft_p95_ms: float | None
    verdict: str


@dataclasses.dataclass(frozen=True)
class Recommendation:
    """The chosen setting (None when no step qualified) and why."""

    setting: Setting | None
    reason: str


def recommend(candidates: Sequence[Candidate], slo: float) -> Recommendation:
    """The step with the most output tokens/s among those without timeouts whose TTFT p95 is
    within the SLO: the seeds' sweet spot, where memory is nearly full and latency still
    acceptable. `slo` is the TTFT p95 bound in ms. Ties go to the smaller --max-num-seqs."""
    fitting = [
        c
        for c in candidates
        if c.verdict != "timeouts" and c.ttft_p95_ms is not None and c.ttft_p95_ms <= slo
    ]
    if not fitting:
        return Recommendation(None, f"no setting kept TTFT p95 within {slo:g} ms without timeouts")
    best = max(fitting, key=lambda c: (c.output_tokens_per_s, -c.setting.max_num_seqs))
    over = sorted(
        c.setting.max_num_seqs
        for c in candidates
        if c not in fitting and c.setting.max_num_seqs > best.setting.max_num_seqs
    )
    reason = (
        f"the most output tokens/s ({best.output_tokens_per_s:,.0f}) with TTFT p95 "
        f"{best.ttft_p95_ms:,.0f} ms within {slo:g} ms"
    )
    if over:
        reason += f"; from --max-num-seqs {over[0]} TTFT p95 is over the SLO or requests fail"
    return Recommendation(best.setting, reason)
