"""The telemetry task: reads the engine's /metrics over its Unix socket and the GPUs through NVML,
on their own intervals, into the observer (and so into the Status snapshot and /metrics).

Started by the daemon and cancelled at shutdown; it never ends on its own. A failed read is
logged (rate-limited) and the figures it would have refreshed read as unknown.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import aiohttp
import structlog

from llmd.config import TelemetryConfig
from llmd.supervisor.state import EngineState
from llmd.telemetry.engine import EngineSample, parse_engine_metrics
from llmd.telemetry.gpu import GpuReader, nvml_reader
from llmd.telemetry.observer import Observer

log = structlog.get_logger("llmd.telemetry")

# The engine's token rates are taken over its samples of about the last few seconds.
RATE_SPAN_S = 5.0


class Scraper:
    """Keeps `observer.engine_sample`, `engine_token_rates` and `gpus` fresh, and hands each
    engine sample to `on_sample` (admission's view of the engine's load): one reader of the
    engine's /metrics for all of llmd, since each read costs the engine's API server CPU.
    `headers` gives the headers that authenticate llmd to the engine, read at each scrape."""

    def __init__(
        self,
        observer: Observer,
        engine: EngineState,
        engine_socket: Path,
        config: TelemetryConfig,
        gpu_reader: Callable[[], GpuReader] = nvml_reader,
        on_sample: Callable[[EngineSample | None], None] | None = None,
        headers: Callable[[], Mapping[str, str]] = dict,
    ) -> None:
        self.observer = observer
        self.engine = engine
        self.engine_socket = engine_socket
        self.config = config
        self._gpu_reader = gpu_reader
        self._on_sample = on_sample
        self._headers = headers
        self._history: collections.deque[EngineSample] = collections.deque()

    async def run(self) -> None:
        """Read the engine and the GPUs until cancelled."""
        reader = await asyncio.to_thread(self._gpu_reader)
        connector = aiohttp.UnixConnector(path=str(self.engine_socket), force_close=True)
        timeout = aiohttp.ClientTimeout(total=max(2.0, self.config.engine_interval_s * 4))
        try:
            async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
                await asyncio.gather(self._engine_loop(session), self._gpu_loop(reader))
        finally:
            reader.close()

    async def _engine_loop(self, session: aiohttp.ClientSession) -> None:
        while True:
            await self.scrape_engine(session)
            await asyncio.sleep(self.config.engine_interval_s)

    async def _gpu_loop(self, reader: GpuReader) -> None:
        while True:
            self.observer.gpus = await asyncio.to_thread(reader.read)
            if reader.unavailable:
                return  # no driver or no GPU: that will not change while llmd runs
            await asyncio.sleep(self.config.gpu_interval_s)

    async def scrape_engine(self, session: aiohttp.ClientSession) -> None:
        """One read of the engine's /metrics (nothing while it is not serving)."""
        if not self.engine.serving:
            self._forget()
            return
        try:
            async with session.get("http://engine/metrics", headers=self._headers()) as response:
                response.raise_for_status()
                text = await response.text()
            sample = parse_engine_metrics(text, time.monotonic())
        except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as exc:
            log.warning("engine_metrics_failed", error=f"{type(exc).__name__}: {exc}")
            self._forget()
            return
        self.observer.engine_sample = sample
        self.observer.engine_token_rates = self._rates(sample)
        if self._on_sample is not None:
            self._on_sample(sample)

    def _rates(self, sample: EngineSample) -> tuple[float, float] | None:
        """Prompt and generation tokens per second over the samples of the last RATE_SPAN_S."""
        if sample.prompt_tokens_total is None or sample.generation_tokens_total is None:
            return None
        history = self._history
        if history and (history[-1].generation_tokens_total or 0) > sample.generation_tokens_total:
            history.clear()  # a new engine: its counters started again
        history.append(sample)
        while len(history) > 2 and sample.taken_at - history[1].taken_at >= RATE_SPAN_S:
            history.popleft()
        first = history[0]
        elapsed = sample.taken_at - first.taken_at
        if elapsed <= 0:
            return None
        return (
            (sample.prompt_tokens_total - (first.prompt_tokens_total or 0.0)) / elapsed,
            (sample.generation_tokens_total - (first.generation_tokens_total or 0.0)) / elapsed,
        )

    def _forget(self) -> None:
        self.observer.engine_sample = None
        self.observer.engine_token_rates = None
        self._history.clear()
        if self._on_sample is not None:
            self._on_sample(None)


async def run_quietly(scraper: Scraper) -> None:
    """Run `scraper`, logging rather than raising an unexpected failure (telemetry must never
    take the daemon down)."""
    try:
        await scraper.run()
    except Exception as exc:
        log.error("telemetry_failed", error=repr(exc))
