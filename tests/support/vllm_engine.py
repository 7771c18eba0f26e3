"""A real vLLM (CPU build) booted directly on a Unix socket with the tiny model, for the tests
that hold llmd's view of the engine to the engine itself (contract, token-count parity).

One for all the tests that use the `vllm_engine` fixture (tests/conftest.py): a boot takes
20-80 s.
It runs on `VLLM_PYTHON` (tests/support/vllm_python.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from llmd.engine.amx import host_has_amx, with_amx_permission
from llmd.engine.launch import RPC_BASE_ENV
from tests.support.llmd_process import short_tmpdir
from tests.support.sim_process import health_status
from tests.support.vllm_python import VLLM_PYTHON

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
    """A running engine: which kind (`vllm` or `sim`), its socket and its log."""

    kind: str
    socket: Path
    log_path: Path
    boot_s: float | None = None  # seconds from its start to /health 200 (None: not timed)

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
def vllm_engine(
    model: Path,
    timeout_s: float = 400.0,
    socket: Path | None = None,
    args: tuple[str, ...] = (),
) -> Iterator[Engine]:
    """Boot vLLM on `model` in a process group of its own (in this session: see
    llmd/supervisor/process.py), yield it once /health is 200, stop its group. `socket` is
    where it serves (default: a fresh path; give the same one to start it again where a
    client already points; a socket file nobody answers on is removed first, as vLLM does
    not), `args` more vLLM flags.

    Raises RuntimeError, with the engine's log, when it exits or is not healthy in time.
    """
    workdir = short_tmpdir("llmd-vllm-")
    socket, log_path = socket or workdir / "engine.sock", workdir / "vllm.log"
    if health_status(socket) is None:  # a stopped vLLM's socket file: its bind would fail
        socket.unlink(missing_ok=True)
    argv = [
        VLLM_PYTHON,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model),
        "--uds",
        str(socket),
        "--served-model-name",
        "tiny",
        *VLLM_ARGS,
        *args,
    ]
    # vLLM's internal sockets in the engine's own directory, removed with it (vLLM leaves them
    # in /tmp by default: llmd/runtime.py `rpc_dir_of`).
    env = {**os.environ, RPC_BASE_ENV: str(workdir)}
    if host_has_amx():  # as llmd launches it (llmd/engine/launch.py)
        env = with_amx_permission(env, os.environ)
    began = time.monotonic()
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, process_group=0, env=env
        )
    try:
        _wait_healthy(process, socket, log_path, timeout_s)
        yield Engine("vllm", socket, log_path, time.monotonic() - began)
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
