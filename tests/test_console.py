"""The console scripts end quietly when their reader goes away (`llmd ... | head`), and the
daemon outlives the reader of its log."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import psutil

from llmd.console import EXIT_BROKEN_PIPE
from tests.support.llmd_process import free_port, short_tmpdir, stop_process
from tests.support.model import ensure_tiny_model
from tests.support.sim_process import sim_config
from tests.support.waiting import wait_for

ROOT = Path(__file__).resolve().parents[1]


def _cut_short(args: list[str]) -> subprocess.CompletedProcess[bytes]:
    """Run `args` with stdout a pipe whose reader has already closed it, as `| head -c 0`."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run(
            args, stdout=write, stderr=subprocess.PIPE, timeout=120, cwd=ROOT, check=False
        )
    finally:
        os.close(write)


def test_closed_stdout_ends_a_verb_quietly_with_141() -> None:
    """A verb whose stdout reader has gone exits 141 (as a tool SIGPIPE ended) with no traceback."""
    done = _cut_short([sys.executable, "-m", "llmd.cli", "check-config", "etc/demo.toml"])
    assert done.stderr == b""
    assert done.returncode == EXIT_BROKEN_PIPE


def test_serve_whose_log_reader_has_gone_stops_cleanly_with_0() -> None:
    """`llmd serve 2>&1 | tee log`, then Ctrl-C (which ends tee too): every log line finds no
    reader, yet llmd serves, and on SIGINT stops its engine and exits 0 (it used to exit 141 at
    the first line after the signal, in the middle of its shutdown)."""
    workdir = short_tmpdir("llmd-pipe-")
    config = workdir / "llmd.toml"
    config.write_text(sim_config(ensure_tiny_model()))
    port = free_port()
    read, write = os.pipe()
    os.close(read)  # the reader is gone from the first line on
    serve = ["serve", "--config", str(config), "--listen", f"127.0.0.1:{port}"]
    process = subprocess.Popen(
        [sys.executable, "-m", "llmd.cli", *serve, "--runtime-dir", str(workdir / "run")],
        stdout=write,
        stderr=write,
    )
    os.close(write)
    try:
        assert wait_for(lambda: _ready(port) or process.poll() is not None, timeout_s=60)
        assert process.poll() is None, process.returncode
        engine = psutil.Process(process.pid).children()
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == 0
        assert not [child for child in engine if child.is_running()]
    finally:
        stop_process(process, 10)


def _ready(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/ready", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False
