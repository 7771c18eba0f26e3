"""Run a real `llmd serve` process for tests: real sockets, a real engine child, real signals."""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import itertools
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from tests.support.forked import Process, start_python
from tests.support.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]


def _port_slice() -> list[int]:
    """This worker's ports: its share of the 12,000 below the ephemeral range, from a random
    start."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw"))
    mine = list(range(max(1024, low - 12000), low))[worker::workers]
    start = random.randrange(len(mine))
    return mine[start:] + mine[:start]


_SLICE = _port_slice()
_PORTS = itertools.cycle(_SLICE)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago, for a process to bind next.

    Taken below the kernel's ephemeral range (ip_local_port_range, 32768-60999 here), where
    the kernel never puts a client's connection nor a bind to port 0: a port from that range,
    freed and bound again a moment later by llmd, was taken meanwhile by another test's
    connection ("Address already in use") once tests ran two at a time. Each pytest-xdist
    worker hands out ports from its own slice, in turn, so two workers never pick the same
    port and one worker repeats one only after thousands."""
    for port in itertools.islice(_PORTS, len(_SLICE)):
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise RuntimeError("no free TCP port below the ephemeral range")


_own_tmp: list[Path] = []  # this test process's directory under /tmp, once made


def short_tmpdir(prefix: str) -> Path:
    """A fresh directory for a test's sockets, config and logs, short enough for Unix socket
    paths (under 108 bytes): in this test process's own directory under /tmp, which is removed
    with everything in it when the process exits (a run used to leave about 1,200 behind)."""
    if not _own_tmp:
        _own_tmp.append(Path(tempfile.mkdtemp(prefix="llmd-t", dir="/tmp")))
        atexit.register(shutil.rmtree, _own_tmp[0], ignore_errors=True)
    return Path(tempfile.mkdtemp(prefix=prefix, dir=_own_tmp[0]))


def stop_process(process: Process, timeout_s: float) -> int:
    """SIGTERM `process`, SIGKILL it after `timeout_s`; its exit status."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        return process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        return process.wait()


@dataclasses.dataclass
class LlmdProcess:
    """One `llmd serve` child (forked from a warm interpreter: tests/support/forked.py).
    `log_path` collects its stderr (JSON lines)."""

    process: Process
    port: int
    runtime_dir: Path
    log_path: Path

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def engine_socket(self) -> Path:
        return self.runtime_dir / "engine.sock"

    @classmethod
    def start(
        cls, config_text: str, workdir: Path | None = None, env: dict[str, str] | None = None
    ) -> LlmdProcess:
        """Write `config_text` to a file and start `llmd serve` on a free port, with `env`
        added to the environment; its state directory (usage, releases) is `workdir/state`
        unless the config names one."""
        workdir = workdir or short_tmpdir("llmd-test-")
        config = workdir / "llmd.toml"
        config.write_text(config_text)
        runtime_dir = workdir / "run"
        state = []
        if "state_dir" not in tomllib.loads(config_text).get("server", {}):
            state = ["--state-dir", str(workdir / "state")]
        port = free_port()
        log_path = workdir / "llmd.log"
        process = start_python(
            [
                sys.executable,
                "-m",
                "llmd.cli",
                "serve",
                "--config",
                str(config),
                "--listen",
                f"127.0.0.1:{port}",
                "--runtime-dir",
                str(runtime_dir),
                *state,
            ],
            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
            stdout=None,
            stderr=log_path,
        )
        return cls(process=process, port=port, runtime_dir=runtime_dir, log_path=log_path)

    @classmethod
    @contextlib.contextmanager
    def running(
        cls, config_text: str, workdir: Path | str = "llmd-test-", timeout_s: float = 60.0
    ) -> Iterator[LlmdProcess]:
        """`start` in `workdir` (a string: a fresh directory with that prefix), wait until
        ready, and stop it when the block ends."""
        where = short_tmpdir(workdir) if isinstance(workdir, str) else workdir
        process = cls.start(config_text, workdir=where)
        try:
            process.wait_ready(timeout_s=timeout_s)
            yield process
        finally:
            process.stop()

    def wait_ready(self, timeout_s: float = 400.0) -> None:
        """Poll GET /ready until 200. Raises RuntimeError (with the log tail) on exit or timeout."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"llmd exited with {self.process.returncode}:\n{self.log_tail()}"
                )
            try:
                if httpx.get(self.base_url + "/ready", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"llmd not ready after {timeout_s}s:\n{self.log_tail()}")

    def wait_tokenizer(self, timeout_s: float = 120.0) -> bool:
        """Wait until the log says validation's tokenizer is settled (it loads after /ready, and
        its import costs seconds of CPU a benchmark must not measure); whether it did in time."""
        events = ('"tokenizer_loaded"', '"tokenizer_engine"', '"tokenizer_fallback_engine"')
        return wait_for(
            lambda: any(e in self.log_path.read_text(errors="replace") for e in events),
            timeout_s,
            every_s=0.2,
        )

    def stop(self, timeout_s: float = 90.0) -> int:
        """SIGTERM llmd and wait for it; its exit status (SIGKILL after `timeout_s`)."""
        return stop_process(self.process, timeout_s)

    def admin(self, timeout_s: float = 5.0) -> httpx.Client:
        """A client of the admin API on its socket (base URL http://llmd)."""
        transport = httpx.HTTPTransport(uds=str(self.runtime_dir / "admin.sock"))
        return httpx.Client(transport=transport, base_url="http://llmd", timeout=timeout_s)

    def admin_listening(self) -> bool:
        """Whether the admin socket takes connections yet: its file exists from its bind, a
        moment before its server listens. A raw socket: httpx leaks the socket of a failed
        connect (a ResourceWarning in whichever test collects it)."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            try:
                sock.connect(str(self.runtime_dir / "admin.sock"))
            except OSError:
                return False
        return True

    def admin_status(self) -> dict[str, Any]:
        """GET /status on the admin socket: the Status snapshot as JSON."""
        with self.admin() as admin:
            status: dict[str, Any] = admin.get("/status").json()
            return status

    def sequences(self) -> list[dict[str, Any]]:
        """The requests llmd holds now (queued or at a backend), from its status."""
        sequences: list[dict[str, Any]] = self.admin_status()["sequences"]
        return sequences

    def queue_depth(self, cls: str) -> int:
        """Requests waiting in llmd's queue of class `cls`."""
        return next(int(q["depth"]) for q in self.admin_status()["queues"] if q["name"] == cls)

    def wait_diagnosed(self, timeout_s: float, every_s: float) -> dict[str, Any]:
        """The status's engine once it carries a diagnosis (polled every `every_s`). Fails the
        test, with the log tail, when llmd exits or no diagnosis comes within `timeout_s`."""
        engine: dict[str, Any] = {}

        def diagnosed() -> bool:
            nonlocal engine
            assert self.process.poll() is None, self.log_tail()
            if not self.admin_listening():
                return False
            engine = self.admin_status()["engine"]
            return bool(engine["diagnosis"])

        assert wait_for(diagnosed, timeout_s, every_s=every_s), self.log_tail()
        return engine

    def log_records(self) -> list[dict[str, Any]]:
        """Every JSON line llmd's log holds so far, in order. Only whole lines count: the
        daemon may be writing the last one as this reads the file, and that half line is left
        for the next read."""
        text = self.log_path.read_text(errors="replace")
        whole = text[: text.rfind("\n") + 1]
        return [json.loads(line) for line in whole.splitlines() if line.startswith("{")]

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
