"""How llmd's console scripts end when the reader of their output goes away
(`llmd status | head -3`) or Ctrl-C interrupts them: quietly, with the status a Unix tool that
the signal ended gives; and structlog imported without rich, uvicorn without its command line,
for a quicker start."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable

from llmd.exitcodes import BROKEN_PIPE

# What the shell reports for a Unix tool that SIGPIPE ended (128 + SIGPIPE = 141 on Linux):
# `set -o pipefail` scripts see the output was cut short, plain pipelines see `head`'s status.
EXIT_BROKEN_PIPE = BROKEN_PIPE


def run_console(main: Callable[[], None]) -> None:
    """Run a console script's `main`; if stdout's reader has gone, exit EXIT_BROKEN_PIPE without
    a traceback; on Ctrl-C (KeyboardInterrupt), end by SIGINT itself, as `sleep` would, so the
    shell sees 130 and a script's loop stops. Raises SystemExit always when the pipe broke, else
    whatever `main` raises.

    The recipe is Python's own (library docs, `signal`, "Note on SIGPIPE"): point stdout at
    /dev/null so the interpreter's last flush at exit cannot fail a second time."""
    try:
        try:
            main()
        finally:
            sys.stdout.flush()  # what is still buffered: the pipe may break only here
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.exit(EXIT_BROKEN_PIPE)
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
        raise  # not reached: SIGINT's default action ends the process


def import_structlog() -> None:
    """Import structlog, without rich, unless it is imported already.

    structlog's `dev` module imports rich whenever it is installed (Textual brings it), for
    pretty tracebacks in a terminal: about 0.08 CPU-s, half of structlog's import (measured
    here, structlog 26.1, rich 15.0), in each `llmd serve` start and client verb. llmd's logs
    render exceptions as text (`format_exc_info`, llmd/logs.py), so rich would never be used.
    It is hidden while structlog imports and importable again afterwards (llmd-top and
    `llmd tune` draw with it)."""
    if "structlog" in sys.modules:
        return
    hide = "rich" not in sys.modules
    if hide:
        sys.modules["rich"] = None  # type: ignore[assignment]  # makes `import rich` fail
    try:
        import structlog  # noqa: F401
    finally:
        if hide:
            del sys.modules["rich"]


def import_uvicorn() -> None:
    """Import uvicorn's package with its `Config` and `Server` but not its command line, unless
    uvicorn is imported already.

    uvicorn's `__init__` imports `uvicorn.main`, its command line: click and the reload
    supervisors (multiprocessing, watchfiles, anyio), about 0.03 of the 0.2 CPU-s a simulator
    takes to start (measured here, uvicorn 0.55, 2026-12-07); llmd and its simulator only run
    `Server(Config(...))`, which need none of it. Here the package module is made without
    running its `__init__`, `Config` and `Server` are set on it, and the first other name asked
    of it (`main`, `run`, `__version__`) runs its `__init__` then (a module `__getattr__`, PEP
    562), so that a later user of uvicorn finds the whole package."""
    if "uvicorn" in sys.modules:
        return
    import importlib.util

    spec = importlib.util.find_spec("uvicorn")
    assert spec is not None and spec.loader is not None
    package = importlib.util.module_from_spec(spec)
    loader = spec.loader

    def complete(name: str) -> object:
        del package.__dict__["__getattr__"]
        loader.exec_module(package)
        return getattr(package, name)

    package.__dict__["__getattr__"] = complete
    sys.modules["uvicorn"] = package
    try:
        from uvicorn.config import Config
        from uvicorn.server import Server
    except BaseException:
        del sys.modules["uvicorn"]
        raise
    package.__dict__.update(Config=Config, Server=Server)
