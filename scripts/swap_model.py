"""The swap core (llmd/admission/swap.py) driven over bench_swap.py's agents, with no processes:
a step model for exploring the policy in seconds, beside (never instead of) the benchmark; and
bench_swap.py's arrival-order swapper over the same agents.

Each step (`--step-s`) the agents' calls arrive after their think time, the core decides, a wake
takes `--wake-s`, a call runs `--service-s` on its model's engine (one engine awake at a time),
and a call's wait is from its arrival to its start, plus `--first-token-s`. The core sees each
engine's predicted wake as `--idle-factor` x the wake (1: as llmd predicts it), so the idle
rule's threshold can be varied. Calibrated against scripts/bench_swap.py on the simulator
(docs/bench/swap.md): it gives the swaps per minute and p95 TTFT measured there within about 10%.

    .venv/bin/python scripts/swap_model.py --wake-s 0.3 --min-residence-s 5 --max-wait-s 1
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

from bench_swap import MODELS, percentile, trace  # noqa: E402

from llmd.admission.swap import GroupPolicy, Residency, SwapGroup  # noqa: E402
from tests.support.swap_steps import StepEngine, advance, apply, views  # noqa: E402


def run(args: argparse.Namespace, policy: GroupPolicy, seed: int) -> dict[str, Any]:
    """One run of `args.seconds` with `args.agents` agents: wakes per minute, calls done, and
    the p50/p95 wait per model (s)."""
    swap = SwapGroup(policy)
    engines = {m: StepEngine() for m in MODELS}
    engines["chat"] = StepEngine(Residency.AWAKE, 0.0)  # the first of the group boots awake
    calls, due = _agents(args, seed)
    queued: list[tuple[float, str, int]] = []  # (arrived, model, agent)
    waits: dict[str, list[float]] = {m: [] for m in MODELS}
    wakes, now = 0, 0.0
    while now < args.seconds:
        advance(engines, now)
        for index, call in enumerate(due):
            if call is not None and call[0] <= now:
                queued.append((now, call[1], index))
                due[index] = None
        waiting = collections.Counter(q[1] for q in queued)
        plan = swap.decide(views(engines, waiting, args.wake_s * args.idle_factor), now)
        apply(engines, plan, now, args.wake_s)
        wakes += len(plan.wake)
        for item in list(queued):
            arrived, model, index = item
            engine = engines[model]
            if engine.residency is Residency.AWAKE and model not in plan.closed:
                queued.remove(item)
                waits[model].append(now - arrived + args.first_token_s)
                engine.running.append(now + args.service_s)
                following, think = next(calls[index])
                due[index] = (now + args.service_s + think, following)
        now += args.step_s
    return _figures(args, wakes, waits)


def _agents(
    args: argparse.Namespace, seed: int
) -> tuple[list[Iterator[tuple[str, float]]], list[tuple[float, str] | None]]:
    """Each agent's calls, and per agent its first call (at, model); None later: running."""
    calls = [iter(trace(seed * 100 + i, 100_000)) for i in range(args.agents)]
    due: list[tuple[float, str] | None] = []
    for agent in calls:
        model, think = next(agent)
        due.append((think, model))
    return calls, due


def _figures(args: argparse.Namespace, wakes: int, waits: dict[str, list[float]]) -> dict[str, Any]:
    return {
        "swaps_per_min": round(wakes * 60 / args.seconds, 1),
        "completed": sum(len(v) for v in waits.values()),
        "ttft_s": {
            m: {"p50": percentile(v, 0.5), "p95": percentile(v, 0.95)} for m, v in waits.items()
        },
    }


def run_arrival(args: argparse.Namespace, seed: int) -> dict[str, Any]:
    """The same agents against bench_swap.py's arrival-order swapper: calls in arrival order
    (FIFO), a call for the resident model starts unless one before it waits for a swap, and a
    call for another model waits for the resident's calls to end, then for a wake."""
    resident, ready_at = "chat", 0.0
    running: list[float] = []  # the resident model's calls: end times, s
    calls, due = _agents(args, seed)
    queued: list[tuple[float, str, int]] = []
    waits: dict[str, list[float]] = {m: [] for m in MODELS}
    wakes, now = 0, 0.0
    while now < args.seconds:
        running = [t for t in running if t > now]
        for index, call in enumerate(due):
            if call is not None and call[0] <= now:
                queued.append((now, call[1], index))
                due[index] = None
        while queued and ready_at <= now:
            arrived, model, index = queued[0]
            if model != resident:
                if not running:
                    resident, ready_at, wakes = model, now + args.wake_s, wakes + 1
                break
            queued.pop(0)
            waits[model].append(now - arrived + args.first_token_s)
            running.append(now + args.service_s)
            following, think = next(calls[index])
            due[index] = (now + args.service_s + think, following)
        now += args.step_s
    return _figures(args, wakes, waits)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--seeds", type=int, default=3, help="runs (bench_swap.py's rounds)")
    parser.add_argument("--agents", type=int, default=3)
    parser.add_argument("--wake-s", type=float, default=0.3)
    parser.add_argument("--min-residence-s", type=float, default=5.0)
    parser.add_argument("--max-wait-s", type=float, default=1.0)
    parser.add_argument("--idle-factor", type=float, default=1.0)
    parser.add_argument("--service-s", type=float, default=0.12, help="a 16-token call, s")
    parser.add_argument("--first-token-s", type=float, default=0.02)
    parser.add_argument("--step-s", type=float, default=0.005)
    args = parser.parse_args()
    policies = {
        "llmd": GroupPolicy(1, args.min_residence_s, args.max_wait_s),
        "evict": GroupPolicy(1, 0.0, 0.0),
    }
    runs = {
        name: [run(args, p, seed) for seed in range(args.seeds)] for name, p in policies.items()
    }
    runs["arrival"] = [run_arrival(args, seed) for seed in range(args.seeds)]
    summary: dict[str, Any] = {}
    for name, found in runs.items():
        p95 = {m: [r["ttft_s"][m]["p95"] for r in found if r["ttft_s"][m]["p95"]] for m in MODELS}
        summary[name] = {
            "swaps_per_min_median": statistics.median(r["swaps_per_min"] for r in found),
            "completed_median": statistics.median(r["completed"] for r in found),
            "p95_median": {m: round(statistics.median(v), 2) for m, v in p95.items() if v},
        }
    print(json.dumps({"settings": vars(args), "summary": summary}, indent=2))


if __name__ == "__main__":
    main()
