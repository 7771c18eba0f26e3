"""Issue 37's synchronised batch wave, against one engine or llmd: `batch_clients` non-streamed
completions sent together, the next wave sent the moment the last answer of the one before
ends; an interactive client on a connection of its own probes each wave's turnover. Used by
scripts/bench_flood.py (`--shape wave`).

A run first measures the interactive client's idle TTFT (`idle_probes` probes one after
another, no batch load), then sends waves until `seconds` have passed and lets the last one
end. Each wave gets two probes, each the moment a turnover begins: `restart`, sent right after
the wave's batch requests are handed to the load's connections (it arrives behind their
bodies), and `ending`, sent when the wave's first answer arrives (its answers end together).
Batch tokens/s is the completion tokens the waves' answers report over the time from the
first wave's send to the last wave's end: the clients' own view, the same through llmd and
direct.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import statistics
import time
from typing import Any

import aiohttp

from llmd.bench.client import Target
from llmd.telemetry.windows import percentile

PROBE_BODY = {"model": "tiny", "messages": [{"role": "user", "content": "Hi there"}],
              "stream": True, "ignore_eos": True}  # fmt: skip


@dataclasses.dataclass(frozen=True)
class WaveShape:
    """The load: issue 37's 160 batch clients x 300 tokens (ignore_eos) sent in waves, 8-token
    interactive streaming chats, waves sent for `seconds`, `idle_probes` idle probes first."""

    batch_clients: int = 160
    batch_tokens: int = 300
    interactive_tokens: int = 8
    seconds: float = 30.0
    idle_probes: int = 20
    grace_s: float = 60.0


@dataclasses.dataclass
class Probe:
    """One interactive request: `kind` (idle, restart, ending), `sent` and `first` (its first
    streamed choice) in s from the run's start; `first` None when it never came."""

    kind: str
    sent: float
    first: float | None = None
    error: str | None = None

    @property
    def ttft(self) -> float | None:
        return None if self.first is None else self.first - self.sent


@dataclasses.dataclass
class Wave:
    """One wave: when it was sent, when its first and last answers came (s from the run's
    start), its answers' completion tokens and failed requests."""

    sent: float
    first_end: float | None = None
    last_end: float | None = None
    tokens: int = 0
    errors: int = 0


@dataclasses.dataclass
class WaveRun:
    """What one run saw; `zero` is its start (`time.perf_counter()`, the clock other
    processes' `time.monotonic()` reads on Linux)."""

    target: str
    shape: WaveShape
    zero: float = 0.0
    probes: list[Probe] = dataclasses.field(default_factory=list)
    waves: list[Wave] = dataclasses.field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        """The run's figures, JSON-ready: idle and under-wave TTFT p50/p95 in ms (a probe
        that never got its first token counts as failed, not as a time), their ratio, each
        turnover kind's p50 and max, wave length and batch tokens/s."""
        idle = self._ttfts("idle")
        wave = self._ttfts("restart", "ending")
        idle_p50, wave_p95 = percentile(idle, 50), percentile(wave, 95)
        done = [(w.sent, w.last_end, w.tokens) for w in self.waves if w.last_end is not None]
        span = (done[-1][1] - done[0][0]) if done else 0.0
        tokens = sum(t for _, _, t in done)
        return {
            "target": self.target,
            "waves": len(done),
            "wave_s": _round(statistics.median(e - s for s, e, _ in done)) if done else None,
            "batch_errors": sum(w.errors for w in self.waves),
            "probe_errors": sum(p.ttft is None for p in self.probes),
            "idle_ttft_p50_ms": _ms(idle_p50),
            "idle_ttft_p95_ms": _ms(percentile(idle, 95)),
            "wave_probes": len(wave),
            "wave_ttft_p50_ms": _ms(percentile(wave, 50)),
            "wave_ttft_p95_ms": _ms(wave_p95),
            "restart_ttft_p50_ms": _ms(percentile(self._ttfts("restart"), 50)),
            "restart_ttft_max_ms": _ms(max(self._ttfts("restart"), default=None)),
            "ending_ttft_p50_ms": _ms(percentile(self._ttfts("ending"), 50)),
            "ending_ttft_max_ms": _ms(max(self._ttfts("ending"), default=None)),
            "p95_over_idle_p50": round(wave_p95 / idle_p50, 1) if wave_p95 and idle_p50 else None,
            "batch_tokens_per_s": round(tokens / span) if span > 0 else None,
        }

    def detail(self) -> dict[str, Any]:
        """The raw series: probes as [kind, sent, ttft or null], waves as [sent, first end,
        last end, tokens], in s rounded to ms."""
        return {
            "probes": [[p.kind, _round(p.sent), _round(p.ttft)] for p in self.probes],
            "waves": [
                [_round(w.sent), _round(w.first_end), _round(w.last_end), w.tokens]
                for w in self.waves
            ],
        }

    def _ttfts(self, *kinds: str) -> list[float]:
        return [p.ttft for p in self.probes if p.kind in kinds and p.ttft is not None]


