"""The exit statuses of `llmd` and `llmd-top`, in one table: sysexits.h's codes where one fits
(read through Python's `os.EX_*`, FreeBSD sysexits(3)), llmd's own 79, and 141 for a reader
gone, as the shell reports a tool that SIGPIPE ended. `llmd --help` prints STATUSES and the
README lists the same (tests/test_exitcodes.py holds them together)."""

from __future__ import annotations

import os
import signal

OK = os.EX_OK
# The verb ran and failed: the daemon refused an action (409), a drain did not finish in time,
# a deploy was not promoted, doctor found an error, an engine did not boot for tune.
FAILURE = 1
USAGE = os.EX_USAGE
NO_INPUT = os.EX_NOINPUT
UNAVAILABLE = os.EX_UNAVAILABLE
NO_PERMISSION = os.EX_NOPERM
CONFIG = os.EX_CONFIG
# Every engine failed to boot `supervisor.max_failed_boots` times within the window, and no
# upstream is configured. Listed with CONFIG in the unit's RestartPreventExitStatus: restarting
# llmd would not fix a broken model or a full GPU.
ENGINE_GAVE_UP = 79
BROKEN_PIPE = 128 + signal.SIGPIPE

# (status, when), in order: what `llmd --help` and the README say.
STATUSES: tuple[tuple[int, str], ...] = (
    (OK, "done (serve: stopped cleanly)"),
    (FAILURE, "failed: an action refused, a drain not done, a doctor error, a failed boot"),
    (USAGE, "usage: an unknown option, a bad value or a missing argument"),
    (NO_INPUT, "a file named on the command line cannot be read (doctor --log)"),
    (UNAVAILABLE, "no llmd answers on the admin socket (is it running? --runtime-dir?)"),
    (NO_PERMISSION, "this user may not open the admin socket (root or the llmd group)"),
    (CONFIG, "the config is wrong, or a GPU engine has no GPU (systemd does not restart it)"),
    (ENGINE_GAVE_UP, "serve: every engine gave up booting (systemd does not restart it)"),
    (BROKEN_PIPE, "the output's reader went away (`llmd status | head`), as for SIGPIPE"),
)


def epilog() -> str:
    """The 'exit status' block of `llmd --help`: one line per STATUSES entry."""
    lines = ["exit status:"]
    lines += [f"  {code:<4} {when}" for code, when in STATUSES]
    return "\n".join(lines)
