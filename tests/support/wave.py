"""Issue 37's synchronised batch wave, against one engine or llmd: `batch_clients` non-streamed
completions sent together, the next wave sent the moment the last answer of the one before
ends; an interactive client probes each wave's turnover from a process of its own (its own
event loop, one keep-alive connection: the load generator's work never delays its sends).
Used by scripts/bench_flood.py (`--shape wave`).

A run first measures the interactive client's idle TTFT (`idle_probes` probes one after
another, no batch load), then sends waves until `seconds` have passed and lets the last one
end. Each wave gets two probes, each the moment a turnover begins: `restart`, sent as the
wave's batch requests go out (one pass of the load's event loop after their sends start: it
arrives among or just behind their bodies), and `ending`, sent when the wave's first answer
arrives (its answers end together).
Batch tokens/s is the completion tokens the waves' answers report over the time from the
first wave's send to the last wave's end: the clients' own view, the same through llmd and
direct.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import multiprocessing
import statistics
import time
from multiprocessing.connection import Connection
from typing import Any

import aiohttp

from llmd.bench.client import Target
from llmd.telemetry.windows import percentile
from tests.support import flood
from tests.support.rounds import as_ms, rounded

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
class Probe(flood.Probe):
    """One interactive request (`flood.Probe`: `sent`, `first`, `error`) and its `kind`:
    idle, restart or ending."""

    kind: str = "idle"


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
    """What one run saw; `zero` is its start (`time.monotonic()`, which every process on the
    host reads alike)."""

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
            "wave_s": rounded(statistics.median(e - s for s, e, _ in done)) if done else None,
            "batch_errors": sum(w.errors for w in self.waves),
            "probe_errors": sum(p.ttft is None for p in self.probes),
            "idle_ttft_p50_ms": as_ms(idle_p50),
            "idle_ttft_p95_ms": as_ms(percentile(idle, 95)),
            "wave_probes": len(wave),
            "wave_ttft_p50_ms": as_ms(percentile(wave, 50)),
            "wave_ttft_p95_ms": as_ms(wave_p95),
            "restart_ttft_p50_ms": as_ms(percentile(self._ttfts("restart"), 50)),
            "restart_ttft_max_ms": as_ms(max(self._ttfts("restart"), default=None)),
            "ending_ttft_p50_ms": as_ms(percentile(self._ttfts("ending"), 50)),
            "ending_ttft_max_ms": as_ms(max(self._ttfts("ending"), default=None)),
            "p95_over_idle_p50": round(wave_p95 / idle_p50, 1) if wave_p95 and idle_p50 else None,
            "batch_tokens_per_s": round(tokens / span) if span > 0 else None,
        }

    def detail(self) -> dict[str, Any]:
        """The raw series: probes as [kind, sent, ttft or null], waves as [sent, first end,
        last end, tokens], in s rounded to ms."""
        return {
            "probes": [[p.kind, rounded(p.sent), rounded(p.ttft)] for p in self.probes],
            "waves": [
                [rounded(w.sent), rounded(w.first_end), rounded(w.last_end), w.tokens]
                for w in self.waves
            ],
        }

    def _ttfts(self, *kinds: str) -> list[float]:
        return [p.ttft for p in self.probes if p.kind in kinds and p.ttft is not None]


async def run_wave(target: Target, shape: WaveShape) -> WaveRun:
    """Run `shape` against `target` (an engine's socket or llmd's URL). The batch requests go
    on one session's pool (a connection each, kept across waves); the probes from the
    `ProbeClient` process. Requests carry `x-llmd-priority`, which an engine ignores."""
    run = WaveRun(target=target.label, shape=shape)
    with ProbeClient(target, shape.interactive_tokens) as prober:
        async with target.session(timeout_s=30) as batch:
            zero = run.zero = time.monotonic()
            for _ in range(shape.idle_probes):
                run.probes.append(await prober.probe("idle", zero))
            waves_from = time.monotonic()
            while time.monotonic() - waves_from < shape.seconds:
                await _one_wave(batch, prober, target, shape, run, zero)
    return run


class ProbeClient:
    """The interactive client, in a child process with its own event loop and one keep-alive
    connection to `target`; `probe` asks it for one short streaming chat and gives its
    times. A context manager: the process ends on exit."""

    def __init__(self, target: Target, tokens: int) -> None:
        context = multiprocessing.get_context("spawn")
        self._conn, child = context.Pipe()
        self._process = context.Process(
            target=_probe_process, args=(child, target, tokens), daemon=True
        )

    def __enter__(self) -> ProbeClient:
        self._process.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._conn.send(None)
        self._process.join(10)
        if self._process.is_alive():
            self._process.kill()
        self._conn.close()

    async def probe(self, kind: str, zero: float) -> Probe:
        """One probe of `kind`, sent now; times from `zero` (monotonic s)."""
        self._conn.send(kind)
        sent, first, error = await asyncio.to_thread(self._conn.recv)
        first_s = None if first is None else first - zero
        return Probe(sent=sent - zero, first=first_s, error=error, kind=kind)


def _probe_process(conn: Connection, target: Target, tokens: int) -> None:
    """The probe client's process: a probe for each kind read from `conn` (None ends it),
    answered with (sent, first or None, error or None), monotonic s."""

    async def serve() -> None:
        async with _one_connection(target) as session:
            while await asyncio.to_thread(conn.recv) is not None:
                conn.send(await _probe(session, target, tokens))

    asyncio.run(serve())


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
    prober: ProbeClient,
    target: Target,
    shape: WaveShape,
    run: WaveRun,
    zero: float,
) -> None:
    """Send one wave, probe its restart and its ending, wait for its last answer."""
    wave = Wave(sent=time.monotonic() - zero)
    run.waves.append(wave)
    first_end = asyncio.Event()
    sends = [
        asyncio.create_task(_batch(batch, target, shape, wave, zero, first_end))
        for _ in range(shape.batch_clients)
    ]
    await asyncio.sleep(0)  # the sends are under way
    async with asyncio.timeout(shape.grace_s):
        run.probes.append(await prober.probe("restart", zero))
        await first_end.wait()
        run.probes.append(await prober.probe("ending", zero))
        await asyncio.gather(*sends)


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
    now = time.monotonic() - zero
    if wave.first_end is None:
        wave.first_end = now
        first_end.set()
    wave.last_end = now
    if ok:
        wave.tokens += json.loads(payload)["usage"]["completion_tokens"]
    else:
        wave.errors += 1


async def _probe(
    session: aiohttp.ClientSession, target: Target, tokens: int
) -> tuple[float, float | None, str | None]:
    """One short streaming chat: (sent, first streamed choice or None, error or None), in
    monotonic s (vLLM sends the assistant role chunk with the first token:
    chat_completion/serving.py, 0.32)."""
    sent, first = time.monotonic(), None
    body = {**PROBE_BODY, "max_tokens": tokens}
    try:
        async with session.post(
            target.base_url + "/v1/chat/completions",
            json=body,
            headers={"x-llmd-priority": "interactive"},
        ) as response:
            if response.status != 200:
                await response.read()
                return sent, None, f"HTTP {response.status}"
            async for line in response.content:
                if first is None and line.startswith(b"data: {") and b'"choices":[{' in line:
                    first = time.monotonic()
    except (aiohttp.ClientError, OSError) as exc:
        return sent, None, type(exc).__name__
    return sent, first, None
