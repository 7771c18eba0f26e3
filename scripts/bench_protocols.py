"""What llmd adds per protocol: the same generations as chat completions, as Responses and as
Anthropic Messages, straight to the engine's Unix socket and through llmd, in one run.

    chat        POST /v1/chat/completions (streams with include_usage)
    responses   POST /v1/responses, store: false (as Codex CLI sends it)
    stored      POST /v1/responses, store left at its default (true): llmd keeps each answer
    messages    POST /v1/messages (as Claude Code sends it, less its tools)

For each protocol and path: the p50 of a non-streamed request (16 tokens) at concurrency 1 and
of a stream's time to first token, tokens/s with 32 streams of 200 tokens (`ignore_eos`),
llmd's whole CPU time per streamed token meanwhile (user + system of its process, its engine
excluded), and the events and socket reads per token the client saw (how the engine frames
each protocol's tokens, which llmd's cost per token follows). Each round runs the protocols
and paths in an order rotated by one; per round it prints llmd's added latency (llmd minus
direct) and each protocol's CPU per token against chat's, then the median (min-max) over
rounds (issue 34's goal: Responses and Messages the same as chat).

    flock /tmp/llmd-heavy.lock .venv/bin/python scripts/bench_protocols.py --rounds 3 \
        [--config etc/demo.toml] [--output docs/bench/protocols-DATE.json]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import statistics
import sys
import time
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support.configs import demo_config, shipped_config  # noqa: E402
from tests.support.llmd_process import LlmdProcess, short_tmpdir  # noqa: E402
from tests.support.machine_load import load_average  # noqa: E402
from tests.support.model import ensure_tiny_model  # noqa: E402
from tests.support.rounds import cpu_seconds, spread, write_record  # noqa: E402

STREAMS = 32
PROMPT = "The quick brown fox jumps over the lazy dog."


def chat_body(tokens: int, stream: bool) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": "tiny",
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": tokens,
        "ignore_eos": True,
        "stream": stream,
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body


def responses_body(store: bool) -> Callable[[int, bool], dict[str, Any]]:
    def body(tokens: int, stream: bool) -> dict[str, Any]:
        request = {"model": "tiny", "input": PROMPT, "max_output_tokens": tokens}
        request |= {"ignore_eos": True, "stream": stream}
        return request if store else {**request, "store": False}

    return body


def messages_body(tokens: int, stream: bool) -> dict[str, Any]:
    return {
        "model": "tiny",
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": tokens,
        "ignore_eos": True,
        "stream": stream,
    }


def messages_token(line: bytes) -> bool:
    """A Messages stream's text delta (not message_start or the block's start)."""
    return b'"content_block_delta"' in line


def messages_usage(event: dict[str, Any]) -> int | None:
    """A whole message's or message_delta's output tokens (message_start says 0: None)."""
    usage = event.get("usage") or {}
    return usage.get("output_tokens") or None


def chat_token(line: bytes) -> bool:
    """A chat stream's event that carries generated text (not the role delta)."""
    return b'"content":"' in line and b'"role"' not in line


def responses_token(line: bytes) -> bool:
    """A Responses stream's delta event (not response.created, which comes before any token)."""
    return b'.delta"' in line


def chat_usage(event: dict[str, Any]) -> int | None:
    usage = event.get("usage")
    return usage["completion_tokens"] if usage else None


def responses_usage(event: dict[str, Any]) -> int | None:
    response = event.get("response") if event.get("type") == "response.completed" else event
    usage = (response or {}).get("usage")
    return usage["output_tokens"] if usage else None


# name: (path, body(tokens, stream), output tokens from a whole answer or a stream's event,
# whether a stream's data line carries a token)
PROTOCOLS: dict[str, tuple[str, Callable[[int, bool], dict[str, Any]], Any, Any]] = {
    "chat": ("/v1/chat/completions", chat_body, chat_usage, chat_token),
    "responses": ("/v1/responses", responses_body(False), responses_usage, responses_token),
    "stored": ("/v1/responses", responses_body(True), responses_usage, responses_token),
    "messages": ("/v1/messages", messages_body, messages_usage, messages_token),
}


