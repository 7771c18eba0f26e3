"""Each scenario, briefly, against the simulator, and the side-by-side run through a real
`llmd serve`: the figures must be consistent (token counts add up, percentiles ordered,
disconnects counted)."""

from __future__ import annotations

import asyncio
import dataclasses
import io
import json
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from aiohttp import web
from rich.console import Console

from llmd.admission.tenants import hash_key
from llmd.bench import report as bench_report
from llmd.bench.client import RequestResult, Target
from llmd.bench.load import StepSpec, run_step
from llmd.bench.prompts import PromptBuilder
from llmd.bench.runner import BenchOptions, BenchReport, run_bench
from llmd.bench.sampler import GaugeSampler
from llmd.bench.scenarios import plan_request, scenario
from llmd.bench.stats import StepSummary, indexing_summary, operating_point, summarize
from tests.support.engine_metrics import wait_for_gauge
from tests.support.llmd_process import REPO, LlmdProcess, short_tmpdir
from tests.support.model import ensure_tiny_model
from tests.support.sim_process import SimProcess, sim_config

MAX_MODEL_LEN = 1024


@pytest.fixture(scope="module")
def fast_sim() -> Iterator[SimProcess]:
    """A zero-latency simulator in its own process (the bench's CPU is then its own)."""
    sim = SimProcess.start(
        ensure_tiny_model(), "--zero-latency", "--max-model-len", str(MAX_MODEL_LEN)
    )
    try:
        sim.wait_ready()
        yield sim
    finally:
        sim.stop()


def assert_consistent(results: list[RequestResult], summary: StepSummary) -> None:
    """Outcomes partition the requests; finished requests got exactly the tokens they asked
    for (ignore_eos) and the prompt tokens planned; percentiles are ordered; TTFT <= e2e."""
    assert summary.requests == len(results) > 0
    assert summary.ok + summary.disconnected + summary.errors + summary.timeouts == len(results)
    assert summary.errors == summary.timeouts == 0, summary.errors_by_kind
    for r in results:
        if r.outcome == "ok":
            assert r.output_tokens == r.planned_output and r.finish_reason == "length"
            assert r.prompt_tokens == r.planned_prompt
            assert r.ttft is not None and r.e2e is not None and r.ttft <= r.e2e
    assert summary.output_mismatches == 0
    assert summary.output_tokens == sum(
        r.output_tokens for r in results if r.outcome in ("ok", "disconnected")
    )
    assert summary.prompt_tokens == summary.planned_prompt_tokens
    assert summary.prompt_tokens == sum(r.planned_prompt for r in results if r.outcome == "ok")
    assert summary.prompt_mismatches == 0
    for figures in (summary.ttft_ms, summary.e2e_ms):
        p50, p95, p99 = figures["p50"], figures["p95"], figures["p99"]
        assert p50 is not None and p95 is not None and p99 is not None
        assert 0 <= p50 <= p95 <= p99


@pytest.mark.parametrize("name", list("ABCDEFG"))
async def test_scenario_against_the_simulator(fast_sim: SimProcess, name: str) -> None:
    """One short step of each scenario gives consistent figures; in F exactly the planned
    requests hang up, each after its planned number of chunks."""
    chosen = scenario(name)
    if chosen.open_arrivals:  # a short step: think less and burst more, to see both happen
        chosen = dataclasses.replace(chosen, think_s=0.05, burst_every_s=0.2)
    spec = StepSpec(
        scenario=chosen,
        concurrency=4,
        duration_s=30.0,  # the request cap ends the step, also on a loaded machine
        max_requests=24,
        seed=5,
        timeout_s=30,
        model="tiny",
        max_model_len=MAX_MODEL_LEN,
    )
    target = Target.parse("target", f"unix:{fast_sim.socket}")
    run = await run_step(target, spec, PromptBuilder(ensure_tiny_model()), GaugeSampler([target]))
    summary = summarize("target", 4, run.results, run.wall_s, run.samples, run.client_cpu_s)
    assert_consistent(run.results, summary)
    assert summary.gauge_samples >= 1 and summary.peak_kv_usage is not None
    if name == "A":
        assert len(run.results) == 1
    else:
        assert len(run.results) == 24
    plans = {r.index: plan_request(chosen, 5, r.index, MAX_MODEL_LEN) for r in run.results}
    cut = {i for i, plan in plans.items() if plan.disconnect_after is not None}
    assert {r.index for r in run.results if r.outcome == "disconnected"} == cut
    assert bool(cut) == (name == "F")
    for r in run.results:
        if r.outcome == "disconnected":
            assert r.output_tokens == r.chunks == plans[r.index].disconnect_after


