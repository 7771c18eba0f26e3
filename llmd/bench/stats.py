"""The figures of a step, its stability verdict, the operating point and direct/llmd ratios.

Pure functions over request results and gauge samples: no clock, no network.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections import Counter
from collections.abc import Sequence

from llmd.bench.client import RequestResult
from llmd.bench.leavers import HangupSummary
from llmd.bench.percentiles import ms_percentiles
from llmd.bench.quota import QuotaSummary
from llmd.bench.sampler import GaugeSample

# A step whose errors and timeouts exceed this share of its requests is unstable.
MAX_ERROR_SHARE = 0.01
# A step is degrading when the median TTFT of the requests started in its last third exceeds
# this multiple of the first third's, and is above TREND_FLOOR_S (noise below that is not a queue).
TREND_FACTOR = 2.0
TREND_FLOOR_S = 0.1
TREND_MIN_REQUESTS = 5


@dataclasses.dataclass(frozen=True)
class Verdict:
    """`state`: stable | degrading | unstable | idle; `reason` in a few words."""

    state: str
    reason: str


def stability(results: Sequence[RequestResult], wall_s: float) -> Verdict:
    """Whether the step held: few errors, and TTFT not climbing from its first to its last third
    (a queue that grows for as long as the load lasts)."""
    if not results:
        return Verdict("idle", "no requests")
    failed = sum(r.outcome in ("error", "timeout") for r in results)
    if failed / len(results) > MAX_ERROR_SHARE:
        return Verdict("unstable", f"errors+timeouts {100 * failed / len(results):.1f}%")
    third = wall_s / 3
    first = [r.ttft for r in results if r.ttft is not None and r.start < third]
    last = [r.ttft for r in results if r.ttft is not None and r.start >= 2 * third]
    if len(first) >= TREND_MIN_REQUESTS and len(last) >= TREND_MIN_REQUESTS:
        before, after = statistics.median(first), statistics.median(last)
        if after > TREND_FLOOR_S and after > TREND_FACTOR * before:
            return Verdict("degrading", f"TTFT p50 x{after / before:.1f} from first to last third")
    return Verdict("stable", "no errors, TTFT flat" if not failed else f"{failed} errors")


@dataclasses.dataclass(frozen=True)
class IndexingSummary:
    """The embeddings sent beside the chat in a step of H, and what they did to it: from
    `started_s` (s from the step's start) its requests (ok, failed by kind), the documents and
    prompt tokens embedded, requests and documents per second over its span (its start to
    the last answer), their end-to-end latency (ms), and the chat's TTFT (ms) of the requests
    sent before it (`chat_ttft_before_ms`) and during it (`chat_ttft_during_ms`), with
    `ttft_p95_during_over_before`: about 1 when the chat's TTFT held."""

    started_s: float
    requests: int
    ok: int
    errors: int
    errors_by_kind: dict[str, int]
    documents: int
    prompt_tokens: int
    requests_per_s: float
    documents_per_s: float
    e2e_ms: dict[str, float | None]
    chat_ttft_before_ms: dict[str, float | None]
    chat_ttft_during_ms: dict[str, float | None]
    ttft_p95_during_over_before: float | None


def indexing_summary(
    chat: Sequence[RequestResult], embeds: Sequence[RequestResult], started_s: float
) -> IndexingSummary:
    """The figures of H's embeddings `embeds`, begun at `started_s` (the results' clock),
    beside the step's `chat` results."""
    ok = [r for r in embeds if r.outcome == "ok"]
    failed = [r for r in embeds if r.outcome != "ok"]
    ends = [r.start + (r.e2e or 0.0) for r in embeds]
    span = max(max(ends, default=started_s) - started_s, 1e-9)
    documents = sum(r.documents for r in ok)
    ttfts = [(r.start, r.ttft) for r in chat if r.ttft is not None and r.outcome == "ok"]
    before = ms_percentiles([ttft for start, ttft in ttfts if start < started_s])
    during = ms_percentiles([ttft for start, ttft in ttfts if start >= started_s])
    p95_before, p95_during = before["p95"], during["p95"]
    return IndexingSummary(
        started_s=round(started_s, 3),
        requests=len(embeds),
        ok=len(ok),
        errors=len(failed),
        errors_by_kind=dict(Counter(str(r.error_kind) for r in failed).most_common()),
        documents=documents,
        prompt_tokens=sum(r.prompt_tokens or 0 for r in ok),
        requests_per_s=round(len(ok) / span, 3),
        documents_per_s=round(documents / span, 2),
        e2e_ms=ms_percentiles([r.e2e for r in ok if r.e2e is not None]),
        chat_ttft_before_ms=before,
        chat_ttft_during_ms=during,
        ttft_p95_during_over_before=(
            round(p95_during / p95_before, 3) if p95_during is not None and p95_before else None
        ),
    )


@dataclasses.dataclass(frozen=True)
class StepSummary:
    """All figures of one step against one target. Times in ms, rates per second, tokens are the
    engine's counts (usage) where the stream finished, else streamed chunks. `chunks` counts SSE
    events with a choice (vLLM sends one per token; the zero-latency simulator may batch).
    Every figure but `indexing` (H's embeddings, apart) is the chat's."""

    target: str
    concurrency: int
    wall_s: float
    requests: int
    ok: int
    disconnected: int
    errors: int
    timeouts: int
    errors_by_kind: dict[str, int]
    ttft_ms: dict[str, float | None]
    e2e_ms: dict[str, float | None]
    prompt_tokens: int
    planned_prompt_tokens: int
    prompt_mismatches: int
    output_tokens: int
    planned_output_tokens: int
    output_mismatches: int
    chunks: int
    output_tokens_per_s: float
    requests_per_s: float
    peak_kv_usage: float | None
    peak_waiting: float | None
    peak_running: float | None
    peak_llmd_queue: float | None
    prefix_cache_hit_rate: float | None
    gauge_samples: int
    client_cpu_s: float
    client_cpu_share: float
    client_cpu_us_per_token: float | None
    client_cpu_us_per_chunk: float | None
    verdict: str
    verdict_reason: str
    indexing: IndexingSummary | None = None
    hangup: HangupSummary | None = None  # I
    quota: QuotaSummary | None = None  # J


def _peak(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return max(present) if present else None


def prefix_hit_rate(samples: Sequence[GaugeSample]) -> float | None:
    """Prompt tokens served from the engine's prefix cache over prompt tokens it looked up,
    between the first and the last sample that read both counters; None without lookups."""
    read = [s for s in samples if s.prefix_queries is not None and s.prefix_hits is not None]
    if len(read) < 2:
        return None
    queries = (read[-1].prefix_queries or 0.0) - (read[0].prefix_queries or 0.0)
    hits = (read[-1].prefix_hits or 0.0) - (read[0].prefix_hits or 0.0)
    return round(hits / queries, 4) if queries > 0 else None


def summarize(
    target: str,
    concurrency: int,
    results: Sequence[RequestResult],
    wall_s: float,
    samples: Sequence[GaugeSample],
    client_cpu_s: float,
    indexing: IndexingSummary | None = None,
    hangup: HangupSummary | None = None,
    quota: QuotaSummary | None = None,
) -> StepSummary:
    """The figures of one step: `results` of every request sent, the step's wall time (first send
    to last answer), the gauge samples taken meanwhile and the bench process's CPU seconds;
    `indexing`: H's embeddings beside them; `hangup`: I's; `quota`: J's pusher."""
    ok = [r for r in results if r.outcome == "ok"]
    disconnected = [r for r in results if r.outcome == "disconnected"]
    failed = [r for r in results if r.outcome in ("error", "timeout")]
    output_tokens = sum(r.output_tokens for r in ok + disconnected)
    chunks = sum(r.chunks for r in results)
    verdict = stability(results, wall_s)
    wall = max(wall_s, 1e-9)
    return StepSummary(
        target=target,
        concurrency=concurrency,
        wall_s=round(wall_s, 3),
        requests=len(results),
        ok=len(ok),
        disconnected=len(disconnected),
        errors=sum(r.outcome == "error" for r in results),
        timeouts=sum(r.outcome == "timeout" for r in results),
        errors_by_kind=dict(Counter(str(r.error_kind) for r in failed).most_common()),
        ttft_ms=ms_percentiles([r.ttft for r in ok + disconnected if r.ttft is not None]),
        e2e_ms=ms_percentiles([r.e2e for r in ok if r.e2e is not None]),
        prompt_tokens=sum(r.prompt_tokens or 0 for r in ok),
        planned_prompt_tokens=sum(r.planned_prompt for r in ok),
        prompt_mismatches=sum(
            r.prompt_tokens is not None and r.prompt_tokens != r.planned_prompt for r in ok
        ),
        output_tokens=output_tokens,
        planned_output_tokens=sum(r.planned_output for r in ok),
        output_mismatches=sum(r.output_tokens != r.planned_output for r in ok),
        chunks=chunks,
        output_tokens_per_s=round(output_tokens / wall, 2),
        requests_per_s=round(len(ok) / wall, 3),
        peak_kv_usage=_peak([s.kv_usage for s in samples]),
        peak_waiting=_peak([s.waiting for s in samples]),
        peak_running=_peak([s.running for s in samples]),
        peak_llmd_queue=_peak([s.queued for s in samples]),
        prefix_cache_hit_rate=prefix_hit_rate(samples),
        gauge_samples=len(samples),
        client_cpu_s=round(client_cpu_s, 3),
        client_cpu_share=round(client_cpu_s / wall, 3),
        client_cpu_us_per_token=(
            round(client_cpu_s / output_tokens * 1e6, 1) if output_tokens else None
        ),
        client_cpu_us_per_chunk=round(client_cpu_s / chunks * 1e6, 1) if chunks else None,
        verdict=verdict.state,
        verdict_reason=verdict.reason,
        indexing=indexing,
        hangup=hangup,
        quota=quota,
    )


@dataclasses.dataclass(frozen=True)
class OperatingPoint:
    """The step with the highest output tokens/s whose TTFT p95 is within the SLO (and which is
    not unstable). `concurrency` None when no step qualifies; `reason` says why."""

    target: str
    slo_ttft_p95_ms: float
    concurrency: int | None
    output_tokens_per_s: float | None
    requests_per_s: float | None
    ttft_p95_ms: float | None
    reason: str


def operating_point(steps: Sequence[StepSummary], slo_ttft_p95_ms: float) -> OperatingPoint:
    """The operating point of one target's sweep `steps` under `slo_ttft_p95_ms`."""
    target = steps[0].target if steps else "-"
    fitting = [
        s
        for s in steps
        if s.verdict != "unstable"
        and s.ttft_ms["p95"] is not None
        and s.ttft_ms["p95"] <= slo_ttft_p95_ms
    ]
    if not fitting:
        return OperatingPoint(
            target=target,
            slo_ttft_p95_ms=slo_ttft_p95_ms,
            concurrency=None,
            output_tokens_per_s=None,
            requests_per_s=None,
            ttft_p95_ms=None,
            reason="no step kept TTFT p95 within the SLO without errors",
        )
    best = max(fitting, key=lambda s: (s.output_tokens_per_s, -s.concurrency))
    limited = [
        s.concurrency for s in steps if s not in fitting and s.concurrency > best.concurrency
    ]
    reason = (
        f"TTFT p95 over the SLO or unstable from concurrency {min(limited)}"
        if limited
        else "highest throughput of the sweep within the SLO"
    )
    return OperatingPoint(
        target=target,
        slo_ttft_p95_ms=slo_ttft_p95_ms,
        concurrency=best.concurrency,
        output_tokens_per_s=best.output_tokens_per_s,
        requests_per_s=best.requests_per_s,
        ttft_p95_ms=best.ttft_ms["p95"],
        reason=reason,
    )


def _compared(step: StepSummary) -> dict[str, float | None]:
    """The figures `ratios` compares (in H also the chat's TTFT p95 during the indexing and the
    embeddings' requests per second)."""
    figures = {
        "output_tokens_per_s": step.output_tokens_per_s,
        "requests_per_s": step.requests_per_s,
        "ttft_p50": step.ttft_ms["p50"],
        "ttft_p95": step.ttft_ms["p95"],
        "e2e_p50": step.e2e_ms["p50"],
        "e2e_p95": step.e2e_ms["p95"],
    }
    if step.indexing is not None:
        figures["ttft_p95_indexing"] = step.indexing.chat_ttft_during_ms["p95"]
        figures["embed_requests_per_s"] = step.indexing.requests_per_s
    return figures


def ratios(
    direct: Sequence[StepSummary], proxied: Sequence[StepSummary]
) -> list[dict[str, float | int | None]]:
    """Per concurrency present in both sweeps: proxied / direct for throughput and latency
    figures (above 1.0: llmd is faster for rates, slower for latencies)."""
    by_c = {s.concurrency: s for s in direct}
    rows: list[dict[str, float | int | None]] = []
    for step in proxied:
        base = by_c.get(step.concurrency)
        if base is None:
            continue
        row: dict[str, float | int | None] = {"concurrency": step.concurrency}
        ours, theirs = _compared(step), _compared(base)
        for name, a in ours.items():
            b = theirs.get(name)
            row[name] = round(a / b, 3) if a is not None and b else None
        rows.append(row)
    return rows
