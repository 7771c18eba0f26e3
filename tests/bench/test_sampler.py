"""Reading the engine's gauges from Prometheus text, and the target URL forms."""

from __future__ import annotations

import pytest

from llmd.bench.client import Target
from llmd.bench.sampler import parse_gauges
from llmd.errors import BenchError

METRICS = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="tiny"} 3.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="tiny"} 2.0
vllm:num_requests_waiting{engine="1",model_name="tiny"} 5.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="tiny"} 0.25
# HELP vllm:e2e_request_latency_seconds Histogram of e2e request latency in seconds.
# TYPE vllm:e2e_request_latency_seconds histogram
vllm:e2e_request_latency_seconds_bucket{engine="0",le="0.3",model_name="tiny"} 1.0
"""


def test_gauges_are_summed_over_label_sets() -> None:
    """Each wanted family is summed over engines; other families are ignored."""
    assert parse_gauges(METRICS) == {
        "vllm:num_requests_running": 3.0,
        "vllm:num_requests_waiting": 7.0,
        "vllm:kv_cache_usage_perc": 0.25,
    }


def test_llmd_names_are_read_too() -> None:
    """llmd's re-exported engine gauges and its queue depth (all classes) are read."""
    text = (
        "# TYPE llmd_engine_kv_cache_usage_ratio gauge\n"
        "llmd_engine_kv_cache_usage_ratio 0.5\n"
        "# TYPE llmd_queue_depth gauge\n"
        'llmd_queue_depth{class="interactive"} 2.0\n'
        'llmd_queue_depth{class="batch"} 3.0\n'
    )
    assert parse_gauges(text) == {"llmd_engine_kv_cache_usage_ratio": 0.5, "llmd_queue_depth": 5.0}


def test_no_vllm_metrics_gives_nothing() -> None:
    """A /metrics page without vLLM's gauges yields no values (peaks stay None)."""
    assert parse_gauges("# TYPE up gauge\nup 1\n") == {}


def test_target_url_forms() -> None:
    """http URLs lose a trailing /v1; unix: URLs go over the socket; others are refused."""
    assert Target.parse("t", "http://127.0.0.1:8000/v1/").base_url == "http://127.0.0.1:8000"
    uds = Target.parse("t", "unix:/run/llmd/engine.sock")
    assert uds.uds == "/run/llmd/engine.sock" and uds.base_url == "http://engine"
    with pytest.raises(BenchError):
        Target.parse("t", "ftp://x")
