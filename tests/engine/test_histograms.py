"""The arithmetic on the engine's histograms: the difference of two reads, mean, quantile."""

from __future__ import annotations

import math

from llmd.engine.histograms import EngineHistogram

INF = math.inf


def test_a_quantile_is_linear_inside_its_bucket_as_prometheus_estimates_it() -> None:
    """10 values: 4 under 0.1, 4 in 0.1-0.5, 2 above 1: p50 is 0.1 + 0.4 * 1/4, p95 in the
    +Inf bucket reads as the largest finite bound."""
    histogram = EngineHistogram(((0.1, 4.0), (0.5, 8.0), (1.0, 8.0), (INF, 10.0)), 9.0, 10.0)
    assert histogram.quantile(0.5) == 0.1 + 0.4 * (1 / 4)
    assert histogram.quantile(0.95) == 1.0
    assert histogram.quantile(0.2) == 0.1 * (2 / 4)
    assert histogram.mean == 0.9


def test_an_empty_histogram_has_no_quantile_nor_mean() -> None:
    """Nothing observed: None, not 0."""
    empty = EngineHistogram(((0.1, 0.0), (INF, 0.0)), 0.0, 0.0)
    assert empty.quantile(0.5) is None and empty.mean is None


def test_the_difference_of_two_reads_is_what_was_observed_between() -> None:
    """Later minus earlier, bucket by bucket; None after a restart (counts went back) or for
    other bucket bounds."""
    earlier = EngineHistogram(((0.1, 1.0), (INF, 2.0)), 0.5, 2.0)
    later = EngineHistogram(((0.1, 4.0), (INF, 6.0)), 1.5, 6.0)
    assert later.since(earlier) == EngineHistogram(((0.1, 3.0), (INF, 4.0)), 1.0, 4.0)
    assert earlier.since(later) is None
    assert later.since(EngineHistogram(((0.2, 0.0), (INF, 0.0)), 0.0, 0.0)) is None
