"""The telemetry scraper against a real simulator socket: samples, token rates, not serving."""

from __future__ import annotations

import aiohttp

from llmd.config import TelemetryConfig
from llmd.supervisor.state import EnginePhase, EngineState
from llmd.telemetry.gpu import GpuReader
from llmd.telemetry.observer import Observer
from llmd.telemetry.scraper import Scraper
from tests.support.model import ensure_tiny_model
from tests.support.sim_process import SimProcess


async def test_scrapes_the_engine_and_forgets_it_when_it_stops_serving() -> None:
    """A serving engine's gauges and capacity are read; a restarting one reads as unknown."""
    sim = SimProcess.start(ensure_tiny_model(), "--num-gpu-blocks", "64")
    try:
        sim.wait_ready()
        observer = Observer()
        engine = EngineState(phase=EnginePhase.SERVING)
        scraper = Scraper(
            observer, engine, sim.socket, TelemetryConfig(), gpu_reader=lambda: GpuReader(None)
        )
        connector = aiohttp.UnixConnector(path=str(sim.socket))
        async with aiohttp.ClientSession(connector=connector) as session:
            await scraper.scrape_engine(session)
            sample = observer.engine_sample
            assert sample is not None
            assert (sample.running, sample.waiting, sample.kv_usage) == (0, 0, 0.0)
            assert sample.kv_capacity_tokens == 64 * 128
            await scraper.scrape_engine(session)
            assert observer.engine_token_rates == (0.0, 0.0)
            engine.phase = EnginePhase.RESTARTING
            await scraper.scrape_engine(session)
            assert observer.engine_sample is None and observer.engine_token_rates is None
    finally:
        sim.stop()
