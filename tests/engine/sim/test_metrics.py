"""The simulator's /metrics page is made again only after a series changed (llmd reads it every
0.5 s, mostly from an idle engine), and every kind of update shows in the next page."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import pytest
from prometheus_client import CollectorRegistry, Metric

from llmd.engine.sim.metrics import (
    SimMetrics,
    TrackedCounter,
    TrackedGauge,
    TrackedHistogram,
)


def _metrics() -> SimMetrics:
    return SimMetrics("tiny", block_size=16, num_gpu_blocks=64, max_model_len=256)


def test_a_page_nothing_changed_is_not_made_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two scrapes with no update between them collect the registry once, and answer the same
    bytes."""
    metrics = _metrics()
    collected = []
    collect = CollectorRegistry.collect

    def counted(registry: CollectorRegistry) -> Iterable[Metric]:
        collected.append(registry)
        return collect(registry)

    monkeypatch.setattr(CollectorRegistry, "collect", counted)
    first = metrics.render()
    assert metrics.render() == first
    assert len(collected) == 1


UPDATES: dict[str, Callable[[SimMetrics], None]] = {
    "gauge": lambda m: m.running.set(3),
    "counter": lambda m: m.generation_tokens.inc(5),
    "labelled counter": lambda m: m.success["length"].inc(),
    "histogram": lambda m: m.ttft.observe(0.2),
    "unlabelled gauge": lambda m: m.unlabelled_gauge("sim:x", "x").set(7),
}
SHOWN = {
    "gauge": 'vllm:num_requests_running{engine="0",model_name="tiny"} 3.0',
    "counter": 'vllm:generation_tokens_total{engine="0",model_name="tiny"} 5.0',
    "labelled counter": (
        'vllm:request_success_total{engine="0",finished_reason="length",model_name="tiny"} 1.0'
    ),
    "histogram": 'vllm:time_to_first_token_seconds_count{engine="0",model_name="tiny"} 1.0',
    "unlabelled gauge": "sim:x 7.0",
}


@pytest.mark.parametrize("kind", UPDATES)
def test_every_update_shows_in_the_next_page(kind: str) -> None:
    """After a page was made, an update of any kind of series is in the next one."""
    metrics = _metrics()
    before = metrics.render().decode()
    UPDATES[kind](metrics)
    after = metrics.render().decode()
    assert SHOWN[kind] not in before.splitlines()
    assert SHOWN[kind] in after.splitlines()


def test_every_series_is_updated_through_a_tracked_wrapper() -> None:
    """Each series SimMetrics hands out marks its page stale on update (none is a bare
    prometheus_client series, whose update a cached page would miss)."""
    metrics = _metrics()
    tracked = (TrackedGauge, TrackedCounter, TrackedHistogram)
    series = {
        name: value for name, value in vars(metrics).items() if name not in ("registry", "page")
    }
    assert series
    for name, value in series.items():
        values = value.values() if isinstance(value, dict) else [value]
        assert all(isinstance(v, tracked) for v in values), name