async def test_the_shared_prefix_scenario_reports_the_prefix_cache_hit_rate(
    fast_sim: SimProcess,
) -> None:
    """G sends one 512-token system prompt before every question: the simulator's prefix cache
    (vLLM's, 128-token blocks) serves its 4 blocks to all but the first request, so most prompt
    tokens are hits; B's prompts share nothing and hit (almost) nothing."""
    target = Target.parse("target", f"unix:{fast_sim.socket}")
    rates = {}
    for name in ("G", "B"):
        spec = StepSpec(
            scenario=scenario(name),
            concurrency=2,
            duration_s=30.0,
            max_requests=12,
            seed=9,
            timeout_s=30,
            model="tiny",
            max_model_len=MAX_MODEL_LEN,
        )
        run = await run_step(
            target, spec, PromptBuilder(ensure_tiny_model()), GaugeSampler([target], 0.05)
        )
        summary = summarize("target", 2, run.results, run.wall_s, run.samples, run.client_cpu_s)
        assert_consistent(run.results, summary)
        rates[name] = summary.prefix_cache_hit_rate
    assert rates["G"] is not None and rates["G"] > 0.6
    assert rates["B"] is not None and rates["B"] < 0.05


def test_cli_writes_json_and_plot(fast_sim: SimProcess, tmp_path: Path) -> None:
    """`llmd bench` runs a two-step sweep, prints the table and writes the JSON and the PNG."""
    output = tmp_path / "bench.json"
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "llmd.cli",
            "bench",
            "--url",
            f"unix:{fast_sim.socket}",
            "--scenario",
            "B",
            "--sweep",
            "1,2",
            # Each step ends at its tenth request: the count bounds it, not the clock (0.5 s
            # ended a step after fewer requests at a load of 12, six workers and eight).
            "--duration",
            "60",
            "--max-requests",
            "10",
            "--output",
            str(output),
            "--quiet",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert completed.returncode == 0, completed.stderr
    assert "operating point (target): concurrency" in completed.stdout
    figures = json.loads(output.read_text())
    steps = figures["targets"]["target"]["steps"]
    assert [s["concurrency"] for s in steps] == [1, 2]
    assert all(s["ok"] == 10 for s in steps)
    assert figures["tokenizer"] == str(ensure_tiny_model())
    assert output.with_suffix(".png").read_bytes()[:4] == b"\x89PNG"


