"""The warm-up: an engine serves only after one short request through it succeeded (on the
simulator; a pooling engine's warm-up against the fake engine)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
from aiohttp import web

from llmd.config import EngineConfig, load_config
from llmd.config.backends import MAIN
from llmd.engine.sim.responses import SYSTEM_FINGERPRINT
from llmd.engine.wire import Pool
from llmd.runtime import RuntimePaths
from llmd.supervisor.state import EnginePhase, EngineState
from llmd.supervisor.supervisor import Supervisor
from llmd.supervisor.warmup import WARMUP_MAX_TOKENS, warm_up, warmup_request
from tests.support.fake_engine import FakeEngine
from tests.support.llmd_process import short_tmpdir
from tests.support.model import ensure_tiny_model
from tests.support.sim_process import sim_config
from tests.support.waiting import until


def supervisor(args: tuple[str, ...] = (), **engine: Any) -> Supervisor:
    """A supervisor of the simulator with `args` and `engine` keys in [engine]."""
    workdir = short_tmpdir("llmd-warm-")
    (workdir / "llmd.toml").write_text(sim_config(ensure_tiny_model(), args, engine=engine))
    config = load_config(workdir / "llmd.toml", runtime_dir=str(workdir / "run"))
    paths = RuntimePaths(Path(config.server.runtime_dir))
    paths.create()
    return Supervisor(MAIN, config.engine, config.supervisor, paths, EngineState())


@contextlib.asynccontextmanager
async def running(sup: Supervisor) -> AsyncIterator[asyncio.Task[None]]:
    run = asyncio.create_task(sup.run())
    try:
        yield run
    finally:
        await asyncio.wait_for(sup.stop(), 30)
        with contextlib.suppress(Exception):
            await run


def engine_metrics(sup: Supervisor) -> str:
    transport = httpx.HTTPTransport(uds=str(sup.socket))
    with httpx.Client(transport=transport, base_url="http://engine") as client:
        return client.get("/metrics").text


async def test_the_engine_serves_only_after_its_warm_up_generation() -> None:
    """When the supervisor says serving, the engine has already generated the warm-up's
    tokens: one greedy completion of WARMUP_MAX_TOKENS tokens, ended by its length; its
    answer's fingerprint is the engine's (llmd/endpoints/stream_usage.py puts it back)."""
    sup = supervisor(("--step-base-ms", "50"))
    async with running(sup):
        assert await sup.wait_serving(60)
        text = engine_metrics(sup)
        assert sup.state.fingerprint == f'"system_fingerprint":"{SYSTEM_FINGERPRINT}"'.encode()
    assert (
        f'vllm:generation_tokens_total{{engine="0",model_name="tiny"}} {WARMUP_MAX_TOKENS}.0'
        in text
    )
    assert 'finished_reason="length",model_name="tiny"} 1.0' in text


async def test_without_warm_up_the_engine_serves_on_health_alone() -> None:
    """`engine.warmup = false`: serving after /health, no request sent (so no fingerprint
    read: an n > 1 stream to it is counted by its events)."""
    sup = supervisor(warmup=False)
    async with running(sup):
        assert await sup.wait_serving(60)
        text = engine_metrics(sup)
        assert sup.state.fingerprint is None
    assert 'vllm:generation_tokens_total{engine="0",model_name="tiny"} 0.0' in text


async def test_a_failed_warm_up_is_a_failed_boot_with_its_diagnosis() -> None:
    """An engine whose every request fails (500) never serves: each boot ends as
    warmup_failed, counted as a failed boot, with a diagnosis naming the warm-up."""
    sup = supervisor(("--fault-request", "error:500"))
    async with running(sup):
        assert await until(lambda: sup.state.exits_by_reason.get("warmup_failed", 0) >= 1, 60)
        assert not sup.state.serving
    assert sup.state.phase is not EnginePhase.SERVING
    assert sup.state.last_exit is not None and "HTTP 500" in sup.state.last_exit.detail
    assert [finding.check for finding in sup.state.diagnosis][:1] == ["warmup"]
    assert sup.state.failed_boots >= 1


def test_a_pooling_engine_warms_up_with_an_embedding() -> None:
    """`--runner pooling`: the warm-up is POST /v1/embeddings of the prompt; a generate
    engine's is a greedy completion."""
    pooling = EngineConfig(model="m", args=("--runner", "pooling"), warmup_prompt="Hi there")
    assert warmup_request(pooling) == ("/v1/embeddings", {"model": "m", "input": "Hi there"})
    path, body = warmup_request(dataclasses.replace(pooling, args=()))
    assert path == "/v1/completions" and body["temperature"] == 0


def test_the_warm_up_names_the_model_the_engine_answers_to() -> None:
    """`--served-model-name a b` in engine.args overrides llmd's own name: the warm-up asks
    for `a`; without it, for the configured model name."""
    engine = EngineConfig(model="m", args=("--served-model-name", "a", "b"))
    assert warmup_request(engine)[1]["model"] == "a"
    assert warmup_request(dataclasses.replace(engine, args=()))[1]["model"] == "m"


async def test_the_pooling_warm_up_reaches_the_engine() -> None:
    """Against a pooling engine (the fake engine with /v1/embeddings): it succeeds, and the
    engine saw the embeddings request with the configured prompt; against an engine without
    the route (FastAPI's 404) it fails, saying so."""
    engine = EngineConfig(model="m", args=("--runner", "pooling"), warmup_prompt="Hi there")
    for fake in (FakeEngine(pooling_paths=("/v1/embeddings",)), FakeEngine()):
        socket = short_tmpdir("llmd-warm-") / "engine.sock"
        runner = web.AppRunner(fake.app())
        await runner.setup()
        await web.UnixSite(runner, str(socket)).start()
        try:
            probe = Pool(socket_path=socket)
            took, failure, _ = await warm_up(probe, engine, 10)
            probe.close()
        finally:
            await runner.cleanup()
        if fake.pooling_paths:
            assert failure is None and took >= 0
            assert fake.received == [("/v1/embeddings", {"model": "m", "input": "Hi there"})]
        else:
            assert failure is not None and "answered HTTP 404" in failure
