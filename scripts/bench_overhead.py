"""llmd's own latency and CPU per request on the zero-latency simulator, at a fixed request rate.

Boots `llmd serve` with etc/sim.toml and the simulator's `--zero-latency` (it answers at once,
so what is left is the HTTP path), and sends non-streamed completions (16 tokens, ignore_eos)
at a fixed rate (`--rate`, 200/s), open loop (each request starts on its schedule whatever the
others do), for `--seconds` per run: straight to the simulator's Unix socket and through llmd,
the order alternating by round. Per run: latency p50/p99, how late the client started
requests (its own lag), llmd's CPU (user + system of its own process, the simulator child
excluded) per request. Per round it prints the latency llmd adds (p50 and p99 of llmd's run
minus the direct run's), then the median (min-max) over rounds; issue 20's targets are
p50 <= 0.5 ms and p99 <= 2 ms. `--set` changes a setting of llmd's, to measure what it costs.

    flock /tmp/llmd-heavy.lock .venv/bin/python scripts/bench_overhead.py --rounds 3 \
        [--rate 200] [--seconds 15] [--output docs/bench/overhead-sim-DATE.json]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from llmd.telemetry.windows import percentile  # noqa: E402
from tests.support.configs import config_sections  # noqa: E402
from tests.support.llmd_process import LlmdProcess  # noqa: E402
from tests.support.machine_load import load_average  # noqa: E402
from tests.support.model import ensure_tiny_model  # noqa: E402
from tests.support.profiling import py_spy_record, report_profile  # noqa: E402
from tests.support.rounds import cpu_seconds, spread, write_record  # noqa: E402
from tests.support.sim_process import sim_config  # noqa: E402

Profile = tuple[str | None, Path]
BODY = {"model": "tiny", "prompt": "The quick brown fox", "max_tokens": 16, "ignore_eos": True}


def ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000


async def open_loop(
    session: aiohttp.ClientSession, url: str, rate: float, seconds: float
) -> dict[str, Any]:
    """`rate` requests per second for `seconds`, each on its own schedule; latencies (s), the
    client's lateness in starting them (s), and failures."""
    latencies: list[float] = []
    lateness: list[float] = []
    failures = 0

    async def one(due: float) -> None:
        nonlocal failures
        start = time.perf_counter()
        lateness.append(start - due)
        async with session.post(url + "/v1/completions", json=BODY) as response:
            await response.read()
            if response.status != 200:
                failures += 1
                return
        latencies.append(time.perf_counter() - start)

    tasks = []
    begin = time.perf_counter() + 0.05
    for index in range(int(rate * seconds)):
        due = begin + index / rate
        await asyncio.sleep(max(0.0, due - time.perf_counter()))
        tasks.append(asyncio.create_task(one(due)))
    await asyncio.gather(*tasks)
    return {"latencies": latencies, "lateness": lateness, "failures": failures}


async def run_path(
    name: str, url: str, socket: Path, pid: int, rate: float, seconds: float, profile: Profile
) -> dict[str, Any]:
    """One run against `name`; its figures in ms, and llmd's CPU per request in µs. With a
    `profile` (py-spy's path, the output file), llmd is sampled during the run."""
    connector = (
        aiohttp.UnixConnector(path=str(socket), limit=0)
        if name == "direct"
        else aiohttp.TCPConnector(limit=0)
    )
    async with aiohttp.ClientSession(connector=connector) as session:
        for _ in range(50):  # warm the connection pool and both processes
            async with session.post(url + "/v1/completions", json=BODY) as response:
                await response.read()
        load_before = load_average()
        cpu0 = cpu_seconds(pid)
        with py_spy_record(profile[0], pid, profile[1]):
            got = await open_loop(session, url, rate, seconds)
        cpu = cpu_seconds(pid) - cpu0
    done = len(got["latencies"])
    return {
        "path": name,
        "load_before": load_before,
        "requests": done,
        "failures": got["failures"],
        "p50_ms": ms(percentile(got["latencies"], 50)),
        "p99_ms": ms(percentile(got["latencies"], 99)),
        "client_late_p99_ms": ms(percentile(got["lateness"], 99)),
        "llmd_cpu_us_per_request": cpu / done * 1e6 if done else None,
    }


async def measure(
    llmd: LlmdProcess, rounds: int, rate: float, seconds: float, profile: Profile
) -> list[Any]:
    """`rounds` rounds of both paths, alternating which goes first; one record per round.
    When `profile` names py-spy, one more run through llmd (not counted) is profiled."""
    paths = {"direct": "http://engine", "llmd": llmd.base_url}
    records = []
    for round_no in range(1, rounds + 1):
        order = ["direct", "llmd"] if round_no % 2 else ["llmd", "direct"]
        record: dict[str, Any] = {
            "round": round_no,
            "started": datetime.datetime.now().isoformat(timespec="seconds"),
        }
        for name in order:
            record[name] = await run_path(
                name,
                paths[name],
                llmd.engine_socket,
                llmd.process.pid,
                rate,
                seconds,
                (None, profile[1]),
            )
        record["added_p50_ms"] = record["llmd"]["p50_ms"] - record["direct"]["p50_ms"]
        record["added_p99_ms"] = record["llmd"]["p99_ms"] - record["direct"]["p99_ms"]
        print(json.dumps(record), flush=True)
        records.append(record)
    if profile[0]:
        pid = llmd.process.pid
        await run_path("llmd", llmd.base_url, llmd.engine_socket, pid, rate, seconds, profile)
    return records


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rate", type=float, default=200.0, help="requests per second")
    parser.add_argument("--seconds", type=float, default=15.0, help="per run")
    parser.add_argument("--output", type=Path)
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="a setting over etc/sim.toml's, e.g. logging.requests=off (to measure what it costs)",
    )
    parser.add_argument("--py-spy", help="py-spy's path: profile llmd in an extra run")
    parser.add_argument("--profile", type=Path, default=Path("/tmp/llmd-overhead.collapsed"))
    args = parser.parse_args()
    config = sim_config(ensure_tiny_model(), ["--zero-latency"], **config_sections(args.set))
    with LlmdProcess.running(config, "llmd-overhead-") as llmd:
        llmd.wait_tokenizer()
        profile = (args.py_spy, args.profile)
        records = asyncio.run(measure(llmd, args.rounds, args.rate, args.seconds, profile))
    print(f"\n{args.rate:.0f} requests/s, {args.seconds:.0f} s per run; median (min-max):")
    for name in ("direct", "llmd"):
        rows = [r[name] for r in records]
        print(
            f"  {name:<6} p50 {spread([r['p50_ms'] for r in rows], 2)} ms, "
            f"p99 {spread([r['p99_ms'] for r in rows], 2)} ms, "
            f"client late p99 {spread([r['client_late_p99_ms'] for r in rows], 2)} ms, "
            f"failures {sum(r['failures'] for r in rows)}"
        )
    print(f"  added p50 {spread([r['added_p50_ms'] for r in records], 2)} ms (target <= 0.5)")
    print(f"  added p99 {spread([r['added_p99_ms'] for r in records], 2)} ms (target <= 2)")
    cpu = [r["llmd"]["llmd_cpu_us_per_request"] for r in records]
    print(f"  llmd CPU per request {spread(cpu)} µs")
    print(
        "  load before each run "
        + spread([r[n]["load_before"] for r in records for n in ("direct", "llmd")], 2)
    )
    title = f"py-spy, llmd in an extra run ({args.profile})"
    shares = report_profile(args.py_spy, args.profile, title)
    write_record(args.output, settings=args.set, rounds=records, profile=shares)


if __name__ == "__main__":
    main()