async def one_request(
    session: aiohttp.ClientSession, url: str, protocol: str, tokens: int, stream: bool
) -> tuple[float, float, int, int, int]:
    """(seconds to the first token or the whole answer, seconds in all, output tokens, a
    stream's events, the reads it arrived in)."""
    path, body, usage_of, is_token = PROTOCOLS[protocol]
    start = time.perf_counter()
    first = 0.0
    count = events = reads = 0
    async with session.post(url + path, json=body(tokens, stream)) as response:
        assert response.status == 200, await response.text()
        if not stream:
            count = usage_of(await response.json()) or 0
            first = time.perf_counter() - start
        else:
            async for chunk in response.content.iter_any():
                reads += 1
                for line in chunk.split(b"\n"):
                    if not line.startswith(b"data: {"):
                        continue
                    events += 1
                    if not first and is_token(line):
                        first = time.perf_counter() - start
                    if b'"usage"' in line:
                        count = usage_of(json.loads(line[6:])) or count
    return first, time.perf_counter() - start, count, events, reads


async def run_load(
    session: aiohttp.ClientSession,
    url: str,
    protocol: str,
    concurrency: int,
    requests: int,
    tokens: int,
    stream: bool,
) -> dict[str, float]:
    """`requests` requests, `concurrency` at a time: p50s and output tokens/s."""
    firsts: list[float] = []
    totals: list[float] = []
    generated = events = reads = 0
    queue = iter(range(requests))

    async def worker() -> None:
        nonlocal generated, events, reads
        for _ in queue:
            answer = await one_request(session, url, protocol, tokens, stream)
            firsts.append(answer[0])
            totals.append(answer[1])
            generated += answer[2]
            events += answer[3]
            reads += answer[4]

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    wall = time.perf_counter() - start
    return {
        "first_p50_ms": statistics.median(firsts) * 1000,
        "p50_ms": statistics.median(totals) * 1000,
        "tokens": generated,
        "tokens_per_s": generated / wall,
        "events_per_token": events / max(generated, 1),
        "reads_per_token": reads / max(generated, 1),
    }


def session_for(target: str) -> aiohttp.ClientSession:
    connector = (
        aiohttp.UnixConnector(path=target, limit=0) if target else aiohttp.TCPConnector(limit=0)
    )
    return aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=600))


async def one_path(target: str, url: str, protocol: str, pid: int | None) -> dict[str, Any]:
    """One protocol on one path: p50 of a whole answer (c=1), TTFT p50 of a stream (c=1),
    tokens/s at STREAMS streams and llmd's CPU per streamed token meanwhile."""
    async with session_for(target) as session:
        whole = await run_load(session, url, protocol, 1, 20, 16, False)
        ttft = await run_load(session, url, protocol, 1, 20, 16, True)
        cpu0 = cpu_seconds(pid) if pid else 0.0
        load = await run_load(session, url, protocol, STREAMS, 2 * STREAMS, 200, True)
        cpu = (cpu_seconds(pid) - cpu0) / load["tokens"] * 1e6 if pid else None
    return {
        "whole_p50_ms": whole["p50_ms"],
        "ttft_p50_ms": ttft["first_p50_ms"],
        "tokens_per_s": load["tokens_per_s"],
        "tokens": load["tokens"],
        "cpu_us_per_token": cpu,
        "events_per_token": load["events_per_token"],
        "reads_per_token": load["reads_per_token"],
    }


