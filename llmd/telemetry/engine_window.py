"""The engine's side of latency over its last minute, from two reads of its /metrics: the
newest and the oldest kept within the window. vLLM's series are cumulative since the engine
started, so what happened in between is their difference (llmd/engine/histograms.py)."""

from __future__ import annotations

import collections

from llmd.engine.histograms import EngineHistogram
from llmd.engine.metrics import EngineSample
from llmd.status import EngineLatencyStatus, PhaseTimes

# Seconds of the engine's figures in `llmd status`, llmd-top and the status JSON: as the request
# latency's `last_1m`.
ENGINE_WINDOW_S = 60.0


class EngineWindow:
    """One backend's reads over the last `window_s` seconds (at the scrape interval, 0.5 s:
    about 120 small records). `add` each read; `status()` gives the figures between the
    oldest and the newest. A read whose counters went back (a restarted engine) starts the
    window again."""

    def __init__(self, window_s: float = ENGINE_WINDOW_S) -> None:
        self.window_s = window_s
        self._samples: collections.deque[EngineSample] = collections.deque()

    def add(self, sample: EngineSample) -> None:
        samples = self._samples
        if samples and _went_back(samples[-1], sample):
            samples.clear()
        samples.append(sample)
        # Keep one read at or before the window's start, so the window is covered in full.
        while len(samples) > 2 and sample.taken_at - samples[1].taken_at >= self.window_s:
            samples.popleft()

    def status(self) -> EngineLatencyStatus | None:
        """The figures over the window; None before any read with the engine's latency series
        (an upstream that exports none)."""
        if not self._samples:
            return None
        last, first = self._samples[-1], self._samples[0]
        if last.prefill_time is None and last.preemptions_total is None:
            return None
        elapsed = last.taken_at - first.taken_at
        prefill = _delta(last.prefill_time, first.prefill_time)
        decode = _delta(last.decode_time, first.decode_time)
        preempted = _counted(last.preemptions_total, first.preemptions_total)
        hits = _counted(last.prefix_cache_hits_total, first.prefix_cache_hits_total)
        queries = _counted(last.prefix_cache_queries_total, first.prefix_cache_queries_total)
        phases = (prefill.sum if prefill else 0.0) + (decode.sum if decode else 0.0)
        return EngineLatencyStatus(
            window_s=round(elapsed, 1),
            queue=_phase(_delta(last.queue_time, first.queue_time)),
            prefill=_phase(prefill),
            decode=_phase(decode),
            inter_token=_phase(_delta(last.inter_token_latency, first.inter_token_latency)),
            prefill_share=round(prefill.sum / phases, 3) if prefill and phases > 0 else None,
            preemptions_per_s=(
                round(preempted / elapsed, 3) if preempted is not None and elapsed > 0 else None
            ),
            preemptions=None if last.preemptions_total is None else int(last.preemptions_total),
            prefix_cache_hit_ratio=_ratio(hits, queries),
            prefix_cache_hit_ratio_total=_ratio(
                last.prefix_cache_hits_total, last.prefix_cache_queries_total
            ),
        )


def _went_back(before: EngineSample, after: EngineSample) -> bool:
    """Whether `after` is a new engine's read: a cumulative figure is lower than before."""
    pairs = (
        (before.generation_tokens_total, after.generation_tokens_total),
        (before.preemptions_total, after.preemptions_total),
        (_count(before.prefill_time), _count(after.prefill_time)),
    )
    return any(a is not None and b is not None and b < a for a, b in pairs)


def _count(histogram: EngineHistogram | None) -> float | None:
    return histogram.count if histogram is not None else None


def _delta(last: EngineHistogram | None, first: EngineHistogram | None) -> EngineHistogram | None:
    if last is None or first is None:
        return None
    return last.since(first)


def _counted(last: float | None, first: float | None) -> float | None:
    if last is None or first is None or last < first:
        return None
    return last - first


def _ratio(part: float | None, whole: float | None) -> float | None:
    if part is None or whole is None or whole <= 0:
        return None
    return round(part / whole, 3)


def _phase(histogram: EngineHistogram | None) -> PhaseTimes:
    if histogram is None or histogram.count <= 0:
        return PhaseTimes()
    mean, p50, p95 = histogram.mean, histogram.quantile(0.5), histogram.quantile(0.95)
    return PhaseTimes(
        mean_s=None if mean is None else round(mean, 4),
        p50_s=None if p50 is None else round(p50, 4),
        p95_s=None if p95 is None else round(p95, 4),
        count=int(histogram.count),
    )
