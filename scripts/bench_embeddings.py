"""Embeddings through llmd against straight to the engine, and chat TTFT during an indexing burst.

One `llmd serve` with a chat engine and a pooling engine (etc/llmd-rag.toml: engine `chat`
serving `tiny`, engine `embed` serving `tiny-embed`, both vLLM on the CPU). Per round, two
measures, each on two paths whose order rotates from round to round:
  rate   `--embed-users` clients send embeddings requests of `--batch` short documents (the
         documents of `llmd bench` scenario H, built before the run) back to back for
         `--seconds`: requests/s straight to the pooling engine's socket (`direct`) and
         through llmd (`llmd`). Goal: llmd >= 0.95x direct.
  burst  scenario H of `llmd bench` for `--seconds`: `--chat-users` interactive chats
         (streamed completions, closed loop) and, from half of it on, `--burst-users` indexers
         of `--batch` documents per request. `direct`: each request straight to its engine's
         socket; `llmd`: all through llmd (chat as interactive, embeddings as batch). The
         figure is the chat's TTFT p95 during the burst. Goal: llmd <= 0.5x direct.
Before each run both engines idle and the load average settles (`--max-load`).

    flock /tmp/llmd-heavy.lock .venv/bin/python scripts/bench_embeddings.py --rounds 3 \\
        [--output docs/bench/embeddings-vllm-cpu-DATE.json]

`--config` takes another config with such two engines (`--chat-engine`, `--embed-engine`
name them); its engines of kind vllm run with the tests' vLLM Python, as the demo's.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import statistics
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

import tomli_w

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from llmd.bench.client import EmbedCall, RequestResult, Target, embed  # noqa: E402
from llmd.bench.load import StepSpec, documents, run_step  # noqa: E402
from llmd.bench.prompts import PromptBuilder  # noqa: E402
from llmd.bench.runner import (  # noqa: E402
    BenchOptions,
    discover,
    request_headers,
    warm_up,
    warm_up_embeddings,
)
from llmd.bench.scenarios import Indexing, scenario  # noqa: E402
from llmd.bench.stats import indexing_summary  # noqa: E402
from llmd.runtime import RuntimePaths  # noqa: E402
from llmd.telemetry.windows import percentile  # noqa: E402
from tests.support.llmd_process import LlmdProcess  # noqa: E402
from tests.support.machine_load import settle  # noqa: E402
from tests.support.rounds import as_ms, rotated, round_record, spread, write_record  # noqa: E402
from tests.support.vllm_python import VLLM_PYTHON  # noqa: E402

PATHS = ("direct", "llmd")
CORPUS = 512  # embeddings requests built before the rate runs, sent in turn
TIMEOUT_S = 120.0


def rag_config(path: Path, chat: str, embed_engine: str) -> tuple[str, str, str]:
    """The config at `path` as `LlmdProcess.start` takes it (model paths absolute; engines of
    kind vllm run by the tests' vLLM Python; its own runtime_dir and listen dropped: the
    process gets its own), with the served model names of engines `chat` and `embed_engine`.
    Raises SystemExit when it lacks one of them."""
    raw = tomllib.loads(path.read_text())
    engines = raw.get("engines", {})
    for name in (chat, embed_engine):
        if name not in engines:
            raise SystemExit(f"{path}: no [engines.{name}] (see --chat-engine, --embed-engine)")
    for engine in engines.values():
        model = Path(engine["model"])
        if not model.is_absolute() and (path.parent / model).exists():
            engine["model"] = str((path.parent / model).resolve())
        if engine.get("kind", "vllm") == "vllm":
            engine.setdefault("python", VLLM_PYTHON)
    for key in ("runtime_dir", "listen"):
        raw.get("server", {}).pop(key, None)
    names = [
        engines[name].get("served_model_name") or engines[name]["model"]
        for name in (chat, embed_engine)
    ]
    return tomli_w.dumps(raw), names[0], names[1]


async def embed_rate(
    target: Target, model: str, corpus: list[tuple[tuple[str, ...], int]], args: argparse.Namespace
) -> dict[str, Any]:
    """`args.embed_users` clients sending the corpus's requests in turn to `target` for
    `args.seconds`: requests and documents per second (first send to last answer), latency."""
    results: list[RequestResult] = []
    turns = itertools.count()
    async with target.session(TIMEOUT_S) as session:
        zero = time.perf_counter()
        stop = zero + args.seconds

        async def client() -> None:
            while time.perf_counter() < stop:
                index = next(turns)
                texts, tokens = corpus[index % len(corpus)]
                result = RequestResult(index, "embed", tokens, 0, 0.0)
                await embed(session, target, EmbedCall(model, texts), result, TIMEOUT_S, zero)
                results.append(result)

        await asyncio.gather(*(client() for _ in range(args.embed_users)))
    ok = [r for r in results if r.outcome == "ok"]
    first = min(r.start for r in results)
    wall = max(r.start + (r.e2e or 0.0) for r in results) - first
    latencies = [r.e2e for r in ok if r.e2e is not None]
    return {
        "requests": len(results),
        "ok": len(ok),
        "failed": sorted({str(r.error_kind) for r in results if r.outcome != "ok"}),
        "requests_per_s": round(len(ok) / wall, 2),
        "documents_per_s": round(sum(r.documents for r in ok) / wall, 1),
        "e2e_p50_ms": as_ms(percentile(latencies, 50)),
        "e2e_p95_ms": as_ms(percentile(latencies, 95)),
    }


async def chat_burst(
    chat: Target, embeds: Target, models: tuple[str, str], max_model_len: int | None,
    prompts: PromptBuilder, args: argparse.Namespace, round_no: int,
) -> dict[str, Any]:  # fmt: skip
    """Scenario H for `args.seconds`: chat to `chat`, embeddings from half of it on to
    `embeds`; the chat's TTFT before and during the burst, the embeddings' rate."""
    h = scenario("H", embed_users=args.burst_users, embed_batch=args.batch)
    options = BenchOptions(url=chat.url, scenario=h, embed_model=models[1])
    headers, embed_headers = request_headers(options, ())
    spec = StepSpec(
        scenario=h,
        concurrency=args.chat_users,
        duration_s=args.seconds,
        max_requests=1_000_000,  # the duration ends it
        seed=round_no,  # the same requests on both paths of a round
        timeout_s=TIMEOUT_S,
        model=models[0],
        max_model_len=max_model_len,
        headers=headers,
        embed_model=models[1],
        embed_headers=embed_headers,
    )
    run = await run_step(chat, spec, prompts, None, None, embeds)
    assert run.indexing_at_s is not None, "no embeddings request was sent"
    figures = indexing_summary(run.results, run.embed_results, run.indexing_at_s)
    return {
        "chat_requests": len(run.results),
        "chat_failed": sorted({str(r.error_kind) for r in run.results if r.outcome != "ok"}),
        "ttft_p95_before_ms": figures.chat_ttft_before_ms["p95"],
        "ttft_p95_during_ms": figures.chat_ttft_during_ms["p95"],
        "ttft_p50_during_ms": figures.chat_ttft_during_ms["p50"],
        "chat_during": sum(r.start >= run.indexing_at_s for r in run.results),
        "embed_requests": figures.requests,
        "embed_failed": figures.errors_by_kind,
        "embed_requests_per_s": figures.requests_per_s,
    }


async def measure(
    llmd: LlmdProcess, chat_model: str, embed_model: str, args: argparse.Namespace
) -> list[dict[str, Any]]:
    """Warm up each path, then `args.rounds` rounds of both measures on both paths."""
    sockets = RuntimePaths(llmd.runtime_dir)
    chat_socket = sockets.socket_of(args.chat_engine)
    embed_socket = sockets.socket_of(args.embed_engine)
    through = Target.parse("llmd", llmd.base_url)
    targets = {
        "direct": (
            Target.parse("direct", f"unix:{chat_socket}"),
            Target.parse("direct", f"unix:{embed_socket}"),
        ),
        "llmd": (through, through),
    }
    options = BenchOptions(url=llmd.base_url, scenario=scenario("H"), model=chat_model)
    _, max_model_len, prompts, _ = await discover(options, through)
    for chat, embeds in targets.values():
        await warm_up(chat, chat_model, prompts, 2)
        await warm_up_embeddings(embeds, embed_model)
    indexing = Indexing(1, args.batch, scenario("H").indexing.lengths)  # type: ignore[union-attr]
    corpus = [documents(prompts, indexing, 0, i, max_model_len) for i in range(CORPUS)]
    records = []
    for round_no in range(1, args.rounds + 1):
        order = rotated(PATHS, round_no)
        record = round_record(round_no, order=order)
        for name in order:
            load = await asyncio.to_thread(idle, chat_socket, embed_socket, args.max_load)
            figures = await embed_rate(targets[name][1], embed_model, corpus, args)
            record[f"rate_{name}"] = figures | {"load": load}
        for name in order:
            load = await asyncio.to_thread(idle, chat_socket, embed_socket, args.max_load)
            chat, embeds = targets[name]
            figures = await chat_burst(
                chat, embeds, (chat_model, embed_model), max_model_len, prompts, args, round_no
            )
            record[f"burst_{name}"] = figures | {"load": load}
        record["rate_llmd_over_direct"] = _ratio(
            record["rate_llmd"]["requests_per_s"], record["rate_direct"]["requests_per_s"]
        )
        record["ttft_p95_llmd_over_direct"] = _ratio(
            record["burst_llmd"]["ttft_p95_during_ms"], record["burst_direct"]["ttft_p95_during_ms"]
        )
        print(json.dumps(record), flush=True)
        records.append(record)
    return records


def idle(chat: Path, embeds: Path, max_load: float) -> float:
    """Wait until both engines run nothing (at most 30 s) and the load is under `max_load` (at
    most a minute more: other work on the machine may keep it above); the load average then."""
    settle(chat, float("inf"), 30)
    return settle(embeds, max_load, 60)


def _ratio(ours: float | None, theirs: float | None) -> float | None:
    return round(ours / theirs, 3) if ours is not None and theirs else None


def print_summary(records: list[dict[str, Any]]) -> None:
    """Each path's figures, median (min-max) over rounds, then the two ratios against goals."""
    print(
        f"\n{'path':<7} {'embeddings req/s':>24} {'docs/s':>22} "
        f"{'chat TTFT p95 before ms':>26} {'during burst ms':>22}"
    )
    for name in PATHS:
        rates = [r[f"rate_{name}"] for r in records]
        bursts = [r[f"burst_{name}"] for r in records]
        print(
            f"{name:<7} {spread([x['requests_per_s'] for x in rates], 1):>24} "
            f"{spread([x['documents_per_s'] for x in rates], 0):>22} "
            f"{spread([x['ttft_p95_before_ms'] for x in bursts], 0):>26} "
            f"{spread([x['ttft_p95_during_ms'] for x in bursts], 0):>22}"
        )
    print()
    for key, goal in (
        ("rate_llmd_over_direct", "goal >= 0.95"),
        ("ttft_p95_llmd_over_direct", "goal <= 0.5"),
    ):
        values = [r[key] for r in records]
        print(
            f"{key}: {', '.join('-' if v is None else f'{v:.2f}' for v in values)}; "
            f"median (min-max) {spread(values, 2)} ({goal})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", type=Path, default=REPO / "etc" / "llmd-rag.toml")
    parser.add_argument("--chat-engine", default="chat", help="the generate engine's name (chat)")
    parser.add_argument("--embed-engine", default="embed", help="the pooling engine's name (embed)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, the path order rotating")
    parser.add_argument("--seconds", type=float, default=20.0, help="each run's length (20)")
    parser.add_argument("--embed-users", type=int, default=8, help="rate: clients at once (8)")
    parser.add_argument("--batch", type=int, default=8, help="documents per request (8)")
    parser.add_argument("--chat-users", type=int, default=2, help="burst: chats at once (2)")
    parser.add_argument("--burst-users", type=int, default=4, help="burst: indexers at once (4)")
    parser.add_argument("--max-load", type=float, default=3.0, help="settle below this load (3)")
    parser.add_argument("--output", type=Path, help="write the rounds as JSON here")
    args = parser.parse_args()
    config, chat_model, embed_model = rag_config(
        args.config.resolve(), args.chat_engine, args.embed_engine
    )
    llmd = LlmdProcess.start(config)
    try:
        llmd.wait_ready(900)
        llmd.wait_tokenizer()
        records = asyncio.run(measure(llmd, chat_model, embed_model, args))
    finally:
        llmd.stop()
    print_summary(records)
    medians = {
        key: statistics.median(v for r in records if (v := r[key]) is not None)
        for key in ("rate_llmd_over_direct", "ttft_p95_llmd_over_direct")
        if any(r[key] is not None for r in records)
    }
    write_record(
        args.output,
        config=str(args.config),
        args={k: str(v) for k, v in vars(args).items()},
        rounds=records,
        medians=medians,
    )


if __name__ == "__main__":
    main()
