"""Client-side inter-token latency: each stream's gaps, the request line's p50 and max gap,
the histogram by class and model."""

from __future__ import annotations

import pytest

from llmd.telemetry.gaps import GAP_BUCKETS, TokenGaps
from llmd.telemetry.observer import Observer
from tests.support.exchanges import finished_exchange
from tests.support.log_capture import Captured


def test_a_streams_gaps_give_its_median_and_longest() -> None:
    """Chunks at 0, 0.01, 0.03, 0.04 and 1.04 s: gaps 10, 20, 10 and 1000 ms."""
    gaps = TokenGaps()
    assert gaps.p50_s is None and gaps.max_s is None
    for at in (0.0, 0.01, 0.03, 0.04, 1.04):
        gaps.chunk(at)
    assert gaps.p50_s == pytest.approx(0.01) and gaps.max_s == pytest.approx(1.0)


def test_the_request_line_and_the_histogram_take_a_streams_gaps(captured_logs: Captured) -> None:
    """A stream that stalled 2 s after its first tokens: its line says itl_max_ms 2000, and
    every gap lands in llmd_inter_token_latency_seconds{class, model}."""
    observer = Observer()
    observer.finished(finished_exchange(gaps_s=(0.02, 0.02, 2.0, 0.03)))
    (line,) = [line for line in captured_logs.lines() if line["event"] == "request_finished"]
    assert line["itl_p50_ms"] == 20.0 and line["itl_max_ms"] == 2000.0
    value = observer.metrics.registry.get_sample_value
    labels = {"class": "normal", "model": "tiny"}
    assert value("llmd_inter_token_latency_seconds_count", labels) == 4
    assert value("llmd_inter_token_latency_seconds_bucket", {**labels, "le": "0.04"}) == 3
    assert value("llmd_inter_token_latency_seconds_bucket", {**labels, "le": "1.0"}) == 3
    assert value("llmd_inter_token_latency_seconds_bucket", {**labels, "le": "+Inf"}) == 4
    assert value("llmd_inter_token_latency_seconds_sum", labels) == pytest.approx(2.07)
    assert len(GAP_BUCKETS) == 20


def test_a_request_without_gaps_has_no_gap_figures(captured_logs: Captured) -> None:
    """A stream of one chunk, or a stream that failed, adds no gap figures."""
    observer = Observer()
    observer.finished(finished_exchange())
    observer.finished(finished_exchange(gaps_s=(0.1,), status=502, error_code="engine_error"))
    lines = [line for line in captured_logs.lines() if line["event"] == "request_finished"]
    assert all("itl_max_ms" not in line for line in lines)
    value = observer.metrics.registry.get_sample_value
    labels = {"class": "normal", "model": "tiny"}
    assert value("llmd_inter_token_latency_seconds_count", labels) is None