def _ms(value: float | None) -> float | None:
    return None if value is None else round(1000 * value, 1)


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


async def run_wave(target: Target, shape: WaveShape) -> WaveRun:
    """Run `shape` against `target` (an engine's socket or llmd's URL). The batch requests go
    on one session's pool (a connection each, kept across waves); the probes on a session of
    their own with one connection. Requests carry `x-llmd-priority`, which an engine ignores."""
    run = WaveRun(target=target.label, shape=shape)
    async with target.session(timeout_s=30) as batch, _one_connection(target) as interactive:
        zero = run.zero = time.perf_counter()
        for _ in range(shape.idle_probes):
            await _probe(interactive, target, shape, run, "idle", zero)
        zero_waves = time.perf_counter()
        while time.perf_counter() - zero_waves < shape.seconds:
            await _one_wave(batch, interactive, target, shape, run, zero)
    return run


def _one_connection(target: Target) -> aiohttp.ClientSession:
    """A session of one keep-alive connection: the interactive client's own."""
    connector: aiohttp.BaseConnector = (
        aiohttp.UnixConnector(path=target.uds, limit=1)
        if target.uds
        else aiohttp.TCPConnector(limit=1)
    )
    return aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None))


async def _one_wave(
    batch: aiohttp.ClientSession,
    interactive: aiohttp.ClientSession,
    target: Target,
    shape: WaveShape,
    run: WaveRun,
    zero: float,
) -> None:
    """Send one wave, probe its restart and its ending, wait for its last answer."""
    wave = Wave(sent=time.perf_counter() - zero)
    run.waves.append(wave)
    first_end = asyncio.Event()
    sends = [
        asyncio.create_task(_batch(batch, target, shape, wave, zero, first_end))
        for _ in range(shape.batch_clients)
    ]
    probes = asyncio.create_task(_turnover_probes(interactive, target, shape, run, zero, first_end))
    async with asyncio.timeout(shape.grace_s):
        await asyncio.gather(*sends)
        await probes


async def _turnover_probes(
    session: aiohttp.ClientSession,
    target: Target,
    shape: WaveShape,
    run: WaveRun,
    zero: float,
    first_end: asyncio.Event,
) -> None:
    """The `restart` probe at once (behind the wave's sends, created first), the `ending`
    probe when the wave's first answer has come."""
    await _probe(session, target, shape, run, "restart", zero)
    await first_end.wait()
    await _probe(session, target, shape, run, "ending", zero)


async def _batch(
    session: aiohttp.ClientSession,
    target: Target,
    shape: WaveShape,
    wave: Wave,
    zero: float,
    first_end: asyncio.Event,
) -> None:
    """One non-streamed completion of `batch_tokens` (ignore_eos); its answer ends the wave's
    first (sets `first_end`) or is counted into it."""
    body = {"model": "tiny", "prompt": "Write a long story about", "ignore_eos": True,
            "max_tokens": shape.batch_tokens}  # fmt: skip
    try:
        async with session.post(
            target.base_url + "/v1/completions", json=body, headers={"x-llmd-priority": "batch"}
        ) as response:
            payload = await response.read()
            ok = response.status == 200
    except (aiohttp.ClientError, OSError):
        ok = False
    now = time.perf_counter() - zero
    if wave.first_end is None:
        wave.first_end = now
        first_end.set()
    wave.last_end = now
    if ok:
        wave.tokens += json.loads(payload)["usage"]["completion_tokens"]
    else:
        wave.errors += 1


async def _probe(
    session: aiohttp.ClientSession,
    target: Target,
    shape: WaveShape,
    run: WaveRun,
    kind: str,
    zero: float,
) -> None:
    """One short streaming chat; its TTFT at the first streamed choice (vLLM sends the
    assistant role chunk with the first token: chat_completion/serving.py, 0.32)."""
    probe = Probe(kind, sent=time.perf_counter() - zero)
    run.probes.append(probe)
    body = {**PROBE_BODY, "max_tokens": shape.interactive_tokens}
    try:
        async with session.post(
            target.base_url + "/v1/chat/completions",
            json=body,
            headers={"x-llmd-priority": "interactive"},
        ) as response:
            if response.status != 200:
                probe.error = f"HTTP {response.status}"
                await response.read()
                return
            async for line in response.content:
                if probe.first is None and line.startswith(b"data: {") and b'"choices":[{' in line:
                    probe.first = time.perf_counter() - zero
    except (aiohttp.ClientError, OSError) as exc:
        probe.error = type(exc).__name__
