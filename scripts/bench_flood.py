"""Issue 20's flood and issue 37's wave against engines: interactive TTFT and batch tokens/s.

`--shape flood` (issue 20): 160 clients send non-streamed completions of 300 tokens (ignore_eos)
back to back; one 8-token streaming chat arrives every 0.3 s; 20 s per run
(tests/support/flood.py says how it is measured).
`--shape wave` (issue 37): the 160 completions are sent together and the next wave the moment
the last answer ends; an interactive client on a connection of its own sends an 8-token
streaming chat right behind each wave's sends and another when its first answer arrives (the
turnover: 160 answers end, 160 requests arrive), after 20 idle probes that give its idle TTFT
in the same run; batch tokens/s from the answers' usage (tests/support/wave.py).
Targets, each run once per round, in an order that rotates every round:

    # a real vLLM (etc/demo.toml's engine flags) and the simulator, booted here, straight to each
    flock /tmp/llmd-heavy.lock .venv/bin/python scripts/bench_flood.py --rounds 3
    # engines already running (an engine socket, or an OpenAI base URL)
    ... scripts/bench_flood.py --target vllm=unix:/tmp/x/engine.sock --target sim=http://127.0.0.1:9000
    # an `llmd serve` with a shipped config: through llmd and straight to its engine socket
    ... scripts/bench_flood.py --llmd etc/sim.toml
    ... scripts/bench_flood.py --shape wave --llmd etc/sim.toml --rounds 3
    # one setting changed from the shipped config's (a TOML value), e.g. batch pacing off
    ... scripts/bench_flood.py --shape wave --llmd etc/sim.toml --set admission.batch_pace_ms=0

Before each run the script waits (at most `--settle` s) for the 1-minute load average to drop
under `--max-load` and for the engine to be idle, and records the load it started at.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import datetime
import json
import os
import statistics
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from llmd.bench.client import Target  # noqa: E402
from tests.support.configs import config_sections, shipped_config  # noqa: E402
from tests.support.engines import booted_engine  # noqa: E402
from tests.support.flood import FloodRun, FloodShape, run_flood  # noqa: E402
from tests.support.llmd_process import LlmdProcess  # noqa: E402
from tests.support.machine_load import load_average, settle  # noqa: E402
from tests.support.wave import WaveRun, WaveShape, run_wave  # noqa: E402


@dataclasses.dataclass(frozen=True)
class Route:
    """One way into an engine: the target the load goes to and the engine it measures."""

    label: str
    target: Target
    metrics: Target


@contextlib.contextmanager
def engine_route(kind: str, model: Path, sim_args: list[str]) -> Iterator[Route]:
    """`kind` booted here (tests/support/engines.py); the route straight to it."""
    with booted_engine(kind, model, sim_args) as engine:
        target = Target.parse(kind, f"unix:{engine.socket}")
        yield Route(kind, target, target)


@contextlib.contextmanager
def llmd_routes(
    config: Path, model: Path, settings: dict[str, dict[str, Any]]
) -> Iterator[list[Route]]:
    """An `llmd serve` with etc/`config`'s settings, `settings` over them (by section), and
    `model`: through it, and direct."""
    sections = {"logging": {"level": "warning"}} | settings
    llmd = LlmdProcess.start(shipped_config(config.name, model, **sections))
    try:
        llmd.wait_ready(600)
        engine = Target.parse("direct", f"unix:{llmd.engine_socket}")
        via = Target.parse("llmd", llmd.base_url)
        yield [Route("llmd", via, engine), Route("direct", engine, engine)]
    finally:
        llmd.stop()


def run_rounds(
    paths: list[Route],
    shape: FloodShape | WaveShape,
    rounds: int,
    max_load: float,
    settle_s: float,
) -> list[dict[str, Any]]:
    """`rounds` rounds over `paths`, the order rotated by one each round; each run's summary
    with its round, start time and the load average before and after."""
    results = []
    for round_no in range(rounds):
        shift = round_no % len(paths)
        for path in paths[shift:] + paths[:shift]:
            socket = Path(path.metrics.uds) if path.metrics.uds else None
            load_before = settle(socket, max_load, settle_s)
            started = datetime.datetime.now().isoformat(timespec="seconds")
            run: FloodRun | WaveRun
            if isinstance(shape, WaveShape):
                run = asyncio.run(run_wave(path.target, shape))
            else:
                run = asyncio.run(run_flood(path.target, shape, path.metrics))
            summary = run.summary() | {"target": path.label, "round": round_no + 1}
            summary["detail"] = run.detail()
            summary |= {"started": started, "load_before": load_before,
                        "load_after": load_average()}  # fmt: skip
            print(json.dumps({k: v for k, v in summary.items() if k != "detail"}), flush=True)
            results.append(summary)
    return results


def spread(results: list[dict[str, Any]], key: str, label: str, form: str = ",.0f") -> str:
    """'median (min-max)' of `key` over `label`'s runs; a leading '>' when any was censored."""
    values = [r[key] for r in results if r["target"] == label and r[key] is not None]
    if not values:
        return "-"
    censored = key == "ttft_p95_ms" and any(
        r["ttft_p95_censored"] for r in results if r["target"] == label
    )
    mark = ">" if censored else ""
    low, mid, high = (
        format(v, form) for v in (min(values), statistics.median(values), max(values))
    )
    return f"{mark}{mid} ({low}-{high})"


