"""Samples the engine's load gauges from a Prometheus /metrics endpoint while a step runs.

Names are vLLM's (ENGINE.md): `vllm:kv_cache_usage_perc` (0..1; `vllm:gpu_cache_usage_perc`
before 0.11), `vllm:num_requests_waiting` and `vllm:num_requests_running`, summed over their label
sets. Only the lines of those families are handed to prometheus_client's parser, so a scrape of a
large /metrics page costs the bench little CPU.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from llmd.bench.client import Target

KV_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
WAITING = ("vllm:num_requests_waiting",)
RUNNING = ("vllm:num_requests_running",)
WANTED = (*KV_USAGE, *WAITING, *RUNNING)


@dataclasses.dataclass(frozen=True)
class GaugeSample:
    """One scrape: `t` seconds since the step began; None where the family is absent."""

    t: float
    kv_usage: float | None
    waiting: float | None
    running: float | None


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
    """Scrapes `target`'s /metrics every `interval_s` between `start()` and `stop()`."""

    def __init__(self, target: Target, interval_s: float = 0.5) -> None:
        self.target = target
        self.interval_s = interval_s
        self.samples: list[GaugeSample] = []
        self.failures = 0
        self._task: asyncio.Task[None] | None = None

    def start(self, clock_zero: float) -> None:
        self.samples = []
        self._task = asyncio.create_task(self._loop(clock_zero))

    async def stop(self) -> list[GaugeSample]:
        """Stop scraping (after one last scrape); the samples of this step."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        return self.samples

    async def _loop(self, clock_zero: float) -> None:
        async with self.target.session(timeout_s=5) as session:
            while True:
                await self.scrape(session, clock_zero)
                await asyncio.sleep(self.interval_s)

    async def scrape(self, session: aiohttp.ClientSession, clock_zero: float) -> None:
        """One scrape appended to `samples`; a failed scrape is counted, not raised."""
        try:
            async with asyncio.timeout(5):
                async with session.get(self.target.base_url + "/metrics") as response:
                    text = await response.text()
        except (aiohttp.ClientError, OSError, TimeoutError):
            self.failures += 1
            return
        sums = parse_gauges(text)
        self.samples.append(
            GaugeSample(
                t=time.perf_counter() - clock_zero,
                kv_usage=_first(sums, KV_USAGE),
                waiting=_first(sums, WAITING),
                running=_first(sums, RUNNING),
            )
        )
