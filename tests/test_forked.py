"""tests/support/forked.py: a child forked from the warm interpreter is the command it stands for
(its arguments, environment, working directory, output files, process group and exit status),
as an exec'd one is."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

from tests.support.forked import ForkedProcess, start_python
from tests.support.llmd_process import short_tmpdir
from tests.support.model import ensure_tiny_model
from tests.support.sim_process import health_status
from tests.support.waiting import wait_for


@pytest.mark.parametrize("exec_wanted", ["", "1"])
def test_a_forked_command_exits_as_an_execd_one(
    exec_wanted: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`llmd check-config` on a broken file: the same status (78) and message, on the stderr
    file, forked or exec'd (LLMD_TEST_EXEC=1)."""
    monkeypatch.setenv("LLMD_TEST_EXEC", exec_wanted)
    where = short_tmpdir("llmd-forked-")
    config = where / "llmd.toml"
    config.write_text("[engine\n")
    process = start_python(
        [sys.executable, "-m", "llmd.cli", "check-config", str(config)],
        env=dict(os.environ),
        stdout=where / "out",
        stderr=where / "err",
    )
    assert isinstance(process, ForkedProcess) is (exec_wanted != "1")
    assert process.wait(timeout=60) == 78 == process.returncode == process.poll()
    assert str(config) in (where / "err").read_text()


def test_a_forked_simulator_takes_its_directory_group_files_and_signals(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The simulator's child: the test's working directory, a process group of its own with
    `new_group`, one file for stdout and stderr, its arguments in `sys.argv` (here a bad flag:
    argparse's usage and status 2 without --model); a signal sent ends it with minus that
    signal, as Popen reports, and none is sent once it has ended. (Its environment:
    tests/systemd/test_service.py hands llmd NOTIFY_SOCKET that way.)"""
    monkeypatch.delenv("LLMD_TEST_EXEC", raising=False)
    where = short_tmpdir("llmd-forked-")
    log = where / "sim.log"
    env = dict(os.environ)
    bad = start_python(
        [sys.executable, "-m", "llmd.engine.sim", "--no-such-flag"],
        env=env,
        stdout=log,
        stderr=log,
        new_group=True,
    )
    assert bad.wait(timeout=60) == 2
    assert "usage:" in log.read_text() and "required: --model" in log.read_text()

    socket = where / "engine.sock"
    argv = [sys.executable, "-m", "llmd.engine.sim", "--model", str(ensure_tiny_model())]
    sim = start_python(
        [*argv, "--uds", str(socket)], env=env, stdout=log, stderr=log, new_group=True
    )
    try:
        assert wait_for(lambda: health_status(socket) == 200, 60, every_s=0.05), log.read_text()
        assert Path(os.readlink(f"/proc/{sim.pid}/cwd")) == Path.cwd()
        assert os.getpgid(sim.pid) == sim.pid != os.getpgid(0)
        sim.send_signal(signal.SIGKILL)
        assert sim.wait(timeout=30) == -signal.SIGKILL
        sim.send_signal(signal.SIGTERM)  # ended: nothing sent to a pid that may be reused
    finally:
        if sim.poll() is None:
            sim.kill()


def test_unknown_commands_are_refused() -> None:
    """Only the commands with a known entry point fork (`-m llmd.cli`, `-m llmd.engine.sim`)."""
    with pytest.raises(ValueError, match="not a command"):
        start_python([sys.executable, "-c", "pass"], env={}, stdout=None, stderr=None)
