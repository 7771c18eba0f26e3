"""Two simulator engines in one pool against one, and prefix affinity, through `llmd serve`.

**Pool.** The same load against llmd with one sim engine (`main`) and with a pool of two
(`pa`, `pb`, the same served name): `--users` clients each send streaming chats back to back
until `--requests` have been sent, `--max-tokens` output each, prompts without a shared prefix.
Per round: output tokens/s (client-side: tokens received / wall time of the load) and TTFT p50
and p95; then the two-engine / one-engine ratios. Each engine runs `--sim-args` (default
`--max-num-seqs 8`: one engine is saturated by 16 users and llmd queues the rest, so the pool
has twice the seats); both sims, llmd and the clients share this machine's cores.

**Affinity.** A pool of two with a shared-prefix workload: `--groups` prefix groups (a long
system prompt each), requests of all groups interleaved, `--users` at once, with prefix
affinity on (`routing.prefix_chars` 64) and off (0: least load only). The figure is llmd's
placement, not prefix-cache hits (the shared prompt is shorter than one KV block of the
simulator, so its prefix cache could not hit either way): **locality**, the share of requests
that ran on their group's most used backend (1.0: every group on one backend, the most a
prefix cache could be used; 0.5: spread evenly over two), and the split of requests between
the two engines.

Rounds alternate the order of the set-ups; the report gives each figure's median and range.

    .venv/bin/python scripts/bench_fleet.py [--rounds 3] [--output docs/bench/fleet-sim.json]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support.configs import multi_sim_config  # noqa: E402
from tests.support.llmd_process import LlmdProcess  # noqa: E402
from tests.support.model import ensure_tiny_model  # noqa: E402

SYSTEM = "You are the assistant of team {g}. Answer in one line, plainly, citing sources. " * 2


def percentile(values: list[float], q: float) -> float:
    """The q-quantile (0..1) by linear interpolation (statistics.quantiles, inclusive)."""
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[round(q * 100) - 1]


async def run_load(
    llmd: LlmdProcess, bodies: list[dict[str, Any]], users: int
) -> tuple[float, list[float]]:
    """Send `bodies` with `users` at once (streaming, request i with x-request-id bench-i);
    output tokens/s over the whole load and each request's TTFT (s)."""
    queue = collections.deque(enumerate(bodies))
    ttfts: list[float] = []
    tokens = 0
    url = llmd.base_url + "/v1/chat/completions"

    async def user(client: httpx.AsyncClient) -> None:
        nonlocal tokens
        while queue:
            index, body = queue.popleft()
            started = time.monotonic()
            first: float | None = None
            headers = {"x-request-id": f"bench-{index}"}
            async with client.stream("POST", url, json=body, headers=headers) as response:
                response.raise_for_status()
                async for line in response.aiter_lines():
                    if not line.startswith("data: ") or line == "data: [DONE]":
                        continue
                    chunk = json.loads(line.removeprefix("data: "))
                    if chunk.get("choices") and chunk["choices"][0]["delta"].get("content"):
                        first = first or time.monotonic()
                        tokens += 1
            ttfts.append((first or time.monotonic()) - started)

    async with httpx.AsyncClient(timeout=120) as client:
        started = time.monotonic()
        await asyncio.gather(*(user(client) for _ in range(users)))
        elapsed = time.monotonic() - started
    return tokens / elapsed, ttfts


def backends_of(llmd: LlmdProcess) -> dict[str, str]:
    """Request id -> backend, from llmd's request log lines (read once llmd has stopped: a
    request's line is written just after its client has the last byte)."""
    found = {}
    for line in llmd.log_path.read_text().splitlines():
        if '"request_finished"' in line:
            entry = json.loads(line)
            if entry.get("backend"):
                found[entry["request_id"]] = entry["backend"]
    return found


def start(engines: Mapping[str, tuple[str, Sequence[str]]], prefix_chars: int) -> LlmdProcess:
    config = multi_sim_config(ensure_tiny_model(), engines, routing={"prefix_chars": prefix_chars})
    llmd = LlmdProcess.start(config)
    llmd.wait_ready(timeout_s=120)
    return llmd


