"""The telemetry scraper against a real simulator socket: samples, token rates, not serving;
the telemetry task restarted when its intervals or the backends change."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest
from aiohttp import web

from llmd.backends.fleet import Fleet
from llmd.config import EngineConfig, TelemetryConfig, UpstreamConfig
from llmd.daemon import telemetry
from llmd.daemon.telemetry import Scraper, ScrapeTarget, Telemetry
from llmd.engine.client import EngineClient
from llmd.engine.metrics import EngineSample, parse_engine_metrics
from llmd.gpu.nvml import GpuReader
from llmd.runtime import RuntimePaths
from llmd.supervisor.state import EnginePhase, EngineState
from llmd.telemetry.observer import Observer
from tests.support.model import ensure_tiny_model
from tests.support.sim_process import SimProcess


async def test_scrapes_the_engine_and_forgets_it_when_it_stops_serving() -> None:
    """A serving engine's gauges, capacity and side of latency are read; a restarting one reads
    as unknown."""
    # 64 blocks of 128 tokens: a window that fits them (the tiny model's own is 131,072)
    sim = SimProcess.start(ensure_tiny_model(), "--num-gpu-blocks", "64", "--max-model-len", "1024")
    try:
        sim.wait_ready()
        observer = Observer()
        engine = EngineState(phase=EnginePhase.SERVING)
        client = EngineClient(sim.socket)
        target = ScrapeTarget("main", client, lambda: engine.serving)
        scraper = Scraper(observer, [target], TelemetryConfig(), gpu_reader=lambda: GpuReader(None))
        async with client.open():
            assert await scraper.scrape_engine(target)
            sample = observer.engine_samples["main"]
            assert (sample.running, sample.waiting, sample.kv_usage) == (0, 0, 0.0)
            assert sample.kv_capacity_tokens == 64 * 128
            await scraper.scrape_engine(target)
            assert observer.engine_token_rates["main"] == (0.0, 0.0)
            latency = observer.engine_latency()["main"]
            assert latency.preemptions == 0 and latency.prefill.count == 0
            engine.phase = EnginePhase.RESTARTING
            await scraper.scrape_engine(target)
            assert observer.engine_samples == {} and observer.engine_token_rates == {}
            assert observer.engine_latency() == {}
    finally:
        sim.stop()


async def test_a_backend_without_metrics_is_read_no_more(tmp_path: Path) -> None:
    """A backend that answers /metrics with 404 (a router in front of vLLM): no sample, and
    `scrape_engine` says not to read it again."""
    app = web.Application()  # no routes: every path is 404
    runner = web.AppRunner(app)
    await runner.setup()
    socket = tmp_path / "router.sock"
    await web.UnixSite(runner, str(socket)).start()
    observer = Observer()
    client = EngineClient(f"unix:{socket}")
    target = ScrapeTarget("fleet", client)
    scraper = Scraper(observer, [target], TelemetryConfig(), gpu_reader=lambda: GpuReader(None))
    try:
        assert await scraper.scrape_engine(target) is False
        assert "fleet" not in observer.engine_samples
    finally:
        await client.close()
        await runner.cleanup()


async def test_telemetry_restarts_only_when_its_intervals_or_the_backends_change() -> None:
    """The telemetry task is kept while `[telemetry]` and the backends' names stay, and
    replaced (the old task cancelled, a scraper over the new set) when either changes."""
    fleet = Fleet(RuntimePaths(Path("/nonexistent")))
    fleet.add_engine("main", EngineConfig())
    telemetry = Telemetry(Observer(), lambda backend, sample: None)
    config = TelemetryConfig()
    telemetry.follow(config, fleet)
    first = telemetry.task
    telemetry.follow(config, fleet)
    assert first is not None and telemetry.task is first
    faster = dataclasses.replace(config, engine_interval_s=config.engine_interval_s / 2)
    telemetry.follow(faster, fleet)
    second = telemetry.task
    assert second is not first and telemetry.scraper is not None
    assert telemetry.scraper.config == faster
    fleet.add_engine("canary", EngineConfig())
    telemetry.follow(faster, fleet)
    assert telemetry.task is not second
    assert [t.name for t in telemetry.scraper.targets] == ["main", "canary"]
    assert telemetry.task is not None
    telemetry.task.cancel()
    await asyncio.wait({first, second, telemetry.task})
    assert first.cancelled() and second.cancelled()


async def test_telemetry_follows_an_upstream_replaced_under_the_same_name() -> None:
    """An upstream whose table a reload changed (a new URL: new state and client under the
    same name) restarts the telemetry task, and the new scraper reads the new client."""
    fleet = Fleet(RuntimePaths(Path("/nonexistent")))
    fleet.add_upstream("lab", UpstreamConfig(url="http://127.0.0.1:9", models=("m",)))
    telemetry = Telemetry(Observer(), lambda backend, sample: None)
    config = TelemetryConfig()
    telemetry.follow(config, fleet)
    first = telemetry.task
    fleet.remove("lab")
    fleet.add_upstream("lab", UpstreamConfig(url="http://127.0.0.1:10", models=("m",)))
    telemetry.follow(config, fleet)
    assert first is not None and telemetry.task is not first
    assert telemetry.scraper is not None
    assert [t.client for t in telemetry.scraper.targets] == [fleet.client("lab")]
    telemetry.task.cancel()
    await asyncio.wait({first, telemetry.task})
    assert first.cancelled()


class _Page:
    """An engine client whose /metrics answers `text` (what `Scraper` reads of an answer)."""

    def __init__(self, text: str) -> None:
        self.text_now = text
        self.status = 200

    async def fetch(self, method: str, path: str, timeout_s: float) -> _Page:
        return self

    def text(self) -> str:
        return self.text_now


async def test_an_unchanged_page_is_not_parsed_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """A backend's page that is the same as its last (an idle engine's) reads as the last
    sample, newly dated, without a parse; a changed page is parsed; a backend forgotten (not
    serving) is parsed again when it serves."""
    parsed: list[str] = []

    def counting(text: str, taken_at: float, sent_at: float | None = None) -> EngineSample:
        parsed.append(text)
        return parse_engine_metrics(text, taken_at, sent_at)

    monkeypatch.setattr(telemetry, "parse_engine_metrics", counting)
    page = _Page('vllm:num_requests_running{model_name="m"} 2.0\n')
    engine = EngineState(phase=EnginePhase.SERVING)
    target = ScrapeTarget("main", page, lambda: engine.serving)  # type: ignore[arg-type]
    observer = Observer()
    scraper = Scraper(observer, [target], TelemetryConfig(), gpu_reader=lambda: GpuReader(None))
    assert await scraper.scrape_engine(target)
    first = observer.engine_samples["main"]
    assert await scraper.scrape_engine(target)
    second = observer.engine_samples["main"]
    assert len(parsed) == 1 and second.running == 2 and second.taken_at >= first.taken_at
    assert second.sent_at is not None and second.sent_at >= (first.sent_at or 0.0)
    page.text_now = 'vllm:num_requests_running{model_name="m"} 5.0\n'
    assert await scraper.scrape_engine(target)
    assert len(parsed) == 2 and observer.engine_samples["main"].running == 5
    engine.phase = EnginePhase.RESTARTING
    assert await scraper.scrape_engine(target)
    engine.phase = EnginePhase.SERVING
    assert await scraper.scrape_engine(target)
    assert len(parsed) == 3 and observer.engine_samples["main"].running == 5
