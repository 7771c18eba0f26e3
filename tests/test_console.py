"""The console scripts end quietly when their reader goes away (`llmd ... | head`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from llmd.console import EXIT_BROKEN_PIPE

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
