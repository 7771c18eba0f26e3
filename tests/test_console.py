"""The console scripts end quietly when their reader goes away (`llmd ... | head`), and the
daemon outlives the reader of its log."""

from __future__ import annotations

import os
import platform
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from llmd.console import EXIT_BROKEN_PIPE
from tests.support.llmd_process import LlmdProcess, free_port, short_tmpdir, stop_process
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


LLMD = [sys.executable, "-m", "llmd.cli"]
TOP = [sys.executable, "-c", "from llmd.tui.cli import main; main()"]


@pytest.mark.parametrize(
    "command",
    [
        [*LLMD, "--version"],
        [*LLMD, "--help"],
        [*LLMD, "status", "--help"],
        [*LLMD, "check-config", "etc/demo.toml"],
        [*LLMD, "check-config", "etc/demo.toml", "--json"],
        [*LLMD, "hash-key", "--new"],
        [*LLMD, "release", "list", "--state-dir", "tests/data"],
        [*LLMD, "release", "list", "--json", "--state-dir", "tests/data"],
        [*TOP, "--version"],
        [*TOP, "--help"],
    ],
    ids=lambda command: " ".join(command[3:]),
)
def test_closed_stdout_ends_a_verb_quietly(command: list[str]) -> None:
    """A verb whose stdout reader has gone exits 141 (as a tool SIGPIPE ended) with no
    traceback; `--help` exits 0, as argparse drops help it cannot write (both are what `head`
    expects)."""
    done = _cut_short(command)
    assert done.stderr == b""
    assert done.returncode == (0 if "--help" in command else EXIT_BROKEN_PIPE)


@pytest.fixture(scope="module")
def daemon() -> Iterator[LlmdProcess]:
    process = LlmdProcess.start(sim_config(ensure_tiny_model()))
    process.wait_ready(timeout_s=60)
    yield process
    process.stop()


@pytest.mark.parametrize(
    "verb",
    [["status"], ["status", "--json"], ["drain"], ["resume"], ["reload"], ["guard", "on"]],
    ids=" ".join,
)
def test_closed_stdout_ends_a_client_verb_quietly_with_141(
    verb: list[str], daemon: LlmdProcess
) -> None:
    """The verbs that ask the daemon end as quietly when their output is cut short."""
    done = _cut_short([*LLMD, *verb, "--runtime-dir", str(daemon.runtime_dir)])
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


def test_ctrl_c_ends_a_verb_as_sigint_does_without_a_traceback() -> None:
    """Ctrl-C while a verb waits (`llmd hash-key` reading its stdin): no traceback, and the
    process ends by SIGINT itself, so the shell reports 130 and a script's loop stops."""
    with subprocess.Popen(
        [*LLMD, "hash-key"],
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
        preexec_fn=_as_from_a_shell,
    ) as process:
        try:
            assert wait_for(lambda: _reading_stdin(process.pid), timeout_s=60)
            ignored, blocked = _sigint_state(process.pid)
            assert not ignored and not blocked  # else no Ctrl-C could reach it
            process.send_signal(signal.SIGINT)
            # Its stdin stays open until it ends: closed first, a loaded machine may let the
            # child read the pipe's end before it sees the signal (a usage error then, 64).
            process.wait(timeout=30)
            assert process.stderr is not None
            err = process.stderr.read()
        finally:
            stop_process(process, 10)
    assert process.returncode == -signal.SIGINT
    assert b"Traceback" not in err and b"KeyboardInterrupt" not in err


def _as_from_a_shell() -> None:
    """In the child before exec: SIGINT at its default and unblocked, as a shell starts a
    foreground job. A test worker may carry another state (a loop's handler left by an
    in-process test, a mask): an ignored SIGINT survives exec, and the child's Python then
    installs no KeyboardInterrupt handler at all."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _sigint_state(pid: int) -> tuple[bool, bool]:
    """Whether process `pid` ignores SIGINT, and whether it blocks it (/proc/PID/status)."""
    fields = dict(
        line.split(":\t", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    bit = 1 << (signal.SIGINT - 1)
    return bool(int(fields["SigIgn"], 16) & bit), bool(int(fields["SigBlk"], 16) & bit)


# read(2)'s number, which /proc/PID/syscall shows first while a process waits in it.
READ_SYSCALL = {"x86_64": "0", "aarch64": "63"}[platform.machine()]


def _reading_stdin(pid: int) -> bool:
    """Whether process `pid` is blocked in read(0, ...): waiting for its stdin."""
    try:
        return Path(f"/proc/{pid}/syscall").read_text().split()[:2] == [READ_SYSCALL, "0x0"]
    except OSError:
        return False


LEAN_UVICORN = (
    "import sys\n"
    "from llmd.console import import_uvicorn\n"
    "import_uvicorn()\n"
    "import uvicorn, uvicorn.config, uvicorn.server\n"
    "assert uvicorn.Config is uvicorn.config.Config and uvicorn.Server is uvicorn.server.Server\n"
    "print(sorted({'uvicorn.main', 'click', 'watchfiles'} & set(sys.modules)))\n"
    "from uvicorn import run, main\n"
    "cli = sys.modules['uvicorn.main']\n"
    "print(uvicorn.__version__ == uvicorn._version.__version__, run is cli.run)\n"
    "print(sorted({'uvicorn.main', 'click'} & set(sys.modules)))\n"
)


def test_uvicorn_is_imported_without_its_command_line_until_something_asks_for_it() -> None:
    """After import_uvicorn, `Config` and `Server` are there and uvicorn.main, click and
    watchfiles are not loaded; the first other name asked of the package loads the rest."""
    done = subprocess.run(
        [sys.executable, "-c", LEAN_UVICORN], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["[]", "True True", "['click', 'uvicorn.main']"]


def test_import_uvicorn_leaves_an_imported_uvicorn_as_it_is() -> None:
    """With uvicorn imported already, import_uvicorn changes nothing."""
    script = (
        "import sys, uvicorn\n"
        "from llmd.console import import_uvicorn\n"
        "before = sys.modules['uvicorn']\n"
        "import_uvicorn()\n"
        "print(sys.modules['uvicorn'] is before, 'uvicorn.main' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.stdout.split() == ["True", "True"], done.stderr
