"""Run an `llmd` verb inside the test process, as the console script would run it: its output,
error output and exit status, without the 0.3 s of CPU a fresh Python costs to import llmd.

The entry point itself (a real process, its signals and pipes) is pinned by tests/test_console.py
and tests/test_cli.py; a test that needs the verb as its own process (run beside another verb,
killed, or read line by line while it runs) starts one with subprocess."""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys
import threading
from typing import TYPE_CHECKING

from llmd.cli import main

if TYPE_CHECKING:
    from tests.support.llmd_process import LlmdProcess

_ONE_AT_A_TIME = threading.Lock()  # sys.stdout and sys.stderr are the process's


def run_llmd(*argv: str) -> subprocess.CompletedProcess[str]:
    """`llmd ARGV` run by `llmd.cli.main` in this process: args ["llmd", *argv], its stdout
    and stderr as text, and its exit status (SystemExit's code: None is 0; a message is printed
    to stderr and is 1, as Python does). One verb at a time: the streams are redirected for the
    whole process."""
    stdout, stderr = io.StringIO(), io.StringIO()
    with _ONE_AT_A_TIME, contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        try:
            main(list(argv))
            code = 0
        except SystemExit as exit_:
            if exit_.code is None or isinstance(exit_.code, int):
                code = exit_.code or 0
            else:
                print(exit_.code, file=sys.stderr)
                code = 1
    return subprocess.CompletedProcess(["llmd", *argv], code, stdout.getvalue(), stderr.getvalue())


def llmd_verb(llmd: LlmdProcess, *argv: str) -> subprocess.CompletedProcess[str]:
    """`run_llmd(*argv)` on the daemon `llmd`: its runtime directory appended."""
    return run_llmd(*argv, "--runtime-dir", str(llmd.runtime_dir))