def print_table(results: list[dict[str, Any]]) -> None:
    print("\n| round | target | load | probes (answered in window) | TTFT p50 ms | p95 ms "
          "| engine tok/s | batch done | end top10 | running | waiting |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        p95 = f"{'>' if r['ttft_p95_censored'] else ''}{r['ttft_p95_ms']}"
        print(
            f"| {r['round']} | {r['target']} | {r['load_before']:.2f} | {r['probes']} "
            f"({r['probes_answered_in_window']}) | {r['ttft_p50_ms']} | {p95} | "
            f"{r['engine_tokens_per_s']} | {r['batch_completions']} | {r['batch_end_top10']} | "
            f"{r['running_mean']} | {r['waiting_mean']} |"
        )
    print("\nmedian (range) over rounds:")
    for label in dict.fromkeys(r["target"] for r in results):
        print(
            f"  {label}: TTFT p50 {spread(results, 'ttft_p50_ms', label)} ms, "
            f"p95 {spread(results, 'ttft_p95_ms', label)} ms, "
            f"answered in window {spread(results, 'probes_answered_in_window', label)}, "
            f"engine tok/s {spread(results, 'engine_tokens_per_s', label)}"
        )


def print_wave_table(results: list[dict[str, Any]]) -> None:
    print("\n| round | target | load | waves | wave s | idle TTFT p50 ms | wave TTFT p50 ms "
          "| p95 ms | restart max | ending max | p95/idle p50 | batch tok/s |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(
            f"| {r['round']} | {r['target']} | {r['load_before']:.2f} | {r['waves']} | "
            f"{r['wave_s']} | {r['idle_ttft_p50_ms']} | {r['wave_ttft_p50_ms']} | "
            f"{r['wave_ttft_p95_ms']} | {r['restart_ttft_max_ms']} | {r['ending_ttft_max_ms']} | "
            f"{r['p95_over_idle_p50']} | {r['batch_tokens_per_s']} |"
        )
    print("\nmedian (range) over rounds:")
    labels = list(dict.fromkeys(r["target"] for r in results))
    for label in labels:
        print(
            f"  {label}: idle TTFT p50 {spread(results, 'idle_ttft_p50_ms', label)} ms, "
            f"wave TTFT p95 {spread(results, 'wave_ttft_p95_ms', label)} ms, "
            f"p95/idle {spread(results, 'p95_over_idle_p50', label, '.1f')}, "
            f"batch tok/s {spread(results, 'batch_tokens_per_s', label)}"
        )
    if {"llmd", "direct"} <= set(labels):
        ratios = [
            a["batch_tokens_per_s"] / b["batch_tokens_per_s"]
            for a in results
            for b in results
            if a["target"] == "llmd" and b["target"] == "direct" and a["round"] == b["round"]
        ]
        print(
            f"  batch tok/s llmd/direct by round: median {statistics.median(ratios):.3f} "
            f"({min(ratios):.3f}-{max(ratios):.3f})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=("flood", "wave"), default="flood")
    parser.add_argument("--engines", nargs="*", default=["vllm", "sim"], choices=("vllm", "sim"))
    parser.add_argument(
        "--target",
        action="append",
        default=[],
        metavar="NAME=URL",
        help="an engine already running: unix:/path.sock or http://HOST:PORT",
    )
    parser.add_argument("--llmd", type=Path, help="run through `llmd serve` with etc/THIS.toml")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="with --llmd: a setting over the config's (VALUE in TOML)",
    )
    parser.add_argument("--model", type=Path, default=REPO / "var" / "models" / "tiny")
    parser.add_argument("--sim-arg", action="append", default=[], help="e.g. --sim-arg=--seed=1")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, help="per run (default: the shape's)")
    parser.add_argument("--batch-clients", type=int, default=FloodShape.batch_clients)
    parser.add_argument("--max-load", type=float, default=1.5)
    parser.add_argument("--settle", type=float, default=120.0, help="longest wait for quiet, s")
    parser.add_argument("--output", type=Path, help="write the runs as JSON here")
    args = parser.parse_args()
    kind = WaveShape if args.shape == "wave" else FloodShape
    shape = kind(seconds=args.seconds or kind.seconds, batch_clients=args.batch_clients)
    sim_args = [part for arg in args.sim_arg for part in arg.split("=", 1)]
    with contextlib.ExitStack() as stack:
        if args.llmd:
            settings = config_sections(args.set)
            paths = stack.enter_context(llmd_routes(args.llmd, args.model.resolve(), settings))
        elif args.target:
            paths = []
            for spec in args.target:
                name, url = spec.split("=", 1)
                target = Target.parse(name, url)
                paths.append(Route(name, target, target))
        else:
            paths = [
                stack.enter_context(engine_route(kind, args.model, sim_args))
                for kind in args.engines
            ]
        results = run_rounds(paths, shape, args.rounds, args.max_load, args.settle)
    (print_wave_table if args.shape == "wave" else print_table)(results)
    if args.output:
        record = {
            "command": " ".join(sys.argv),
            "date": datetime.datetime.now().isoformat(timespec="seconds"),
            "cpus": os.cpu_count(),
            "shape": dataclasses.asdict(shape),
            "runs": results,
        }
        args.output.write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
