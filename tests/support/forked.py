"""Start test daemons and simulators from a warm interpreter: fork, not exec.

The fast suite starts about 120 `llmd serve` daemons and 150 simulators of its own, and each
fresh interpreter spent most of its CPU importing (a daemon about 0.5 of its 0.7 CPU-s, a
simulator about 0.15 of 0.3: docs/bench/fast-suite.md). Here one forkserver per test process
(the standard library's `multiprocessing` forkserver) imports those modules once and forks each
child from there. The child then does what the exec'd command would: it takes the given
environment, working directory, stdout and stderr (and its own process group where asked), sets
`sys.argv` and runs the same entry point (`llmd.cli.main`, `llmd.engine.sim.__main__.main`).
What differs from exec: the modules are already imported, the child's parent is the forkserver
(so its status comes back over a pipe: `ForkedProcess`), and of the variables an interpreter
reads at its start only `PYTHONUNBUFFERED` applies (by reconfiguring the standard streams): a
test that needs another (PYTHONPATH, LD_PRELOAD, a -X option) runs its command with
`subprocess` itself.

`LLMD_TEST_EXEC=1` in the environment makes every start exec a fresh interpreter again
(`subprocess.Popen`), to compare or to debug.
"""

from __future__ import annotations

import importlib
import multiprocessing
import multiprocessing.context
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO

# What the forkserver imports once (tests/support/warm.py imports them with the cyclic
# collector off and freezes them, as `llmd serve` does its own imports).
_PRELOAD = ["tests.support.warm"]

# What the children run, by the module a command line names with `-m`.
_ENTRY_POINTS = {
    "llmd.cli": "llmd.cli:main",
    "llmd.engine.sim": "llmd.engine.sim.__main__:main",
}


def exec_wanted() -> bool:
    """Whether the environment asks for fresh interpreters (`LLMD_TEST_EXEC=1`)."""
    return os.environ.get("LLMD_TEST_EXEC") == "1"


_context: list[multiprocessing.context.ForkServerContext] = []


def _forkserver() -> multiprocessing.context.ForkServerContext:
    if not _context:
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(_PRELOAD)
        _context.append(context)
    return _context[0]


class ForkedProcess:
    """A child forked from this test process's forkserver, with the part of `subprocess.Popen`'s
    interface the tests use: `pid`, `args`, `returncode`, `poll`, `wait`, `send_signal`,
    `terminate`, `kill`. `returncode` is the exit status, or minus the signal that ended it,
    as Popen's."""

    def __init__(self, args: Sequence[str], process: multiprocessing.process.BaseProcess) -> None:
        self.args = list(args)
        self._process = process
        self._lock = threading.Lock()  # one reader of the status pipe at a time
        pid = process.pid
        assert pid is not None
        self.pid: int = pid

    @property
    def returncode(self) -> int | None:
        return self.poll()

    def poll(self) -> int | None:
        """The exit status if the child has ended, else None; None at once, as Popen's (its
        `_internal_poll`), while another thread is in `wait`, which will have the status."""
        if not self._lock.acquire(blocking=False):
            return None
        try:
            return self._process.exitcode
        finally:
            self._lock.release()

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the child to end; its exit status. Raises subprocess.TimeoutExpired after
        `timeout` seconds."""
        with self._lock:
            self._process.join(timeout)
            code = self._process.exitcode
        if code is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        return code

    def send_signal(self, sig: int) -> None:
        """Send `sig` unless the child has ended (Popen's rule: no signal to a reused pid)."""
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


Process = subprocess.Popen[bytes] | ForkedProcess


def start_python(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    stdout: Path | None,
    stderr: Path | None,
    new_group: bool = False,
) -> Process:
    """Start `sys.executable -m MODULE ARGS...` (`argv` as given to exec, `argv[1] == "-m"`,
    MODULE one of _ENTRY_POINTS) with `env` as its whole environment, stdout and stderr written
    to fresh files at those paths (None: /dev/null; stderr equal to stdout: one file) and,
    with `new_group`, in a process group of its own. Forks from the forkserver unless
    `exec_wanted()`."""
    if list(argv[1:2]) != ["-m"] or argv[2] not in _ENTRY_POINTS:
        raise ValueError(f"not a command this module can fork: {argv[:3]}")
    if exec_wanted():
        return _exec(argv, env=env, stdout=stdout, stderr=stderr, new_group=new_group)
    process = _forkserver().Process(
        target=_child,
        args=(argv[2], list(argv[3:]), dict(env), os.getcwd(), stdout, stderr),
        kwargs={"new_group": new_group},
        name=f"{argv[2]} {' '.join(argv[3:5])}",
        daemon=True,  # SIGTERM'd when this test process exits, where a test left one running
    )
    process.start()
    return ForkedProcess(argv, process)


def _exec(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    stdout: Path | None,
    stderr: Path | None,
    new_group: bool,
) -> subprocess.Popen[bytes]:
    files: list[IO[bytes]] = []
    try:
        out = _opened(stdout, files)
        same = stderr is not None and stderr == stdout
        err = subprocess.STDOUT if same else _opened(stderr, files)
        return subprocess.Popen(
            argv, stdout=out, stderr=err, env=dict(env), process_group=0 if new_group else None
        )
    finally:
        for file in files:
            file.close()


def _opened(path: Path | None, files: list[IO[bytes]]) -> IO[bytes] | int:
    if path is None:
        return subprocess.DEVNULL
    file = path.open("wb")
    files.append(file)
    return file


def _child(
    command: str,
    args: list[str],
    env: dict[str, str],
    cwd: str,
    stdout: Path | None,
    stderr: Path | None,
    *,
    new_group: bool,
) -> None:
    """In the forked child: become `python -m COMMAND ARGS`, then run its entry point. Its
    SystemExit becomes the exit status (multiprocessing's rule, as the interpreter's)."""
    if new_group:
        os.setpgid(0, 0)
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    _redirect(1, stdout)
    if stderr is not None and stderr == stdout:
        os.dup2(1, 2)
    else:
        _redirect(2, stderr)
    if env.get("PYTHONUNBUFFERED"):
        for stream in (sys.stdout, sys.stderr):
            stream.reconfigure(line_buffering=True, write_through=True)  # type: ignore[union-attr]
    record = getattr(sys.modules.get("sitecustomize"), "forked_start", None)
    if record is not None:  # scripts/suite_cpu.py's hook, where it measures the suite
        record([sys.executable, "-m", command, *args])
    name, function = _ENTRY_POINTS[command].split(":")
    module = importlib.import_module(name)
    sys.argv = [module.__file__ or name, *args]  # as `python -m` sets it: the module's path
    getattr(module, function)()


def _redirect(fd: int, path: Path | None) -> None:
    target = os.open(path or os.devnull, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(target, fd)
    os.close(target)
