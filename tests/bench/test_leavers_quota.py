"""Scenarios I and J against the simulator: clients that hang up mid-stream all at once (how
fast the engine stops, what the others see), and a tenant over its quota through a real
`llmd serve` (its 429s, the Retry-After it honours, the others' latency)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from llmd.admission.tenants import hash_key
from llmd.bench.client import Target
from llmd.bench.lengths import mix_of
from llmd.bench.load import StepSpec, run_step
from llmd.bench.prompts import PromptBuilder
from llmd.bench.report import hangup_line, quota_line
from llmd.bench.runner import BenchOptions, pusher_headers, run_bench, step_summary
from llmd.bench.sampler import GaugeSampler
from llmd.bench.scenarios import Hangup, scenario
from llmd.errors import BenchError
from tests.support.llmd_process import LlmdProcess
from tests.support.model import ensure_tiny_model
from tests.support.sim_process import SimProcess, sim_config

# 200 tokens at 10 ms a step: each stream lasts about 2 s, so at 1 s every one is mid-stream.
LONG = mix_of([("long", 1.0, "16", "200")])


@pytest.fixture(scope="module")
def timed_sim() -> Iterator[SimProcess]:
    sim = SimProcess.start(ensure_tiny_model(), "--step-base-ms", "10", "--max-model-len", "1024")
    try:
        sim.wait_ready()
        yield sim
    finally:
        sim.stop()


def test_the_hangup_and_pusher_shapes() -> None:
    """I's leavers are a share of the users, at least one and never all; J's pusher takes
    its own key in place of the others'; the flags apply to their scenario only."""
    assert [Hangup(0.5).leavers(n) for n in (1, 2, 4, 5)] == [1, 1, 2, 2]
    assert Hangup(0.99).leavers(4) == 3
    assert scenario("I", leave_share=0.25).hangup == Hangup(0.25)
    assert scenario("J", pushers=3).pusher is not None
    with pytest.raises(BenchError, match="scenario I only"):
        scenario("B", leave_share=0.5)
    with pytest.raises(BenchError, match="scenario J only"):
        scenario("I", pushers=2)
    options = BenchOptions(url="http://x", scenario=scenario("J"), pusher_api_key="p")
    headers = (("Authorization", "Bearer others"), ("x-llmd-priority", "normal"))
    assert pusher_headers(options, headers) == (
        ("Authorization", "Bearer p"),
        ("x-llmd-priority", "normal"),
    )


async def test_i_cuts_the_leavers_streams_and_times_the_engines_stop(
    timed_sim: SimProcess,
) -> None:
    """Four users, two hang up at 1 s: both streams are cut mid-stream, the engine's running
    sequences fall to the two stayers within a second, and the stayers all finish."""
    chosen = dataclasses.replace(scenario("I"), mix=LONG)
    spec = StepSpec(chosen, 4, 2.0, 100, 3, 30, "tiny", 1024)
    target = Target.parse("target", f"unix:{timed_sim.socket}")
    run = await run_step(target, spec, PromptBuilder(ensure_tiny_model()), GaugeSampler([target]))
    summary = step_summary("target", 4, run)
    h = summary.hangup
    assert h is not None and (h.leavers, h.stayers, h.cut) == (2, 2, 2)
    assert h.running_before is not None and h.running_before >= 3
    assert h.engine_stop_s is not None and h.engine_stop_s < 1.0
    assert h.stayers_errors == 0 and summary.errors == summary.timeouts == 0
    cut = [r for r in run.results if r.outcome == "disconnected"]
    assert {r.user for r in cut} == {0, 1} and all(0 < r.chunks < 200 for r in cut)
    assert all(r.outcome == "ok" for r in run.results if r.user >= 2)
    assert h.stayers_ttft_before_ms["p50"] is not None
    assert "2 users left" in hangup_line("target", summary)


async def test_j_pushes_over_its_quota_and_honours_retry_after(tmp_path: Path) -> None:
    """Through llmd with a pusher tenant limited to one request in the engine and one queued:
    its six users get 429s with a Retry-After, wait each one out before sending again, and
    some of its requests are answered; the other tenant's requests all are."""
    tenants = tmp_path / "tenants.toml"
    tenants.write_text(
        f'[tenants.others]\nkeys = ["{hash_key("others")}"]\n\n'
        f'[tenants.pusher]\nkeys = ["{hash_key("push")}"]\nmax_concurrency = 1\n'
        "max_queued = 1\n"
    )
    config = sim_config(
        ensure_tiny_model(), ("--step-base-ms", "5"), admission={"tenants_file": str(tenants)}
    )
    chosen = scenario("J", pushers=6)
    with LlmdProcess.running(config, "llmd-bq-") as llmd:
        options = BenchOptions(
            url=llmd.base_url,
            scenario=chosen,
            concurrencies=(2,),
            duration_s=5.0,  # Retry-After is 2 s here: waits end before the step
            seed=2,
            warmup=1,
            api_key="others",
            pusher_api_key="push",
        )
        report = await run_bench(options)
    (step,) = report.steps["target"]
    q = step.quota
    assert q is not None and q.started_s == 2.5
    assert q.rejected_429 > 0 and q.ok > 0 and not q.errors_by_kind
    assert q.retry_after_s["min"] is not None and q.retry_after_s["min"] > 0
    assert q.honoured == 1.0 and q.refused_again is not None
    assert step.errors == step.timeouts == 0 and step.ok > 0
    assert q.others_ttft_before_ms["p95"] is not None
    assert "got 429 with Retry-After" in quota_line("target", step)
    assert report.to_json()["scenario"]["pusher"] == {"users": 6, "starts_at": 0.5}
