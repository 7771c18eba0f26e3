"""The hook of scripts/suite_cpu.py: every Python started with this folder on PYTHONPATH and
LLMD_SUITE_CPU_LOG set appends two JSON lines to that file: at start its pid, argv, and the
test it runs for (PYTEST_CURRENT_TEST, inherited from the pytest worker); at exit its own CPU
(user + system seconds); each with the time (Unix s). Exit covers a normal end, os._exit (llmd
serve, the simulator) and a SIGTERM left at its default; a SIGKILL is not seen. A child forked
from a warm interpreter (tests/support/forked.py) is recorded by `forked_start`. Then it hands
over to the next `sitecustomize` on the path that has not run yet (llmd/engine/amx_boot hands
over the same way, and back to this one when it is first: that second run does nothing but
hand on)."""

import atexit
import importlib.machinery
import importlib.util
import json
import os
import signal
import sys
import time

_LOG = os.environ.get("LLMD_SUITE_CPU_LOG")
_written: list[bool] = []


def _write(record: dict[str, object]) -> None:
    """Append `record`; never raises (a fork that dropped to another user may not write)."""
    try:
        descriptor = os.open(_LOG or "", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    except OSError:
        return
    try:
        os.write(descriptor, (json.dumps(record) + "\n").encode())
    except OSError:
        pass
    finally:
        os.close(descriptor)


def _exited() -> None:
    if not _written:
        _written.append(True)
        times = os.times()
        cpu = times.user + times.system
        _write({"ev": "exit", "pid": os.getpid(), "cpu": cpu, "t": time.time()})


def _on_sigterm(signum: int, frame: object) -> None:
    _exited()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def _os_exit(code: int) -> None:
    try:
        _exited()
    finally:
        _real_exit(code)


def forked_start(argv: list[str]) -> None:
    """Record a child forked from a warm interpreter (tests/support/forked.py) as a process of
    its own, `argv` being the command it stands for: its exit is then recorded again."""
    if _LOG:
        _written.clear()
        test = os.environ.get("PYTEST_CURRENT_TEST")
        record = {"ev": "start", "pid": os.getpid(), "argv": argv[:12], "test": test}
        _write({**record, "t": time.time()})


_here = os.path.dirname(os.path.abspath(__file__))
_ran: set[str] = sys.__dict__.setdefault("_llmd_sitecustomize_ran", set())
_first = _here not in _ran
_ran.add(_here)

if _LOG and _first:
    with open("/proc/self/cmdline", "rb") as cmdline:
        argv = [part.decode(errors="replace") for part in cmdline.read().split(b"\0") if part]
    test = os.environ.get("PYTEST_CURRENT_TEST")
    _write({"ev": "start", "pid": os.getpid(), "argv": argv[:12], "test": test, "t": time.time()})
    atexit.register(_exited)
    if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _on_sigterm)
    _real_exit = os._exit
    os._exit = _os_exit

_rest = [entry for entry in sys.path if os.path.abspath(entry or ".") not in _ran]
_next = importlib.machinery.PathFinder.find_spec("sitecustomize", _rest)
if _next is not None and _next.loader is not None and _next.origin:
    _ran.add(os.path.dirname(os.path.abspath(_next.origin)))
    _next.loader.exec_module(importlib.util.module_from_spec(_next))
