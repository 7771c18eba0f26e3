"""The engine's side of latency over its last minute, from the reads of its /metrics."""

from __future__ import annotations

import math

from llmd.engine.histograms import EngineHistogram
from llmd.engine.metrics import EngineSample
from llmd.telemetry.engine_window import EngineWindow


def read(
    at: float, requests: float, preemptions: float, hits: float, queries: float
) -> EngineSample:
    """A read where each request took 0.1 s of prefill and 0.3 s of decode."""
    prefill = EngineHistogram(((0.3, requests), (math.inf, requests)), 0.1 * requests, requests)
    decode = EngineHistogram(((0.3, 0.0), (0.5, requests), (math.inf, requests)), 0.3 * requests,
                             requests)  # fmt: skip
    return EngineSample(
        at,
        generation_tokens_total=requests * 10,
        prefill_time=prefill,
        decode_time=decode,
        preemptions_total=preemptions,
        prefix_cache_hits_total=hits,
        prefix_cache_queries_total=queries,
    )


def test_figures_are_those_of_the_window_not_since_the_engine_started() -> None:
    """Reads at 0, 30 and 90 s: the window keeps the read at 30 s as its start (60 s back
    from 90), so the figures are of the 60 requests, 6 preemptions and 400/1000 cached
    tokens between; the totals since start are the last read's."""
    window = EngineWindow()
    window.add(read(0.0, 100, 10, 0, 0))
    window.add(read(30.0, 140, 14, 100, 1000))
    window.add(read(90.0, 200, 20, 500, 2000))
    status = window.status()
    assert status is not None and status.window_s == 60.0
    assert status.prefill.count == 60 and status.prefill.mean_s == 0.1
    assert status.decode.mean_s == 0.3 and status.decode.p95_s is not None
    assert status.prefill_share == 0.25
    assert status.preemptions_per_s == 0.1 and status.preemptions == 20
    assert status.prefix_cache_hit_ratio == 0.4 and status.prefix_cache_hit_ratio_total == 0.25


def test_a_restarted_engine_starts_the_window_again() -> None:
    """Counters that went back are a new engine: its figures are its own, from its reads."""
    window = EngineWindow()
    window.add(read(0.0, 500, 50, 0, 0))
    window.add(read(1.0, 2, 0, 0, 0))
    window.add(read(3.0, 6, 1, 0, 10))
    status = window.status()
    assert status is not None
    assert status.prefill.count == 4 and status.preemptions_per_s == 0.5
    assert status.prefix_cache_hit_ratio == 0.0


def test_no_figures_without_the_series() -> None:
    """A backend that exports none of the engine's latency series (an upstream router) has
    no figures; an idle window has counts of 0 and no means."""
    window = EngineWindow()
    assert window.status() is None
    window.add(EngineSample(0.0, running=1))
    assert window.status() is None
    idle = EngineWindow()
    idle.add(read(0.0, 5, 0, 0, 0))
    idle.add(read(1.0, 5, 0, 0, 0))
    status = idle.status()
    assert status is not None and status.prefill.count == 0 and status.prefill.mean_s is None
    assert status.prefill_share is None and status.prefix_cache_hit_ratio is None
