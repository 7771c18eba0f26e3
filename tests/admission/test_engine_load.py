"""Reading the engine's load from the simulator's vLLM-compatible /metrics text."""

from __future__ import annotations

import pytest

from llmd.admission.engine_load import ScrapeFailed, parse_load
from llmd.engine.sim.metrics import SimMetrics


def test_parses_running_waiting_usage_and_kv_capacity() -> None:
    """Gauges and cache_config_info (blocks x block size) come out of vLLM's exposition."""
    metrics = SimMetrics("tiny", block_size=16, num_gpu_blocks=64, max_model_len=256)
    metrics.running.set(3)
    metrics.waiting.set(2)
    metrics.kv_usage.set(0.25)
    load = parse_load(metrics.render().decode())
    assert (load.running, load.waiting, load.kv_usage, load.kv_tokens) == (3, 2, 0.25, 1024)


def test_metrics_without_vllm_series_are_a_scrape_failure() -> None:
    """An exposition without vllm:num_requests_running (stats disabled) is ScrapeFailed."""
    with pytest.raises(ScrapeFailed):
        parse_load("# TYPE other gauge\nother 1\n")
