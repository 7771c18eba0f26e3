"""The telemetry task: reads each backend's /metrics (an engine over its Unix socket, an upstream
at its URL) and the GPUs through NVML, on their own intervals, into the observer (and so into
the Status snapshot and /metrics).

- Started by the daemon and cancelled at shutdown (and restarted when the backends or the
  intervals change); it never ends on its own.
- A failed read is logged (rate-limited) and the figures it would have refreshed read as
  unknown; a backend that has no /metrics (404: a router in front of vLLM) is read no more.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import functools
import time
from collections.abc import Callable, Sequence

import structlog

from llmd.backends.fleet import Fleet
from llmd.backends.upstream import UpstreamState
from llmd.config import TelemetryConfig
from llmd.engine.client import EngineClient
from llmd.engine.metrics import EngineSample, parse_engine_metrics
from llmd.gpu.nvml import GpuReader, nvml_reader
from llmd.supervisor.state import EngineState
from llmd.telemetry.observer import Observer

log = structlog.get_logger("llmd.telemetry")

# The engine's token rates are taken over its samples of about the last few seconds.
RATE_SPAN_S = 5.0


@dataclasses.dataclass(frozen=True)
class ScrapeTarget:
    """One backend to read: its name, its client, and whether it serves now (an engine that
    does not is not read)."""

    name: str
    client: EngineClient
    serving: Callable[[], bool] = lambda: True


class Scraper:
    """Keeps `observer.engine_samples`, `engine_token_rates` (per backend) and `gpus` fresh, and
    hands each sample to `on_sample(backend, sample)` (admission's view of the backend's
    load): one reader of each backend's /metrics for all of llmd, since each read costs the
    engine's API server CPU."""

    def __init__(
        self,
        observer: Observer,
        targets: Sequence[ScrapeTarget],
        config: TelemetryConfig,
        gpu_reader: Callable[[], GpuReader] = nvml_reader,
        on_sample: Callable[[str, EngineSample | None], None] | None = None,
    ) -> None:
        self.observer = observer
        self.targets = tuple(targets)
        self.config = config
        self._gpu_reader = gpu_reader
        self._on_sample = on_sample
        self._history: dict[str, collections.deque[EngineSample]] = {}
        # Each backend's last page and what it read as: an idle engine's page is the same
        # bytes read after read (the simulator's), and parsing it again cost 3 ms.
        self._pages: dict[str, tuple[str, EngineSample]] = {}

    async def run(self) -> None:
        """Read the backends and the GPUs until cancelled."""
        reader = await asyncio.to_thread(self._gpu_reader)
        try:
            await asyncio.gather(
                self._gpu_loop(reader), *(self._engine_loop(t) for t in self.targets)
            )
        finally:
            reader.close()

    async def _engine_loop(self, target: ScrapeTarget) -> None:
        while await self.scrape_engine(target):
            await asyncio.sleep(self.config.engine_interval_s)

    async def _gpu_loop(self, reader: GpuReader) -> None:
        while True:
            self.observer.gpus = await asyncio.to_thread(reader.read)
            if reader.unavailable:
                return  # no driver or no GPU: that will not change while llmd runs
            await asyncio.sleep(self.config.gpu_interval_s)

    async def scrape_engine(self, target: ScrapeTarget) -> bool:
        """One read of `target`'s /metrics (nothing while it is not serving); False when it
        has none (404): it is not read again."""
        if not target.serving():
            self._forget(target.name)
            return True
        timeout_s = max(2.0, self.config.engine_interval_s * 4)
        sent_at = time.monotonic()  # a read under load may take seconds: dated when sent too
        try:
            answer = await target.client.fetch("GET", "/metrics", timeout_s=timeout_s)
            if answer.status == 404:
                log.warning("engine_metrics_unavailable", backend=target.name)
                self._forget(target.name)
                return False
            if answer.status >= 400:
                raise ValueError(f"GET /metrics answered HTTP {answer.status}")
            sample = self._read_page(target.name, answer.text(), sent_at)
        except (TimeoutError, OSError, ValueError) as exc:
            log.warning(
                "engine_metrics_failed", backend=target.name, error=f"{type(exc).__name__}: {exc}"
            )
            self._forget(target.name)
            return True
        self.observer.engine_samples[target.name] = sample
        self.observer.engine_window(target.name).add(sample)
        rates = self._rates(target.name, sample)
        if rates is None:
            self.observer.engine_token_rates.pop(target.name, None)
        else:
            self.observer.engine_token_rates[target.name] = rates
        if self._on_sample is not None:
            self._on_sample(target.name, sample)
        return True

    def _rates(self, name: str, sample: EngineSample) -> tuple[float, float] | None:
        """Prompt and generation tokens per second over the samples of the last RATE_SPAN_S."""
        if sample.prompt_tokens_total is None or sample.generation_tokens_total is None:
            return None
        history = self._history.setdefault(name, collections.deque())
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

    def _read_page(self, name: str, page: str, sent_at: float) -> EngineSample:
        """`page` (a backend's /metrics text) as a sample taken now; a page the same as the
        backend's last is not parsed again: its figures are the last sample's, newly dated.
        Raises ValueError as `parse_engine_metrics` does."""
        last = self._pages.get(name)
        if last is not None and last[0] == page:
            return dataclasses.replace(last[1], taken_at=time.monotonic(), sent_at=sent_at)
        sample = parse_engine_metrics(page, time.monotonic(), sent_at)
        self._pages[name] = (page, sample)
        return sample

    def _forget(self, name: str) -> None:
        self._pages.pop(name, None)
        self.observer.engine_samples.pop(name, None)
        self.observer.engine_token_rates.pop(name, None)
        self.observer.engine_windows.pop(name, None)
        self._history.pop(name, None)
        if self._on_sample is not None:
            self._on_sample(name, None)


