"""Run the simulator engine as its own process on a Unix socket, as the supervisor runs it."""

from __future__ import annotations

import dataclasses
import os
import socket
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx

from tests.support.configs import shipped_config
from tests.support.forked import Process, start_python
from tests.support.llmd_process import REPO, short_tmpdir, stop_process


def health_status(path: Path, timeout_s: float = 5.0) -> int | None:
    """GET /health over the Unix socket `path`: the HTTP status, or None when nobody answers.

    A raw socket, because httpx's Unix transport leaks its socket when the connect fails.
    """
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout_s)
            sock.connect(str(path))
            sock.sendall(b"GET /health HTTP/1.0\r\nHost: engine\r\n\r\n")
            status_line = sock.recv(64).split(b"\r\n", 1)[0]
        return int(status_line.split()[1])
    except (OSError, ValueError, IndexError):
        return None


@dataclasses.dataclass
class SimProcess:
    """One `python -m llmd.engine.sim` child serving `socket`; its output goes to `log_path`."""

    process: Process
    socket: Path
    log_path: Path

    @classmethod
    def start(
        cls, model: Path, *args: str, name: str = "tiny", env: Mapping[str, str] | None = None
    ) -> SimProcess:
        """Start the simulator on a fresh socket with extra `args` (flags of llmd.engine.sim)
        and `env` added to its environment."""
        workdir = short_tmpdir("llmd-sim-")
        engine_socket = workdir / "engine.sock"
        log_path = workdir / "sim.log"
        argv: Sequence[str] = (
            sys.executable,
            "-m",
            "llmd.engine.sim",
            "--model",
            str(model),
            "--uds",
            str(engine_socket),
            "--served-model-name",
            name,
            *args,
        )
        environ = {
            **os.environ,
            **(env or {}),
            "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        }
        process = start_python(argv, env=environ, stdout=log_path, stderr=log_path, new_group=True)
        return cls(process=process, socket=engine_socket, log_path=log_path)

    def client(self, timeout_s: float = 30.0) -> httpx.Client:
        return httpx.Client(
            transport=httpx.HTTPTransport(uds=str(self.socket)),
            base_url="http://engine",
            timeout=timeout_s,
        )

    def wait_ready(self, timeout_s: float = 20.0) -> float:
        """Poll /health until 200; seconds waited. Raises RuntimeError on exit or timeout."""
        start = time.monotonic()
        while time.monotonic() - start < timeout_s:
            if self.process.poll() is not None:
                raise RuntimeError(f"sim exited with {self.process.returncode}:\n{self.log()}")
            if health_status(self.socket) == 200:
                return time.monotonic() - start
            time.sleep(0.02)
        raise RuntimeError(f"sim not ready after {timeout_s}s:\n{self.log()}")

    def stop(self, timeout_s: float = 10.0) -> int:
        """SIGTERM, then SIGKILL after `timeout_s`; the exit status."""
        return stop_process(self.process, timeout_s)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def sim_config(model: Path, args: Sequence[str] = (), **sections: dict[str, Any]) -> str:
    """etc/sim.toml for `model`, `args` appended to the simulator's flags."""
    return shipped_config("sim.toml", model, args, **sections)
