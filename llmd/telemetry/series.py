"""Prometheus counters and histograms that the request path updates without a lock: each is a
dict from label values to numbers, owned by the event loop, and read into metric families only
when /metrics is scraped (prometheus_client's custom-collector pattern, 0.26).

Why not prometheus_client's `Counter` and `Histogram`: each update there takes `labels()` (a
lock, a dict, a tuple of str() calls) and a lock in the value, about 2-3 µs on these hosts, and
a request ends with up to eight of them (issue 37: metrics updated without locks on the hot
path). Here an update is a dict lookup and an add (0.2-0.3 µs). Only the event loop's thread
updates or reads them (/metrics is served on the loop), so nothing can interleave.

The text format is prometheus_client's own for the same observations (pinned by
tests/telemetry/test_series.py): counters as `NAME_total`, histograms with cumulative
`NAME_bucket{le}` (bounds as prometheus_client writes them), `NAME_count` and `NAME_sum`;
series in the order they were first updated; no `_created` samples.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

Labels = tuple[str, ...]


class _Series(Collector):
    """What a counter and a histogram share: the name, help text and label names, and the
    check on a new series' label values (as prometheus_client's `labels()` makes)."""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str]) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)

    def _check(self, labels: Labels) -> None:
        """Raises ValueError unless `labels` has one value per label name."""
        if len(labels) != len(self.labelnames):
            raise ValueError(f"{self.name} takes {self.labelnames}, not {labels}")


def _text(labels: Labels) -> list[str]:
    """Label values as the text format takes them (prometheus_client's `labels()` str()s)."""
    return [str(label) for label in labels]


class CounterSeries(_Series):
    """A counter `name` (exposed as `name_total`) by the label values of `labelnames`."""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str]) -> None:
        super().__init__(name, documentation, labelnames)
        self._values: dict[Labels, float] = {}

    def inc(self, labels: Labels, amount: float = 1.0) -> None:
        """Add `amount` (>= 0) to the series of `labels` (one value per label name, in order).
        Raises ValueError for a negative amount or a wrong number of values, as
        prometheus_client does."""
        if amount < 0:
            raise ValueError(f"counters only go up: {amount} for {self.name}{labels}")
        values = self._values
        value = values.get(labels)
        if value is None:
            self._check(labels)
            value = 0.0
        values[labels] = value + amount

    def declare(self, labels: Labels) -> None:
        """Show the series of `labels` at 0 before its first count (an alert on its increase
        then sees the first one). Raises ValueError for a wrong number of values."""
        self._check(labels)
        self._values.setdefault(labels, 0.0)

    def describe(self) -> Iterator[Metric]:
        yield CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for labels, value in list(self._values.items()):
            family.add_metric(_text(labels), value)
        yield family


class HistogramSeries(_Series):
    """A histogram `name` with upper bounds `buckets` (seconds, ascending; +Inf added) by the
    label values of `labelnames`. Each series is one list: the count per bucket (not
    cumulative; the last one past every bound), then the sum."""

    def __init__(
        self, name: str, documentation: str, labelnames: Sequence[str], buckets: Sequence[float]
    ) -> None:
        super().__init__(name, documentation, labelnames)
        self.bounds = tuple(buckets)
        les = [floatToGoString(bound) for bound in self.bounds]  # type: ignore[no-untyped-call]
        self._les = [*les, "+Inf"]
        self._series: dict[Labels, list[float]] = {}

    def _cells(self, labels: Labels) -> list[float]:
        cells = self._series.get(labels)
        if cells is None:
            self._check(labels)
            cells = self._series[labels] = [0.0] * (len(self.bounds) + 2)
        return cells

    def observe(self, labels: Labels, value: float) -> None:
        """Count `value` in the series of `labels`: in the first bucket whose bound is at least
        `value` (Prometheus's `le`). Raises ValueError for a wrong number of label values."""
        cells = self._cells(labels)
        cells[bisect.bisect_left(self.bounds, value)] += 1
        cells[-1] += value

    def observe_sorted(self, labels: Labels, values: Sequence[float]) -> None:
        """Count every one of `values` (ascending) in the series of `labels`: one bisect per
        bucket, however many values."""
        if not values:
            return
        cells = self._cells(labels)
        below = 0
        for index, bound in enumerate(self.bounds):
            upto = bisect.bisect_right(values, bound)
            cells[index] += upto - below
            below = upto
        cells[-2] += len(values) - below
        cells[-1] += sum(values)

    def describe(self) -> Iterator[Metric]:
        yield HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for labels, cells in list(self._series.items()):
            cumulative, buckets = 0.0, []
            for le, count in zip(self._les, cells, strict=False):  # the sum is left out
                cumulative += count
                buckets.append((le, cumulative))
            family.add_metric(_text(labels), buckets, cells[-1])
        yield family
