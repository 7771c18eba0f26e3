"""What observability costs: log lines per second at INFO and llmd's CPU per request at about
200 requests/s against the simulator, and the request observer's own cost per call.

Part 1 (live): `llmd serve` on the simulator (`--zero-latency`) takes an open-loop load of
`--rate` non-streaming chat requests per second for `--seconds`, with `logging.requests` "all"
and "off", alternating `--repeats` times. Reported per run: requests/s completed, llmd's CPU per
request (user + system of the llmd process, from /proc, the engine child excluded), log lines
per second by event, and the time to render /metrics (which takes a Status snapshot).
Part 2 (micro): `Observer.finished` per call, metrics and windows only, and with its log line
(rendered as JSON to /dev/null), and `Observer.rejected`.

Usage: python scripts/bench_observability.py [--rate 200] [--seconds 20] [--repeats 2]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import io
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from llmd.config import LoggingConfig  # noqa: E402
from llmd.logs import configure_logging  # noqa: E402
from llmd.telemetry.observer import Observer  # noqa: E402
from tests.support.exchanges import finished_exchange  # noqa: E402
from tests.support.llmd_process import LlmdProcess  # noqa: E402
from tests.support.model import ensure_tiny_model  # noqa: E402
from tests.support.sim_process import sim_config  # noqa: E402

CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 16}
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process `pid` (not its children)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


async def open_loop(
    base_url: str, rate: float, seconds: float
) -> tuple[collections.Counter[int], float]:
    """Send `rate` requests/s for `seconds` whatever the answers' pace; (count by HTTP status,
    0 for a failed connection; elapsed seconds)."""
    statuses: collections.Counter[int] = collections.Counter()
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(base_url, connector=connector) as session:

        async def one() -> None:
            try:
                async with session.post("/v1/chat/completions", json=CHAT) as response:
                    await response.read()
                    statuses[response.status] += 1
            except aiohttp.ClientError:
                statuses[0] += 1

        tasks = []
        start = time.monotonic()
        total = int(rate * seconds)
        for i in range(total):
            delay = start + i / rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one()))
        await asyncio.gather(*tasks)
        elapsed = time.monotonic() - start
    return statuses, elapsed


def live_run(requests_log: str, rate: float, seconds: float) -> dict[str, Any]:
    config = sim_config(
        ensure_tiny_model(), ("--zero-latency",), logging={"requests": requests_log}
    )
    llmd = LlmdProcess.start(config)
    try:
        llmd.wait_ready(timeout_s=60)
        asyncio.run(open_loop(llmd.base_url, 20, 1.0))  # warm up: tokenizer, connections
        lines_before = len(llmd.log_path.read_text().splitlines())
        cpu_before = cpu_seconds(llmd.process.pid)
        statuses, elapsed = asyncio.run(open_loop(llmd.base_url, rate, seconds))
        ok = statuses.pop(200, 0)
        failed = sum(statuses.values())
        cpu = cpu_seconds(llmd.process.pid) - cpu_before
        lines = llmd.log_path.read_text().splitlines()[lines_before:]
        events = collections.Counter(json.loads(line)["event"] for line in lines)
        scrape = _timed_get(llmd.base_url + "/metrics")
    finally:
        llmd.stop()
    return {
        "requests.log": requests_log,
        "ok": ok,
        "failed": failed,
        "failed_by_status": dict(statuses),
        "req_per_s": ok / elapsed,
        "cpu_ms_per_request": 1000 * cpu / max(1, ok + failed),
        "llmd_cpu_share": cpu / elapsed,
        "log_lines_per_s": len(lines) / elapsed,
        "log_events": dict(events),
        "metrics_scrape_ms": scrape,
    }


def _timed_get(url: str) -> float:
    import httpx

    with httpx.Client() as client:
        client.get(url)
        start = time.perf_counter()
        for _ in range(20):
            client.get(url)
        return 1000 * (time.perf_counter() - start) / 20


def micro(iterations: int) -> dict[str, float]:
    """Microseconds per observer call, best of 5 rounds."""
    sink = open(os.devnull, "w")  # noqa: SIM115
    configure_logging(LoggingConfig(format="json"), stream=sink)
    results = {}
    tenants = [f"tenant-{i}" for i in range(30)]  # past top_tenants: some fold into "other"
    exchanges = [
        finished_exchange(tenant=tenants[i % 30], prompt_tokens=50 * (i % 200))
        for i in range(iterations)
    ]
    for name, log_requests in (
        ("finished, metrics+windows", "off"),
        ("finished + log line", "all"),
    ):
        observer = Observer(log_requests=log_requests)
        best = float("inf")
        for _ in range(5):
            start = time.perf_counter()
            for exchange in exchanges:
                observer.finished(exchange)
            best = min(best, time.perf_counter() - start)
        results[name] = 1e6 * best / iterations
    observer = Observer(log_requests="off")
    start = time.perf_counter()
    for i in range(iterations):
        observer.rejected(f"r{i}", 429, "queue_full", 0.0)
    results["rejected, metrics only"] = 1e6 * (time.perf_counter() - start) / iterations
    buffer = io.StringIO()
    configure_logging(LoggingConfig(format="json"), stream=buffer)
    sink.close()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=200.0, help="requests per second")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--iterations", type=int, default=20_000, help="micro-benchmark calls")
    parser.add_argument(
        "--repeats", type=int, default=2, help="live runs per mode, alternating (CPU is noisy)"
    )
    args = parser.parse_args()

    print("## Observer per call (µs, best of 5)")
    for name, micros in micro(args.iterations).items():
        print(f"{name:<28} {micros:6.1f}")
    print()
    print(f"## llmd on the simulator (--zero-latency), {args.rate:g} req/s for {args.seconds:g} s")
    header = "requests log | req/s  | failed | llmd CPU/request | llmd CPU | log lines/s | /metrics"
    print(header)
    print("-" * len(header))
    for mode in ("all", "off") * args.repeats:
        r = live_run(mode, args.rate, args.seconds)
        print(
            f"{mode:<12} | {r['req_per_s']:6.1f} | {r['failed']:6d} | "
            f"{r['cpu_ms_per_request']:13.2f} ms | {100 * r['llmd_cpu_share']:6.1f}% | "
            f"{r['log_lines_per_s']:11.1f} | {r['metrics_scrape_ms']:5.1f} ms"
        )
        print(f"{'':<12}   log events: {r['log_events']}")
        if r["failed"]:
            print(f"{'':<12}   failed by status (0: connection): {r['failed_by_status']}")


if __name__ == "__main__":
    main()
