"""Three tenants on one engine, with and without KV shares and token budgets (issue 39).

On a workstation the tenants are local apps: a coding agent (long prompts, streamed answers, one
step after another), a chat UI (short streamed chats at a steady rate) and a RAG indexer that
floods (many long non-streamed requests at once, backing off by Retry-After when refused, as
the SDKs do). The simulator runs with a KV cache of 16,384 tokens (128 blocks of 128) and steps
of 20 ms or more, so the indexer alone can fill it, as long contexts fill a GPU's, and its
requests last seconds. Each round runs every setting once,
the order rotating, on the same llmd and engine, the tenants file switched by `POST
/tenants/reload`:

    plain    no shares, no budgets
    share    the indexer may hold at most `--share` of the KV cache (max_kv_share)
    budget   the share, and the indexer's token budgets (input and output per minute)

A budget starts full (a minute's worth): a run shorter than a minute past its fill measures
that first minute. `--fill 60` measures the indexer held to its budget's refill.

Each run reports the agent's and the chat UI's TTFT p50/p95, the indexer's output tokens/s
(its answered requests' completion tokens over the measured window), its requests refused
(429 budget_exceeded), the most KV it held (llmd's status, sampled each second), the engine's
generation tokens/s and the load.

    flock /tmp/llmd-heavy.lock .venv/bin/python scripts/bench_tenants.py --rounds 3 \\
        --output docs/bench/tenants-sim.json
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

import aiohttp
import psutil
import tomli_w

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from llmd.admission.tenants import hash_key  # noqa: E402
from tests.support.engine_metrics import engine_gauge  # noqa: E402
from tests.support.llmd_process import LlmdProcess, short_tmpdir  # noqa: E402

KEYS = {"agent": "bench-agent", "chat": "bench-chat", "indexer": "bench-indexer"}
# 16,384 KV tokens, and steps of 20 ms plus the calibrated cost per sequence: an indexer request
# (650 tokens of prompt, 128 out) then takes seconds, as a 7-8B model's on one GPU does, and a
# score of them fill the cache.
SIM_ARGS = ["--num-gpu-blocks", "128", "--block-size", "128", "--max-num-seqs", "128",
            "--step-base-ms", "20"]  # fmt: skip
SETTINGS = ("plain", "share", "budget")
CODE = "def handler(request):\n    return respond(request.body, status=200)\n"
DOCUMENT = "The quarterly report describes revenue, costs and the outlook for the year. "


def tenants_file(setting: str, share: float, input_per_min: int, output_per_min: int) -> str:
    """The tenants file of `setting`: the agent and the chat UI interactive, the indexer
    normal, with its share (`share`, `budget`) and token budgets (`budget`)."""
    limits = ""
    if setting in ("share", "budget"):
        limits += f"max_kv_share = {share}\n"
    if setting == "budget":
        limits += (
            f"input_tokens_per_minute = {input_per_min}\n"
            f"output_tokens_per_minute = {output_per_min}\n"
        )
    return (
        f'[tenants.agent]\nkeys = ["{hash_key(KEYS["agent"])}"]\ndefault_class = "interactive"\n'
        f'[tenants.chat]\nkeys = ["{hash_key(KEYS["chat"])}"]\ndefault_class = "interactive"\n'
        f'[tenants.indexer]\nkeys = ["{hash_key(KEYS["indexer"])}"]\n{limits}'
    )


def write_config(workdir: Path) -> str:
    """etc/sim.toml with an absolute model path, the small KV cache, the tenants file, and the
    SLO guard off (so the shares and budgets are measured, not the guard's shedding)."""
    raw = tomllib.loads((REPO / "etc" / "sim.toml").read_text())
    raw["engine"]["model"] = str((REPO / "etc" / raw["engine"]["model"]).resolve())
    raw["engine"]["args"] = [*raw["engine"].get("args", []), *SIM_ARGS]
    off = {"ttft_p95_budget_ms": 0.0}
    raw["admission"] = {"tenants_file": str(workdir / "tenants.toml"), "interactive": off,
                        "normal": off}  # fmt: skip
    raw.setdefault("logging", {})["level"] = "warning"
    return tomli_w.dumps(raw)


async def streamed_ttft(
    session: aiohttp.ClientSession, url: str, tenant: str, body: dict[str, Any]
) -> float | None:
    """One streamed chat of `tenant`: its time to the first content token (None: refused or
    failed)."""
    headers = {"authorization": f"Bearer {KEYS[tenant]}"}
    started = time.monotonic()
    try:
        async with session.post(url + "/v1/chat/completions", json=body, headers=headers) as r:
            if r.status != 200:
                return None
            first = None
            async for line in r.content:
                if first is None and line.startswith(b"data: {") and b'"content":"' in line:
                    first = time.monotonic() - started
            return first
    except (aiohttp.ClientError, TimeoutError):
        return None


async def agent(session: aiohttp.ClientSession, url: str, stop: float, out: list[float]) -> None:
    """A coding agent: a long prompt (code), a streamed answer, then its next step."""
    body = {"model": "tiny", "messages": [{"role": "user", "content": CODE * 20}],
            "max_tokens": 160, "stream": True, "ignore_eos": True}  # fmt: skip
    while time.monotonic() < stop:
        ttft = await streamed_ttft(session, url, "agent", body)
        if ttft is not None and time.monotonic() < stop:
            out.append(ttft)


async def chat_ui(
    session: aiohttp.ClientSession, url: str, stop: float, rate: float, out: list[float]
) -> None:
    """A chat UI: a short streamed chat every 1/`rate` s, each on its own."""
    body = {"model": "tiny", "messages": [{"role": "user", "content": "What is a KV cache?"}],
            "max_tokens": 48, "stream": True, "ignore_eos": True}  # fmt: skip

    async def one() -> None:
        ttft = await streamed_ttft(session, url, "chat", body)
        if ttft is not None:
            out.append(ttft)

    sent = []
    while time.monotonic() < stop - 2:
        sent.append(asyncio.create_task(one()))
        await asyncio.sleep(1 / rate)
    await asyncio.gather(*sent)


async def indexer(
    session: aiohttp.ClientSession, url: str, stop: float, out: dict[str, int]
) -> None:
    """One indexer worker: a long document, a non-streamed answer, back to back; a 429 waits
    its Retry-After."""
    body = {"model": "tiny", "messages": [{"role": "user", "content": DOCUMENT * 20}],
            "max_tokens": 128, "ignore_eos": True}  # fmt: skip
    headers = {"authorization": f"Bearer {KEYS['indexer']}"}
    while time.monotonic() < stop:
        try:
            async with session.post(url + "/v1/chat/completions", json=body, headers=headers) as r:
                payload = await r.json(content_type=None)
                retry = float(r.headers.get("retry-after", "1"))
        except (aiohttp.ClientError, TimeoutError):
            out["errors"] += 1
            continue
        if r.status == 429:
            out["refused"] += 1
            await asyncio.sleep(min(retry, max(0.0, stop - time.monotonic())))
        elif r.status != 200:
            out["errors"] += 1
            await asyncio.sleep(retry)
        elif time.monotonic() <= stop:
            out["requests"] += 1
            out["tokens"] += payload["usage"]["completion_tokens"]


async def sample_held(llmd: LlmdProcess, held: list[int]) -> None:
    """Every second: the KV tokens the indexer's running requests hold (llmd's status)."""
    while True:
        status = await asyncio.to_thread(llmd.admin_status)
        row = next((t for t in status["tenants"] if t["name"] == "indexer"), None)
        held.append(int(row["kv_tokens"]) if row else 0)
        await asyncio.sleep(1.0)


async def run(llmd: LlmdProcess, setting: str, args: argparse.Namespace) -> dict[str, Any]:
    """One run of the three tenants under `setting` (its tenants file already loaded)."""
    agent_ttfts: list[float] = []
    chat_ttfts: list[float] = []
    index = {"requests": 0, "tokens": 0, "refused": 0, "errors": 0}
    held: list[int] = []
    timeout = aiohttp.ClientTimeout(total=args.seconds + 600)
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        start = time.monotonic()
        stop = start + args.seconds
        url = llmd.base_url
        flood = [asyncio.create_task(indexer(session, url, stop, index))
                 for _ in range(args.indexer_concurrency)]  # fmt: skip
        await asyncio.sleep(args.fill)  # the flood fills the engine first
        window_start = time.monotonic()
        index.update(requests=0, tokens=0)
        generated_before = await asyncio.to_thread(
            engine_gauge, llmd.engine_socket, "vllm:generation_tokens_total"
        )
        sampler = asyncio.create_task(sample_held(llmd, held))
        probes = [
            *(asyncio.create_task(agent(session, url, stop, agent_ttfts))
              for _ in range(args.agents)),
            asyncio.create_task(chat_ui(session, url, stop, args.chat_rate, chat_ttfts)),
        ]  # fmt: skip
        await asyncio.sleep(max(0.0, stop - time.monotonic()))
        window = time.monotonic() - window_start
        indexer_tokens = index["tokens"]
        generated = await asyncio.to_thread(
            engine_gauge, llmd.engine_socket, "vllm:generation_tokens_total"
        )
        sampler.cancel()
        await asyncio.gather(*probes)
        for worker in flood:  # the indexer's requests still running are cut off
            worker.cancel()
        await asyncio.gather(*flood, return_exceptions=True)
    return {
        "setting": setting,
        "window_s": round(window, 1),
        "agent_requests": len(agent_ttfts),
        "agent_ttft_p50_ms": _ms(agent_ttfts, 50),
        "agent_ttft_p95_ms": _ms(agent_ttfts, 95),
        "chat_requests": len(chat_ttfts),
        "chat_ttft_p50_ms": _ms(chat_ttfts, 50),
        "chat_ttft_p95_ms": _ms(chat_ttfts, 95),
        "indexer_tokens_per_s": round(indexer_tokens / window, 1),
        "indexer_requests": index["requests"],
        "indexer_refused": index["refused"],
        "indexer_errors": index["errors"],
        "indexer_kv_held_max": max(held, default=0),
        "engine_tokens_per_s": round((generated - generated_before) / window, 1),
        "load_1m": round(psutil.getloadavg()[0], 2),
    }


def _ms(values: list[float], pct: int) -> float | None:
    if not values:
        return None
    if len(values) == 1:
        return round(1000 * values[0], 1)
    return round(1000 * statistics.quantiles(values, n=100, method="inclusive")[pct - 1], 1)


async def wait_idle(llmd: LlmdProcess, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        running = engine_gauge(llmd.engine_socket, "vllm:num_requests_running")
        waiting = engine_gauge(llmd.engine_socket, "vllm:num_requests_waiting")
        if running + waiting == 0 and not llmd.admin_status()["in_flight"]:
            return
        await asyncio.sleep(0.5)


async def main_async(args: argparse.Namespace) -> list[dict[str, Any]]:
    """`args.rounds` rounds, each every setting once (the order rotating) on one llmd."""
    workdir = short_tmpdir("llmd-bench-tenants-")
    files = {s: tenants_file(s, args.share, args.input_per_min, args.output_per_min)
             for s in SETTINGS}  # fmt: skip
    (workdir / "tenants.toml").write_text(files["plain"])
    llmd = LlmdProcess.start(write_config(workdir), workdir)
    results = []
    try:
        await asyncio.to_thread(llmd.wait_ready, 120)
        await asyncio.to_thread(llmd.wait_tokenizer)
        for round_no in range(1, args.rounds + 1):
            settings = args.settings
            shift = (round_no - 1) % len(settings)
            for setting in settings[shift:] + settings[:shift]:
                (workdir / "tenants.toml").write_text(files[setting])
                with llmd.admin() as admin:
                    admin.post("/tenants/reload").raise_for_status()
                await wait_idle(llmd)
                await asyncio.sleep(args.pause)
                result = await run(llmd, setting, args)
                result["round"] = round_no
                print(json.dumps(result), flush=True)
                results.append(result)
    finally:
        with contextlib.suppress(Exception):
            llmd.stop()
    return results


def summary(results: list[dict[str, Any]]) -> list[str]:
    """Per setting: median (min-max) over rounds of the headline figures."""
    lines = []
    for setting in dict.fromkeys(r["setting"] for r in results):
        runs = [r for r in results if r["setting"] == setting]
        cells = []
        for key in ("agent_ttft_p95_ms", "chat_ttft_p95_ms", "indexer_tokens_per_s"):
            values = [r[key] for r in runs if r[key] is not None]
            if values:
                cells.append(
                    f"{key} {statistics.median(values):g} ({min(values):g}-{max(values):g})"
                )
        lines.append(f"{setting}: " + ", ".join(cells))
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=40.0, help="each run, fill included")
    parser.add_argument("--fill", type=float, default=8.0, help="s of flood before measuring")
    parser.add_argument("--pause", type=float, default=3.0, help="idle s before each run")
    parser.add_argument("--agents", type=int, default=2, help="agent loops at once")
    parser.add_argument("--chat-rate", type=float, default=1.0, help="chats per s")
    parser.add_argument("--indexer-concurrency", type=int, default=48)
    parser.add_argument("--share", type=float, default=0.5, help="the indexer's max_kv_share")
    parser.add_argument("--input-per-min", type=int, default=60_000)
    parser.add_argument("--output-per-min", type=int, default=12_000)
    parser.add_argument(
        "--settings",
        type=lambda text: tuple(text.split(",")),
        default=SETTINGS,
        help=f"comma-separated, of {', '.join(SETTINGS)} (default: all)",
    )
    parser.add_argument("--output", help="write the results as JSON here")
    args = parser.parse_args()
    if not set(args.settings) <= set(SETTINGS):
        parser.error(f"--settings takes {', '.join(SETTINGS)}")
    results = asyncio.run(main_async(args))
    print(
        "\n| round | setting | agent TTFT p50/p95 ms | chat TTFT p50/p95 ms | indexer tok/s "
        "| indexer 429s | indexer KV held max | engine tok/s | load |\n"
        "|---|---|---|---|---|---|---|---|---|"
    )
    for r in results:
        print(
            f"| {r['round']} | {r['setting']} | {r['agent_ttft_p50_ms']}/{r['agent_ttft_p95_ms']} "
            f"| {r['chat_ttft_p50_ms']}/{r['chat_ttft_p95_ms']} | {r['indexer_tokens_per_s']} "
            f"| {r['indexer_refused']} | {r['indexer_kv_held_max']:,} | "
            f"{r['engine_tokens_per_s']} | {r['load_1m']} |"
        )
    lines = summary(results)
    print("\nmedian (min-max) over rounds:\n" + "\n".join(lines))
    if args.output:
        record = {"args": vars(args), "command": " ".join(sys.argv), "runs": results,
                  "summary": lines}  # fmt: skip
        Path(args.output).write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
