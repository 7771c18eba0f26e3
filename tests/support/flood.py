"""The flood load shape of issue 20, against one engine or llmd: long non-streamed batch
completions back to back from many clients, plus short interactive streaming chats at a steady
rate. Used by scripts/bench_flood.py, scripts/calibrate_sim.py and the contract suite.

A run lasts `seconds`; interactive probes are sent from `fill_s` (the flood has filled the engine
by then) to `seconds`. The flood keeps running past `seconds` until every probe has its first token
or `grace_s` has passed, so a probe's TTFT is measured under the same load as its neighbours';
probes still unanswered then are censored (their TTFT is only known to exceed what they waited).
Engine tokens/s is the engine's `vllm:generation_tokens_total` over [`fill_s`, `seconds`].
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import statistics
import time
from typing import Any

import aiohttp

from llmd.bench.client import Target
from llmd.bench.sampler import GaugeSample, GaugeSampler
from llmd.telemetry.windows import percentile
from tests.support.rounds import as_ms, rounded

GENERATED = "vllm:generation_tokens_total"


@dataclasses.dataclass(frozen=True)
class FloodShape:
    """The load. Defaults are issue 20's: 160 batch clients x 300 tokens (ignore_eos), one
    8-token interactive chat every 0.3 s, 20 s."""

    batch_clients: int = 160
    batch_tokens: int = 300
    interactive_every_s: float = 0.3
    interactive_tokens: int = 8
    seconds: float = 20.0
    fill_s: float = 2.0
    grace_s: float = 30.0


@dataclasses.dataclass
class Probe:
    """One interactive request: `sent` and `first` (first streamed choice) in seconds from the
    run's start; `first` None when it never came (censored) or `error` says why it failed."""

    sent: float
    first: float | None = None
    error: str | None = None

    @property
    def ttft(self) -> float | None:
        return None if self.first is None else self.first - self.sent