def test_an_unreachable_target_is_unavailable(tmp_path: Path) -> None:
    """An unreachable target ends the bench with status 69 (EX_UNAVAILABLE) and one line saying
    nothing answers there, not a traceback or aiohttp's words."""
    completed = subprocess.run(
        [sys.executable, "-m", "llmd.cli", "bench", "--url", f"unix:{tmp_path}/none.sock"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert completed.returncode == 69
    assert completed.stderr.strip() == (
        f"llmd bench: nothing answers on unix:{tmp_path}/none.sock (no such file or directory)"
    )


async def test_a_bench_with_an_api_key_runs_against_a_keyed_llmd(tmp_path: Path) -> None:
    """With a tenants file every /v1 request needs a key: `api_key` goes with the model list,
    the warm-up and the measured requests alike, and all of them are served."""
    key = "bench-key"
    (tmp_path / "tenants.toml").write_text(f'[tenants.bench]\nkeys = ["{hash_key(key)}"]\n')
    config = sim_config(
        ensure_tiny_model(), admission={"tenants_file": str(tmp_path / "tenants.toml")}
    )
    with LlmdProcess.running(config, "llmd-bk-") as llmd:
        options = BenchOptions(
            url=llmd.base_url, scenario=scenario("A"), seed=1, warmup=1, api_key=key
        )
        report = await run_bench(options)
    (steps,) = report.steps.values()
    assert report.model == "tiny"
    assert [(step.ok, step.errors) for step in steps] == [(1, 0)]


@pytest.fixture(scope="module")
def llmd() -> Iterator[LlmdProcess]:
    """`llmd serve` on the timed simulator, scraping the engine every 0.05 s, for the benches
    through llmd that need no key (the bench reads counters as differences)."""
    config = sim_config(ensure_tiny_model(), telemetry={"engine_interval_s": 0.05})
    with LlmdProcess.running(config, "llmd-bp-", timeout_s=30) as process:
        yield process


async def test_through_llmd_the_prefix_cache_hit_rate_is_read_from_llmd_metrics(
    llmd: LlmdProcess,
) -> None:
    """A bench of G through `llmd serve` alone scrapes llmd's /metrics, where the engine's
    prefix-cache counters are `llmd_engine_prefix_cache_*_total`: the hit rate is reported."""
    options = BenchOptions(
        url=llmd.base_url,
        scenario=scenario("G"),
        concurrencies=(2,),
        duration_s=30.0,
        max_requests=16,
        seed=9,
        warmup=1,
        metrics_interval_s=0.05,
    )
    report = await run_bench(options)
    ((step,),) = report.steps.values()
    assert step.ok == 16
    assert step.prefix_cache_hit_rate is not None and step.prefix_cache_hit_rate > 0.5


async def test_side_by_side_through_llmd_with_disconnects(llmd: LlmdProcess) -> None:
    """Scenario F straight to the engine and through a real `llmd serve` on the timed simulator:
    both targets send the same requests, disconnects are counted on both, the engine's
    gauges are sampled, the ratios are computed, and no sequence is left running."""
    options = BenchOptions(
        url=llmd.base_url,
        direct_url=f"unix:{llmd.engine_socket}",
        scenario=dataclasses.replace(
            scenario("F", disconnect_share=0.5), think_s=0.05, burst_every_s=0.3
        ),
        concurrencies=(2, 4),
        duration_s=2.0,
        max_requests=12,
        seed=3,
        warmup=1,
        metrics_interval_s=0.1,
    )
    report = await run_bench(options)
    assert set(report.steps) == {"direct", "llmd"}
    for direct, proxied in zip(report.steps["direct"], report.steps["llmd"], strict=True):
        assert direct.concurrency == proxied.concurrency
        for step in (direct, proxied):
            # request 1 of seed 3 hangs up, and every step sends it (two users from the start)
            assert step.requests >= 2 and step.errors == step.timeouts == 0
            assert step.disconnected >= 1
            assert step.ok + step.disconnected == step.requests
            assert step.output_mismatches == 0 and step.peak_running is not None
        assert proxied.peak_llmd_queue is None or proxied.peak_llmd_queue >= 0
    assert [row["concurrency"] for row in report.ratios] == [2, 4]
    assert all(row["output_tokens_per_s"] for row in report.ratios)
    assert set(report.operating_points) == {"direct", "llmd"}
    held, _ = wait_for_gauge(
        llmd.engine_socket, "vllm:num_requests_running", lambda v: v == 0, timeout_s=2
    )
    assert held
    document = report.to_json()
    assert json.loads(json.dumps(document))["ratios_llmd_over_direct"] == report.ratios


@pytest.fixture
async def pooling_engine() -> AsyncIterator[Target]:
    """A stand-in pooling engine on a Unix socket: POST /v1/embeddings answers one vector per
    input after 5 ms, with vLLM's usage (here 4 prompt tokens per document)."""

    async def embeddings(request: web.Request) -> web.Response:
        body = await request.json()
        await asyncio.sleep(0.005)
        data = [{"object": "embedding", "index": i, "embedding": [0.5, 0.5]}
                for i, _ in enumerate(body["input"])]  # fmt: skip
        usage = {"prompt_tokens": 4 * len(data), "total_tokens": 4 * len(data)}
        return web.json_response({"object": "list", "data": data, "usage": usage})

    app = web.Application()
    app.router.add_post("/v1/embeddings", embeddings)
    runner = web.AppRunner(app)
    await runner.setup()
    folder = short_tmpdir("llmd-embed-")
    await web.UnixSite(runner, str(folder / "embed.sock")).start()
    try:
        yield Target.parse("embed", f"unix:{folder / 'embed.sock'}")
    finally:
        await runner.cleanup()
        shutil.rmtree(folder, ignore_errors=True)


async def test_h_measures_the_chat_ttft_before_and_during_indexing(
    fast_sim: SimProcess, pooling_engine: Target
) -> None:
    """H: chat from the step's start, embeddings of 8 documents each from its half on, to
    another engine; the figures split the chat's TTFT at the indexing's start, count the
    documents, and the report shows them."""
    spec = StepSpec(
        scenario=scenario("H"),
        concurrency=2,
        duration_s=1.0,
        max_requests=100_000,  # the duration ends the step
        seed=4,
        timeout_s=30,
        model="tiny",
        max_model_len=MAX_MODEL_LEN,
        embed_model="tiny-embed",
    )
    chat = Target.parse("target", f"unix:{fast_sim.socket}")
    run = await run_step(chat, spec, PromptBuilder(ensure_tiny_model()), None, None, pooling_engine)
    assert run.indexing_at_s == 0.5 and run.embed_results
    assert all(r.outcome == "ok" and r.documents == 8 for r in run.embed_results)
    assert all(r.start >= run.indexing_at_s for r in run.embed_results)
    figures = indexing_summary(run.results, run.embed_results, run.indexing_at_s)
    summary = summarize("target", 2, run.results, run.wall_s, [], run.client_cpu_s, figures)
    assert_consistent(run.results, summary)
    assert figures.ok == figures.requests and figures.documents == 8 * figures.ok
    assert figures.prompt_tokens == 4 * figures.documents
    assert figures.chat_ttft_before_ms["p95"] is not None
    assert figures.chat_ttft_during_ms["p95"] is not None
    assert figures.ttft_p95_during_over_before is not None
    report = BenchReport(
        BenchOptions(url=chat.url, scenario=spec.scenario, embed_model="tiny-embed"),
        "tiny", MAX_MODEL_LEN, None, 0.0, {"target": [summary]},
        {"target": operating_point([summary], 1000)}, [], None,
    )  # fmt: skip
    console = Console(file=io.StringIO(), width=400, color_system=None)
    console.print(bench_report.render(report))
    shown = console.file.getvalue()  # type: ignore[attr-defined]
    assert "TTFT p95 before/during ms" in shown and "indexing (target, concurrency 2)" in shown
    document = json.loads(json.dumps(report.to_json()))
    assert document["scenario"]["indexing"]["batch"] == 8
    assert document["targets"]["target"]["steps"][0]["indexing"]["documents"] == figures.documents
