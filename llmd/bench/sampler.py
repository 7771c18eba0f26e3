"""Samples load gauges from Prometheus /metrics endpoints while a step runs.

- Engine names are vLLM's (ENGINE.md): `vllm:kv_cache_usage_perc` (0..1;
  `vllm:gpu_cache_usage_perc` before 0.11), `vllm:num_requests_waiting`,
  `vllm:num_requests_running`; llmd re-exports them as `llmd_engine_kv_cache_usage_ratio`,
  `llmd_engine_requests_waiting` and `_running`, and shows its own admission queue as
  `llmd_queue_depth{class}` (names of the observability work, issue 6).
- The engine's prefix-cache counters (`vllm:prefix_cache_queries_total`, `_hits_total`, in
  prompt tokens; vLLM v1) are read the same way, and once more when the step ends.
- Each family is summed over its label sets. Only the lines of those families are handed to
  prometheus_client's parser, so a scrape of a large /metrics page costs the bench little CPU.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import Sequence

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from llmd.bench.client import Target

KV_USAGE = (
    "vllm:kv_cache_usage_perc",
    "vllm:gpu_cache_usage_perc",
    "llmd_engine_kv_cache_usage_ratio",
)
WAITING = ("vllm:num_requests_waiting", "llmd_engine_requests_waiting")
RUNNING = ("vllm:num_requests_running", "llmd_engine_requests_running")
QUEUED = ("llmd_queue_depth",)
PREFIX_QUERIES = ("vllm:prefix_cache_queries_total",)
PREFIX_HITS = ("vllm:prefix_cache_hits_total",)
WANTED = (*KV_USAGE, *WAITING, *RUNNING, *QUEUED, *PREFIX_QUERIES, *PREFIX_HITS)


@dataclasses.dataclass(frozen=True)
class GaugeSample:
    """One round of scrapes: `t` seconds since the step began; None where no source has the
    family. `queued` is llmd's own queue (all classes), present only when llmd is scraped;
    `prefix_queries` and `prefix_hits` the engine's prefix-cache counters (tokens, cumulative)."""

    t: float
    kv_usage: float | None
    waiting: float | None
    running: float | None
    queued: float | None = None
    prefix_queries: float | None = None
    prefix_hits: float | None = None


def parse_gauges(text: str) -> dict[str, float]:
    """Sum of each wanted family's samples in Prometheus text `text`, by family name."""
    lines = [
        line
        for line in text.splitlines()
        if line.startswith(WANTED) or (line.startswith("#") and any(n in line for n in WANTED))
    ]
    sums: dict[str, float] = {}
    for family in text_string_to_metric_families("\n".join(lines) + "\n"):
        for sample in family.samples:
            if sample.name in WANTED:
                sums[sample.name] = sums.get(sample.name, 0.0) + sample.value
    return sums


def _first(sums: dict[str, float], names: tuple[str, ...]) -> float | None:
    return next((sums[name] for name in names if name in sums), None)


class GaugeSampler:
    """Scrapes each of `sources` every `interval_s` between `start()` and `stop()`; for each
    family the first source that has it wins (put the engine first, llmd after)."""

    def __init__(self, sources: Sequence[Target], interval_s: float = 0.5) -> None:
        self.sources = tuple(sources)
        self.interval_s = interval_s
        self.samples: list[GaugeSample] = []
        self.failures = 0
        self._task: asyncio.Task[None] | None = None

    def start(self, clock_zero: float) -> None:
        self.samples = []
        self._task = asyncio.create_task(self._loop(clock_zero))

    async def stop(self) -> list[GaugeSample]:
        """Stop scraping; the samples of this step."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        return self.samples

    async def running(self) -> float | None:
        """The engine's running sequences now, from the first source that has the gauge
        (None: none answered with it). One read each: its time bounds how fast a change is
        seen (vLLM's /metrics takes up to a few seconds under load, ENGINE.md)."""
        for source in self.sources:
            async with source.session(timeout_s=5) as session:
                try:
                    async with asyncio.timeout(5):
                        async with session.get(source.base_url + "/metrics") as response:
                            text = await response.text()
                except (aiohttp.ClientError, OSError, TimeoutError):
                    continue
            value = _first(parse_gauges(text), RUNNING)
            if value is not None:
                return value
        return None

    async def _loop(self, clock_zero: float) -> None:
        async with contextlib.AsyncExitStack() as stack:
            sessions = [
                (source, await stack.enter_async_context(source.session(timeout_s=5)))
                for source in self.sources
            ]
            try:
                while True:
                    await self.scrape(sessions, clock_zero)
                    await asyncio.sleep(self.interval_s)
            except asyncio.CancelledError:
                await self.scrape(sessions, clock_zero)  # the counters as the step ended
                raise

    async def scrape(
        self, sessions: Sequence[tuple[Target, aiohttp.ClientSession]], clock_zero: float
    ) -> None:
        """One round appended to `samples`; a failed scrape is counted, not raised."""
        sums: dict[str, float] = {}
        for source, session in sessions:
            try:
                async with asyncio.timeout(5):
                    async with session.get(source.base_url + "/metrics") as response:
                        text = await response.text()
            except (aiohttp.ClientError, OSError, TimeoutError):
                self.failures += 1
                continue
            for name, value in parse_gauges(text).items():
                sums.setdefault(name, value)
        self.samples.append(
            GaugeSample(
                t=time.perf_counter() - clock_zero,
                kv_usage=_first(sums, KV_USAGE),
                waiting=_first(sums, WAITING),
                running=_first(sums, RUNNING),
                queued=_first(sums, QUEUED),
                prefix_queries=_first(sums, PREFIX_QUERIES),
                prefix_hits=_first(sums, PREFIX_HITS),
            )
        )
