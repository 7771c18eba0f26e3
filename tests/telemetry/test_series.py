"""The lock-free series write what prometheus_client's Counter and Histogram write for the same
updates (llmd/telemetry/series.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from llmd.telemetry.gaps import GAP_BUCKETS
from llmd.telemetry.metrics import LATENCY_BUCKETS
from llmd.telemetry.series import CounterSeries, HistogramSeries

LABEL_VALUES = st.sampled_from(["", "a", "chat", 'quote"d', "back\\slash", "new\nline"])
SECONDS = st.floats(min_value=0.0, max_value=4000.0, allow_nan=False) | st.sampled_from(
    LATENCY_BUCKETS
)


def _text(*collectors: object) -> list[str]:
    """The text format of `collectors`, less prometheus_client's `_created` samples (llmd's
    series have none)."""
    registry = CollectorRegistry()
    for collector in collectors:
        registry.register(collector)  # type: ignore[arg-type]
    lines = generate_latest(registry).decode().splitlines()
    return [line for line in lines if "_created" not in line]


@given(st.lists(st.tuples(LABEL_VALUES, LABEL_VALUES, st.integers(0, 10**6)), max_size=30))
def test_a_counter_writes_what_prometheus_clients_writes(
    updates: list[tuple[str, str, int]],
) -> None:
    ours = CounterSeries("llmd_things", "Things, by kind and place.", ["kind", "place"])
    theirs = Counter("llmd_things", "Things, by kind and place.", ["kind", "place"], registry=None)
    for kind, place, amount in updates:
        ours.inc((kind, place), amount)
        theirs.labels(kind, place).inc(amount)
    assert _text(ours) == _text(theirs)


@given(st.lists(st.tuples(LABEL_VALUES, SECONDS), max_size=40))
def test_a_histogram_writes_what_prometheus_clients_writes(
    updates: list[tuple[str, float]],
) -> None:
    ours = HistogramSeries("llmd_wait_seconds", "Waits.", ["model"], LATENCY_BUCKETS)
    theirs = Histogram(
        "llmd_wait_seconds", "Waits.", ["model"], buckets=LATENCY_BUCKETS, registry=None
    )
    for model, seconds in updates:
        ours.observe((model,), seconds)
        theirs.labels(model).observe(seconds)
    assert _text(ours) == _text(theirs)


@given(
    st.lists(
        st.floats(min_value=0.0, max_value=120.0, allow_nan=False) | st.sampled_from(GAP_BUCKETS)
    )
)
def test_sorted_values_count_as_one_by_one(values: list[float]) -> None:
    at_once = HistogramSeries("llmd_gaps_seconds", "Gaps.", ["class"], GAP_BUCKETS)
    one_by_one = HistogramSeries("llmd_gaps_seconds", "Gaps.", ["class"], GAP_BUCKETS)
    at_once.observe_sorted(("batch",), sorted(values))
    for value in values:
        one_by_one.observe(("batch",), value)
    # The sum may differ in its last bits: it adds in another order.
    sums, other_sums = (
        [line for line in _text(series) if line.startswith("llmd_gaps_seconds_sum")]
        for series in (at_once, one_by_one)
    )
    assert [float(line.split()[-1]) for line in sums] == pytest.approx(
        [float(line.split()[-1]) for line in other_sums]
    )
    assert [line for line in _text(at_once) if line not in sums] == [
        line for line in _text(one_by_one) if line not in other_sums
    ]


def test_a_declared_series_shows_zero_and_a_counter_only_goes_up() -> None:
    series = CounterSeries("llmd_deploys", "Deploys.", ["outcome"])
    series.declare(("promoted",))
    assert 'llmd_deploys_total{outcome="promoted"} 0.0' in _text(series)
    with pytest.raises(ValueError, match="only go up"):
        series.inc(("promoted",), -1)


def test_a_wrong_number_of_label_values_is_refused() -> None:
    """As prometheus_client's `labels()`: one value per label name, or ValueError."""
    counter = CounterSeries("llmd_things", "Things.", ["kind", "place"])
    histogram = HistogramSeries("llmd_waits_seconds", "Waits.", ["kind"], (1.0,))
    with pytest.raises(ValueError, match="takes"):
        counter.inc(("a",))
    with pytest.raises(ValueError, match="takes"):
        histogram.observe(("a", "b"), 0.5)


def test_a_registry_refuses_a_second_series_of_the_same_name() -> None:
    registry = CollectorRegistry()
    registry.register(CounterSeries("llmd_things", "Things.", ["kind"]))
    with pytest.raises(ValueError, match="Duplicated"):
        registry.register(HistogramSeries("llmd_things", "Things.", ["kind"], (1.0,)))
