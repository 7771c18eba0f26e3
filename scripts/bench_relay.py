"""Measure what llmd's relay costs, against the real engine, in one run.

Three paths to the same vLLM child (the one `llmd serve` supervises, on its Unix socket):
  direct  client → vLLM's Unix socket
  splice  client → TCP → a plain asyncio (uvloop) byte splice → vLLM's socket: the floor for
          any relay
  llmd    client → TCP → llmd's proxy → vLLM's socket
Reports added latency (p50, non-streaming, 16 tokens) at concurrency 1 and 32, streamed tokens/s
at 64 concurrent streams, and the relay process's own CPU time per streamed token (user + system,
its children excluded). On 2 cores every relay takes CPU from a CPU-bound engine: read tokens/s
ratios against the splice's, not against 1.0.

    .venv/bin/python scripts/bench_relay.py [--config etc/demo.toml] [--output FILE.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import httpx

REPO = Path(__file__).resolve().parents[1]
TICKS = os.sysconf("SC_CLK_TCK")


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of `pid` itself (not its children), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


async def splice_server(listen_port: int, upstream: str) -> None:
    """Accept TCP connections and pipe bytes both ways to the Unix socket `upstream`."""

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except OSError:
            pass
        finally:
            writer.close()

    async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        up_r, up_w = await asyncio.open_unix_connection(upstream)
        await asyncio.gather(pipe(client_r, up_w), pipe(up_r, client_w))

    server = await asyncio.start_server(handle, "127.0.0.1", listen_port)
    async with server:
        await server.serve_forever()


def session_for(path: str, target: str) -> aiohttp.ClientSession:
    connector = (
        aiohttp.UnixConnector(path=target, limit=0)
        if path == "direct"
        else aiohttp.TCPConnector(limit=0)
    )
    return aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=600))


async def one_request(
    session: aiohttp.ClientSession, url: str, max_tokens: int, stream: bool
) -> tuple[float, int]:
    """One completion; (seconds, generated tokens from the usage the engine reports)."""
    body: dict[str, Any] = {
        "model": "tiny",
        "prompt": "The quick brown fox",
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "stream": stream,
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    start = time.perf_counter()
    tokens = 0
    async with session.post(url + "/v1/completions", json=body) as response:
        assert response.status == 200, await response.text()
        if stream:
            async for line in response.content:
                if line.startswith(b"data: {") and b'"usage"' in line:
                    usage = json.loads(line[6:]).get("usage")
                    tokens = usage["completion_tokens"] if usage else tokens
        else:
            tokens = (await response.json())["usage"]["completion_tokens"]
    return time.perf_counter() - start, tokens


async def run_load(
    path: str, target: str, url: str, concurrency: int, requests: int, max_tokens: int, stream: bool
) -> dict[str, Any]:
    """`requests` requests, `concurrency` at a time; latencies and token throughput."""
    latencies: list[float] = []
    tokens = 0
    queue = iter(range(requests))
    async with session_for(path, target) as session:

        async def worker() -> None:
            nonlocal tokens
            for _ in queue:
                seconds, count = await one_request(session, url, max_tokens, stream)
                latencies.append(seconds)
                tokens += count

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = time.perf_counter() - start
    return {
        "p50_ms": statistics.median(latencies) * 1000,
        "tokens": tokens,
        "wall_s": wall,
        "tokens_per_s": tokens / wall,
    }


async def measure(paths: dict[str, tuple[str, str, int | None]], rounds: int) -> dict[str, Any]:
    results: dict[str, Any] = {
        name: {"c1": [], "c32": [], "stream64": [], "cpu_us_per_token": []} for name in paths
    }
    for _ in range(rounds):
        for name, (target, url, pid) in paths.items():
            results[name]["c1"].append(
                (await run_load(name, target, url, 1, 20, 16, False))["p50_ms"]
            )
            results[name]["c32"].append(
                (await run_load(name, target, url, 32, 96, 16, False))["p50_ms"]
            )
            cpu0 = process_cpu_s(pid) if pid else 0.0
            load = await run_load(name, target, url, 64, 64, 200, True)
            results[name]["stream64"].append(load["tokens_per_s"])
            if pid:
                results[name]["cpu_us_per_token"].append(
                    (process_cpu_s(pid) - cpu0) / load["tokens"] * 1e6
                )
    return {
        name: {key: statistics.median(values) if values else None for key, values in row.items()}
        for name, row in results.items()
    }


def start_llmd(config: Path, port: int, runtime_dir: Path) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "llmd.cli",
            "serve",
            "--config",
            str(config),
            "--listen",
            f"127.0.0.1:{port}",
            "--runtime-dir",
            str(runtime_dir),
        ],
        stdout=subprocess.DEVNULL,
        stderr=(runtime_dir.parent / "llmd.log").open("wb"),
    )
    deadline = time.monotonic() + 400
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/ready", timeout=2).status_code == 200:
                return process
        except httpx.HTTPError:
            time.sleep(0.5)
    process.terminate()
    raise SystemExit("llmd did not become ready; see " + str(runtime_dir.parent / "llmd.log"))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", type=Path, default=REPO / "etc" / "demo.toml")
    parser.add_argument(
        "--rounds", type=int, default=2, help="interleaved rounds; medians are reported"
    )
    parser.add_argument("--output", type=Path)
    parser.add_argument(
        "--splice-server", nargs=2, metavar=("PORT", "SOCKET"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.splice_server:
        import uvloop

        uvloop.run(splice_server(int(args.splice_server[0]), args.splice_server[1]))
        return

    work = Path(tempfile.mkdtemp(prefix="llmd-bench-", dir="/tmp"))
    runtime_dir = work / "run"
    llmd_port, splice_port = 18471, 18472
    llmd = start_llmd(args.config.resolve(), llmd_port, runtime_dir)
    engine_socket = str(runtime_dir / "engine.sock")
    splice = subprocess.Popen(
        [sys.executable, __file__, "--splice-server", str(splice_port), engine_socket]
    )
    time.sleep(1.0)
    try:
        paths = {
            "direct": (engine_socket, "http://engine", None),
            "splice": ("", f"http://127.0.0.1:{splice_port}", splice.pid),
            "llmd": ("", f"http://127.0.0.1:{llmd_port}", llmd.pid),
        }
        results = asyncio.run(measure(paths, args.rounds))
    finally:
        splice.terminate()
        llmd.terminate()
        llmd.wait(timeout=60)
    direct = results["direct"]
    print(
        f"{'path':<8} {'p50 c=1':>9} {'added':>7} {'p50 c=32':>9} {'added':>7} {'tok/s @64':>10} "
        f"{'vs splice':>9} {'CPU/token':>10}"
    )
    for name, row in results.items():
        cpu = f"{row['cpu_us_per_token']:.0f} µs" if row["cpu_us_per_token"] is not None else "-"
        print(
            f"{name:<8} {row['c1']:>7.1f}ms {row['c1'] - direct['c1']:>5.1f}ms "
            f"{row['c32']:>7.1f}ms "
            f"{row['c32'] - direct['c32']:>5.1f}ms {row['stream64']:>10.0f} "
            f"{row['stream64'] / results['splice']['stream64']:>9.2f} {cpu:>10}"
        )
    if args.output:
        args.output.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