@dataclasses.dataclass
class FloodRun:
    """What one run saw. Times are seconds from the run's start."""

    target: str
    shape: FloodShape
    probes: list[Probe] = dataclasses.field(default_factory=list)
    batch_starts: list[float] = dataclasses.field(default_factory=list)
    batch_ends: list[float] = dataclasses.field(default_factory=list)
    batch_tokens: int = 0
    batch_errors: int = 0
    generated: tuple[float, float] | None = None
    samples: list[GaugeSample] = dataclasses.field(default_factory=list)
    ended_at: float = 0.0

    def summary(self) -> dict[str, Any]:
        """The figures of the run, JSON-ready: interactive TTFT p50/p95 in ms (censored probes
        count at what they waited: a percentile that lands on one is a lower bound, and
        `ttft_p95_censored` says so), probes answered within `seconds`, engine tokens/s, batch
        completions and how synchronised they were (`batch_end_top10`: the share of the window's
        completions that ended in its busiest tenth of 0.1 s bins: about 0.1 for completions spread
        evenly, near 1 for waves that start and end together), mean running and waiting."""
        shape = self.shape
        waited = sorted(
            (p.ttft if p.ttft is not None else self.ended_at - p.sent, p.ttft is None)
            for p in self.probes
            if p.error is None
        )
        values = [w for w, _ in waited]
        in_window = [p for p in self.probes if p.first is not None and p.first <= shape.seconds]
        window = [t for t in self.batch_ends if shape.fill_s <= t <= shape.seconds]
        bins: dict[int, int] = {}
        for t in window:
            bins[int(t * 10)] = bins.get(int(t * 10), 0) + 1
        top = sorted(bins.values(), reverse=True)[: int(10 * (shape.seconds - shape.fill_s)) // 10]
        tokens_per_s = None
        if self.generated is not None:
            tokens_per_s = (self.generated[1] - self.generated[0]) / (shape.seconds - shape.fill_s)
        return {
            "target": self.target,
            "probes": len(self.probes),
            "probe_errors": sum(p.error is not None for p in self.probes),
            "probes_answered_in_window": len(in_window),
            "probes_censored": sum(c for _, c in waited),
            "ttft_p50_ms": as_ms(percentile(values, 50)),
            "ttft_p95_ms": as_ms(percentile(values, 95)),
            "ttft_p95_censored": _censored_at(waited, 95),
            "ttft_max_ms": as_ms(max(values, default=None)),
            "engine_tokens_per_s": None if tokens_per_s is None else round(tokens_per_s),
            "batch_completions": len(window),
            "batch_errors": self.batch_errors,
            "batch_end_top10": round(sum(top) / len(window), 3) if window else None,
            "running_mean": _mean([s.running for s in self.samples]),
            "waiting_mean": _mean([s.waiting for s in self.samples]),
        }

    def detail(self) -> dict[str, Any]:
        """The raw series behind `summary`, rounded to ms: probes as [sent, ttft or null],
        batch completion times, gauge samples as [t, running, waiting]."""
        return {
            "probes": [[round(p.sent, 3), rounded(p.ttft)] for p in self.probes],
            "batch_ends": [round(t, 3) for t in self.batch_ends],
            "samples": [[round(s.t, 2), s.running, s.waiting] for s in self.samples],
        }


def _mean(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return round(statistics.fmean(present), 1) if present else None


def _censored_at(waited: list[tuple[float, bool]], q: float) -> bool:
    """Whether the q-th percentile's upper neighbour is a censored probe (then it is a bound)."""
    if not waited:
        return False
    rank = (len(waited) - 1) * q / 100
    return any(c for _, c in waited[int(rank) : int(rank) + 2])


async def run_flood(target: Target, shape: FloodShape, metrics: Target | None = None) -> FloodRun:
    """Run `shape` against `target` (an engine's socket or llmd's URL); read the engine's
    counters and gauges from `metrics` (the engine itself; default `target`). Requests carry
    `x-llmd-priority` (batch / interactive), which an engine ignores."""
    metrics = metrics or target
    run = FloodRun(target=target.label, shape=shape)
    sampler = GaugeSampler([metrics], interval_s=0.5)
    async with target.session(timeout_s=30) as session, metrics.session(timeout_s=30) as scrape:
        zero = time.perf_counter()
        flood_over = asyncio.Event()
        workers = [
            asyncio.create_task(_batch_client(session, target, shape, run, zero, flood_over))
            for _ in range(shape.batch_clients)
        ]
        await _sleep_until(zero + shape.fill_s)
        sampler.start(zero)
        before = await _counter(scrape, metrics)
        probes = []
        next_at = zero + shape.fill_s
        while next_at < zero + shape.seconds:
            probe = Probe(sent=time.perf_counter() - zero)
            run.probes.append(probe)
            probes.append(asyncio.create_task(_interactive(session, target, shape, probe, zero)))
            next_at += shape.interactive_every_s
            await _sleep_until(next_at)
        await _sleep_until(zero + shape.seconds)
        after = await _counter(scrape, metrics)
        run.generated = (before, after) if before is not None and after is not None else None
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(shape.grace_s):
                await asyncio.gather(*(asyncio.shield(p) for p in probes))
        run.ended_at = time.perf_counter() - zero
        flood_over.set()
        for task in [*probes, *workers]:
            task.cancel()
        await asyncio.gather(*probes, *workers, return_exceptions=True)
        run.samples = await sampler.stop()
    return run


async def _sleep_until(at: float) -> None:
    await asyncio.sleep(max(0.0, at - time.perf_counter()))


async def _counter(session: aiohttp.ClientSession, metrics: Target) -> float | None:
    """The engine's generated-tokens counter, or None when /metrics does not answer."""
    try:
        async with asyncio.timeout(10):
            async with session.get(metrics.base_url + "/metrics") as response:
                text = await response.text()
    except (aiohttp.ClientError, OSError, TimeoutError):
        return None
    values = [
        float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(GENERATED)
    ]
    return sum(values) if values else None


async def _batch_client(
    session: aiohttp.ClientSession,
    target: Target,
    shape: FloodShape,
    run: FloodRun,
    zero: float,
    over: asyncio.Event,
) -> None:
    """Non-streamed completions of `batch_tokens` (ignore_eos), back to back, until cancelled."""
    body = {"model": "tiny", "prompt": "Write a long story about", "ignore_eos": True,
            "max_tokens": shape.batch_tokens}  # fmt: skip
    headers = {"x-llmd-priority": "batch"}
    while not over.is_set():
        run.batch_starts.append(time.perf_counter() - zero)
        try:
            async with session.post(
                target.base_url + "/v1/completions", json=body, headers=headers
            ) as response:
                payload = await response.read()
                if response.status != 200:
                    run.batch_errors += 1
                    await asyncio.sleep(float(response.headers.get("retry-after", "1")))
                    continue
        except (aiohttp.ClientError, OSError):
            run.batch_errors += 1
            await asyncio.sleep(0.1)
            continue
        run.batch_ends.append(time.perf_counter() - zero)
        run.batch_tokens += json.loads(payload)["usage"]["completion_tokens"]


async def _interactive(
    session: aiohttp.ClientSession, target: Target, shape: FloodShape, probe: Probe, zero: float
) -> None:
    """One short streaming chat; `probe.first` at its first streamed choice (vLLM sends the
    assistant role chunk with the first token: chat_completion/serving.py, 0.32)."""
    body = {"model": "tiny", "messages": [{"role": "user", "content": "Hi there"}],
            "max_tokens": shape.interactive_tokens, "stream": True, "ignore_eos": True}  # fmt: skip
    headers = {"x-llmd-priority": "interactive"}
    try:
        async with session.post(
            target.base_url + "/v1/chat/completions", json=body, headers=headers
        ) as response:
            if response.status != 200:
                probe.error = f"HTTP {response.status}"
                return
            async for line in response.content:
                if probe.first is None and line.startswith(b"data: {") and b'"choices":[{' in line:
                    probe.first = time.perf_counter() - zero
    except (aiohttp.ClientError, OSError) as exc:
        probe.error = type(exc).__name__