async def run_quietly(scraper: Scraper) -> None:
    """Run `scraper`, logging rather than raising an unexpected failure (telemetry must never
    take the daemon down)."""
    try:
        await scraper.run()
    except Exception as exc:
        log.error("telemetry_failed", error=repr(exc))


class Telemetry:
    """The telemetry task over `observer`: one Scraper over the fleet's backends (an engine read
    while it serves, an upstream while its last probe succeeded) and the GPUs, each sample
    handed to `on_sample`. Not a part whose end stops llmd: it logs its own failures
    (`run_quietly`); the daemon cancels `task` at shutdown."""

    def __init__(
        self, observer: Observer, on_sample: Callable[[str, EngineSample | None], None]
    ) -> None:
        self.observer = observer
        self.on_sample = on_sample
        self.scraper: Scraper | None = None
        self.task: asyncio.Task[None] | None = None
        self._config: TelemetryConfig | None = None
        self._members: list[tuple[str, object, EngineClient]] = []

    def follow(self, config: TelemetryConfig, fleet: Fleet) -> None:
        """(Re)start the task when `config`'s intervals or the backends changed since the last
        call: one joined or left, or one was replaced under the same name (an upstream whose
        table a reload changed has a new state and client, at its new URL)."""
        members = [
            (name, state, fleet.client(name))
            for name, state in [*fleet.engines.items(), *fleet.upstreams.items()]
        ]
        if self.task is not None and config == self._config and _same(members, self._members):
            return
        if self.task is not None:
            self.task.cancel()
        targets = [
            ScrapeTarget(name, fleet.client(name), functools.partial(_serving, state))
            for name, state in fleet.engines.items()
        ] + [
            ScrapeTarget(name, fleet.client(name), functools.partial(_healthy, upstream))
            for name, upstream in fleet.upstreams.items()
        ]
        self.scraper = Scraper(self.observer, targets, config, on_sample=self.on_sample)
        self._config, self._members = config, members
        self.task = asyncio.create_task(run_quietly(self.scraper), name="telemetry")


def _same(
    members: list[tuple[str, object, EngineClient]], before: list[tuple[str, object, EngineClient]]
) -> bool:
    """The same backends by name, each with the very same state and client objects."""
    return len(members) == len(before) and all(
        name == old_name and state is old_state and client is old_client
        for (name, state, client), (old_name, old_state, old_client) in zip(
            members, before, strict=True
        )
    )


def _serving(engine: EngineState) -> bool:
    return engine.serving


def _healthy(upstream: UpstreamState) -> bool:
    return upstream.healthy is True
