"""A process group's members, signals and waits, through psutil.

Every function here blocks (each scan reads `/proc`, a few ms with a hundred processes, tens of
ms on a desktop): `EngineProcess` calls them on a thread, never on the event loop. Processes are
psutil handles, so a PID reused by an unrelated process is never taken for a member (psutil
checks the start time before it signals or reports one as running).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time

import psutil

# How often a wait looks again while members remain.
POLL_S = 0.05


def members(pgid: int, exclude: int | None = None) -> list[psutil.Process]:
    """The live (non-zombie) processes in process group `pgid`, but `exclude`."""
    found = []
    for process in psutil.process_iter():
        if process.pid == exclude:
            continue
        with contextlib.suppress(ProcessLookupError, psutil.Error):
            if os.getpgid(process.pid) == pgid and _alive(process):
                found.append(process)
    return found


def group_members(pgid: int) -> list[int]:
    """The PIDs of the live processes in group `pgid`."""
    return [process.pid for process in members(pgid)]


def signal_group(pgid: int, sig: signal.Signals) -> None:
    """Send `sig` to every process in group `pgid` (none left: nothing happens)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def wait_gone(processes: list[psutil.Process], timeout_s: float) -> list[psutil.Process]:
    """Wait until each of `processes` has exited (a zombie counts as exited), at most
    `timeout_s`; those still alive. Never reaps: the caller's own children are left to it."""
    deadline = time.monotonic() + timeout_s
    alive = [process for process in processes if _alive(process)]
    while alive and time.monotonic() < deadline:
        time.sleep(POLL_S)
        alive = [process for process in alive if _alive(process)]
    return alive


def stop_members(pgid: int, timeout_s: float, exclude: int | None = None) -> list[int]:
    """Stop what is left of group `pgid` but `exclude` (the leader, when the caller reaps it):
    SIGTERM and SIGCONT, SIGKILL after `timeout_s`, then wait up to 10 s more. The PIDs that
    were found."""
    found = members(pgid, exclude)
    if not found:
        return []
    signal_group(pgid, signal.SIGTERM)
    signal_group(pgid, signal.SIGCONT)  # a stopped member acts on its SIGTERM (systemd's order)
    alive = wait_gone(found, timeout_s)
    for _ in range(3):  # a member may have forked while it was being stopped
        if not alive:
            break
        signal_group(pgid, signal.SIGKILL)
        alive = wait_gone(members(pgid, exclude), 10.0)
    return [process.pid for process in found]


def _alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
