#!/usr/bin/env python3
"""Measure llmd's memory (RSS) under a flood of large queued requests, and after it drains.

Starts `llmd serve` on the simulator (etc/sim.toml) with 16 engine seats and every request held
`--hold-s` in the engine, so the flood queues in llmd. Each round sends `--requests` (5,000)
completions at once, each body padded to `--body-kb` (500 KB) with a field llmd passes through,
samples llmd's RSS every 20 ms until every request is answered, then reads it once more after
the queue has drained. The idle figure is taken once the tokenizer has loaded. Prints, per
round: the answers by status, the peak RSS over the idle RSS, that growth against
`admission.max_queued_bytes` (the issue's target: under 3x), and the RSS after the drain (flat:
back near the idle figure, not growing round after round). `server.max_connections` is the
shipped one (2,048 requests in progress) unless `--max-connections` says otherwise.

    flock /tmp/llmd-heavy.lock .venv/bin/python scripts/bench_memory.py [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import statistics
import sys
import time
from pathlib import Path

import aiohttp

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support.llmd_process import LlmdProcess  # noqa: E402
from tests.support.model import ensure_tiny_model  # noqa: E402
from tests.support.sim_process import sim_config  # noqa: E402

MIB = 1024 * 1024


def rss_bytes(pid: int) -> int:
    """Resident set size of `pid` (bytes), from /proc/PID/status."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def padded_body(body_kb: int, hold_s: float) -> bytes:
    """A completions request of about `body_kb` KB: a short prompt, a padding field."""
    body = {
        "model": "tiny",
        "prompt": "hi",
        "max_tokens": 4,
        "sim_fault": f"delay:{hold_s}",
        "padding": "x" * (body_kb * 1000),
    }
    return json.dumps(body).encode()


async def flood(url: str, body: bytes, count: int, pid: int) -> tuple[dict[str, int], int]:
    """`count` requests at once; their answers by status and error code ('reset': the
    connection broke before an answer) and the peak RSS of `pid` seen while they ran."""
    statuses: collections.Counter[str] = collections.Counter()
    connector = aiohttp.TCPConnector(limit=0, force_close=True)
    timeout = aiohttp.ClientTimeout(total=900)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def one() -> None:
            headers = {"content-type": "application/json"}
            try:
                async with session.post(url, data=body, headers=headers) as response:
                    answer = await response.read()
                    code = ""
                    if response.status != 200:
                        with contextlib.suppress(ValueError, KeyError, TypeError):
                            code = " " + str(json.loads(answer)["error"]["code"])
                    statuses[f"{response.status}{code}"] += 1
            except (aiohttp.ClientError, OSError):
                statuses["reset"] += 1

        peak = rss_bytes(pid)
        tasks = [asyncio.create_task(one()) for _ in range(count)]
        pending = set(tasks)
        while pending:
            _, pending = await asyncio.wait(pending, timeout=0.02)
            peak = max(peak, rss_bytes(pid))
    return dict(sorted(statuses.items())), peak


def settled_rss(pid: int, seconds: float) -> int:
    """The median RSS of `pid` over `seconds` after the queue has drained."""
    samples = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        samples.append(rss_bytes(pid))
        time.sleep(0.1)
    return int(statistics.median(samples))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--body-kb", type=int, default=500)
    parser.add_argument("--budget-mib", type=int, default=256, help="admission.max_queued_bytes")
    parser.add_argument("--hold-s", type=float, default=0.25)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--max-connections",
        type=int,
        help="server.max_connections (default: the shipped 2,048)",
    )
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    budget = args.budget_mib * MIB
    config = sim_config(
        ensure_tiny_model(),
        admission={"max_in_flight": 16, "max_queued_bytes": budget},
        server={} if args.max_connections is None else {"max_connections": args.max_connections},
    )
    llmd = LlmdProcess.start(config)
    rounds = []
    try:
        llmd.wait_ready(timeout_s=120)
        deadline = time.monotonic() + 120  # the tokenizer loads after ready: idle is after it
        while "tokenizer_loaded" not in llmd.log_path.read_text() and time.monotonic() < deadline:
            time.sleep(0.2)
        pid = llmd.process.pid
        url = llmd.base_url + "/v1/completions"
        body = padded_body(args.body_kb, args.hold_s)
        idle = settled_rss(pid, 2.0)
        print(f"idle RSS {idle / MIB:.0f} MiB; budget {args.budget_mib} MiB; "
              f"{args.requests} x {len(body) / 1000:.0f} KB per round")  # fmt: skip
        for number in range(1, args.rounds + 1):
            started = time.monotonic()
            statuses, peak = asyncio.run(flood(url, body, args.requests, pid))
            seconds = time.monotonic() - started
            after = settled_rss(pid, 3.0)
            row = {
                "round": number,
                "answers": statuses,
                "seconds": round(seconds, 1),
                "peak_rss_mib": round(peak / MIB, 1),
                "growth_mib": round((peak - idle) / MIB, 1),
                "growth_over_budget": round((peak - idle) / budget, 2),
                "rss_after_drain_mib": round(after / MIB, 1),
            }
            rounds.append(row)
            print(json.dumps(row))
    finally:
        llmd.stop()
    result = {"idle_rss_mib": round(idle / MIB, 1), "budget_mib": args.budget_mib,
              "requests": args.requests, "body_bytes": len(body), "rounds": rounds}  # fmt: skip
    if args.output:
        args.output.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
