"""The telemetry scraper against a real simulator socket: samples, token rates, not serving."""

from __future__ import annotations

from pathlib import Path

from aiohttp import web

from llmd.config import TelemetryConfig
from llmd.engine.client import EngineClient
from llmd.supervisor.state import EnginePhase, EngineState
from llmd.telemetry.gpu import GpuReader
from llmd.telemetry.observer import Observer
from llmd.telemetry.scraper import Scraper, ScrapeTarget
from tests.support.model import ensure_tiny_model
from tests.support.sim_process import SimProcess


async def test_scrapes_the_engine_and_forgets_it_when_it_stops_serving() -> None:
    """A serving engine's gauges and capacity are read; a restarting one reads as unknown."""
    sim = SimProcess.start(ensure_tiny_model(), "--num-gpu-blocks", "64")
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
            engine.phase = EnginePhase.RESTARTING
            await scraper.scrape_engine(target)
            assert observer.engine_samples == {} and observer.engine_token_rates == {}
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