def chats(count: int, max_tokens: int, groups: int = 0) -> list[dict[str, Any]]:
    """`count` streaming chats; with `groups`, request i carries group i % groups's system
    prompt (a shared prefix), else a short unique prompt."""
    bodies = []
    for i in range(count):
        messages = [{"role": "user", "content": f"Question {i}: what is {i} squared?"}]
        if groups:
            messages.insert(0, {"role": "system", "content": SYSTEM.format(g=i % groups)})
        bodies.append(
            {
                "model": "tiny",
                "messages": messages,
                "max_tokens": max_tokens,
                "stream": True,
                "ignore_eos": True,
            }
        )
    return bodies


async def pool_round(args: argparse.Namespace, first: str) -> dict[str, dict[str, float]]:
    sim = tuple(args.sim_args.split())
    setups = {"one": {"main": ("tiny", sim)}, "two": {"pa": ("tiny", sim), "pb": ("tiny", sim)}}
    order = ["one", "two"] if first == "one" else ["two", "one"]
    result = {}
    for name in order:
        llmd = start(setups[name], prefix_chars=0)
        try:
            rate, ttfts = await run_load(llmd, chats(args.requests, args.max_tokens), args.users)
        finally:
            llmd.stop()
        result[name] = {
            "tokens_per_s": rate,
            "ttft_p50_s": percentile(ttfts, 0.5),
            "ttft_p95_s": percentile(ttfts, 0.95),
        }
    return result


async def affinity_round(args: argparse.Namespace, first: str) -> dict[str, dict[str, float]]:
    order = [("on", 64), ("off", 0)] if first == "on" else [("off", 0), ("on", 64)]
    result = {}
    for name, prefix_chars in order:
        llmd = start({"pa": ("tiny", ()), "pb": ("tiny", ())}, prefix_chars)
        try:
            bodies = chats(args.requests, args.max_tokens, groups=args.groups)
            await run_load(llmd, bodies, args.users)
        finally:
            llmd.stop()
        backends = backends_of(llmd)
        by_group: dict[int, collections.Counter[str]] = collections.defaultdict(collections.Counter)
        for i in range(len(bodies)):
            backend = backends.get(f"bench-{i}")
            if backend is not None:
                by_group[i % args.groups][backend] += 1
        placed = sum(sum(c.values()) for c in by_group.values())
        home = sum(max(c.values()) for c in by_group.values())
        split = collections.Counter(backends.values())
        result[name] = {
            "locality": home / placed,
            "share_pa": split["pa"] / max(sum(split.values()), 1),
            "placed": placed,
        }
    return result


def summary(rounds: list[dict[str, dict[str, float]]]) -> dict[str, dict[str, list[float]]]:
    """Per set-up and figure: [median, min, max] over rounds."""
    out: dict[str, dict[str, list[float]]] = {}
    for setup in rounds[0]:
        out[setup] = {}
        for figure in rounds[0][setup]:
            values = [r[setup][figure] for r in rounds]
            out[setup][figure] = [statistics.median(values), min(values), max(values)]
    return out


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=96)
    parser.add_argument("--users", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--groups", type=int, default=8)
    parser.add_argument(
        "--sim-args",
        default="--max-num-seqs 8",
        help="simulator flags of every engine in the pool runs (default: 8 sequences at once, "
        "so that one engine is saturated by --users 16 and llmd queues the rest)",
    )
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    pool, affinity = [], []
    for i in range(args.rounds):
        pool.append(await pool_round(args, "one" if i % 2 == 0 else "two"))
        ratio = pool[-1]["two"]["tokens_per_s"] / pool[-1]["one"]["tokens_per_s"]
        p95 = pool[-1]["two"]["ttft_p95_s"] / pool[-1]["one"]["ttft_p95_s"]
        pool[-1]["ratio"] = {"tokens_per_s": ratio, "ttft_p95": p95}
        affinity.append(await affinity_round(args, "on" if i % 2 == 0 else "off"))
        print(f"round {i + 1}: pool {json.dumps(pool[-1])}\n  affinity {json.dumps(affinity[-1])}")
    report = {
        "command": " ".join(sys.argv),
        "settings": vars(args) | {"output": str(args.output)},
        "pool_rounds": pool,
        "affinity_rounds": affinity,
        "pool": summary(pool),
        "affinity": summary(affinity),
    }
    print(json.dumps({"pool": report["pool"], "affinity": report["affinity"]}, indent=1))
    if args.output:
        args.output.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    asyncio.run(main())