async def measure(llmd: LlmdProcess, rounds: int) -> list[dict[str, Any]]:
    """`rounds` rounds of every protocol on both paths, the order rotated each round."""
    paths = {
        "direct": (str(llmd.engine_socket), "http://engine", None),
        "llmd": ("", llmd.base_url, llmd.process.pid),
    }
    runs = [(protocol, path) for protocol in PROTOCOLS for path in paths]
    records = []
    for round_no in range(rounds):
        shift = round_no % len(runs)
        record: dict[str, Any] = {
            "round": round_no + 1,
            "started": datetime.datetime.now().isoformat(timespec="seconds"),
        }
        for protocol, path in runs[shift:] + runs[:shift]:
            target, url, pid = paths[path]
            load = load_average()
            figures = await one_path(target, url, protocol, pid)
            record.setdefault(protocol, {})[path] = figures | {"load": load}
        for protocol in PROTOCOLS:
            direct, relayed = record[protocol]["direct"], record[protocol]["llmd"]
            record[protocol]["added"] = {
                "whole_p50_ms": relayed["whole_p50_ms"] - direct["whole_p50_ms"],
                "ttft_p50_ms": relayed["ttft_p50_ms"] - direct["ttft_p50_ms"],
                "tokens_per_s_ratio": relayed["tokens_per_s"] / direct["tokens_per_s"],
                "cpu_over_chat": relayed["cpu_us_per_token"]
                / record.get("chat", {}).get("llmd", relayed)["cpu_us_per_token"],
            }
        print(json.dumps(record), flush=True)
        records.append(record)
    return records


def print_summary(records: list[dict[str, Any]]) -> None:
    """Per protocol, median (min-max) over rounds: llmd's added p50s, tokens/s through llmd
    against direct, llmd's CPU per streamed token and its ratio to chat's."""
    print(
        f"\n{'protocol':<10} {'added whole p50 ms':>22} {'added TTFT p50 ms':>22} "
        f"{'tok/s llmd/direct':>20} {'llmd CPU µs/token':>20} {'CPU / chat':>18}"
    )
    for protocol in PROTOCOLS:
        added = [r[protocol]["added"] for r in records]
        cpu = [r[protocol]["llmd"]["cpu_us_per_token"] for r in records]
        print(
            f"{protocol:<10} {spread([a['whole_p50_ms'] for a in added], 2):>22} "
            f"{spread([a['ttft_p50_ms'] for a in added], 2):>22} "
            f"{spread([a['tokens_per_s_ratio'] for a in added], 2):>20} "
            f"{spread(cpu, 1):>20} {spread([a['cpu_over_chat'] for a in added], 2):>18}"
        )
    heads = ("events/token direct", "llmd", "reads/token direct", "llmd")
    print(f"\n{'protocol':<10} {heads[0]:>22} {heads[1]:>14} {heads[2]:>20} {heads[3]:>14}")
    for protocol in PROTOCOLS:
        per = {
            (path, key): [r[protocol][path][key] for r in records]
            for path in ("direct", "llmd")
            for key in ("events_per_token", "reads_per_token")
        }
        print(
            f"{protocol:<10} {spread(per['direct', 'events_per_token'], 2):>22} "
            f"{spread(per['llmd', 'events_per_token'], 2):>14} "
            f"{spread(per['direct', 'reads_per_token'], 2):>20} "
            f"{spread(per['llmd', 'reads_per_token'], 2):>14}"
        )
    loads = [r[p][path]["load"] for r in records for p in PROTOCOLS for path in ("direct", "llmd")]
    print(f"load average before each run: {spread(loads, 2)}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--config", default="etc/demo.toml", help="etc/demo.toml or etc/sim.toml")
    parser.add_argument("--sim-args", nargs="*", default=[], help="simulator flags (sim config)")
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    model = ensure_tiny_model()
    workdir = short_tmpdir("llmd-bench-proto-")
    state = {"state_dir": str(workdir / "state")}
    name = Path(args.config).name
    if tomllib.loads((REPO / "etc" / name).read_text())["engine"].get("kind") == "sim":
        config = shipped_config(name, model, args.sim_args, server=state)
    else:
        config = demo_config(model, server=state)
    llmd = LlmdProcess.start(config, workdir)
    try:
        llmd.wait_ready(600)
        llmd.wait_tokenizer()
        records = asyncio.run(measure(llmd, args.rounds))
    finally:
        llmd.stop()
    print_summary(records)
    medians = {
        protocol: {
            key: statistics.median(r[protocol]["added"][key] for r in records)
            for key in records[0][protocol]["added"]
        }
        | {
            "cpu_us_per_token": statistics.median(
                r[protocol]["llmd"]["cpu_us_per_token"] for r in records
            )
        }
        for protocol in PROTOCOLS
    }
    write_record(args.output, config=name, rounds=records, medians=medians)


if __name__ == "__main__":
    main()
