"""The engine's pid file: which process group an llmd left behind, so the next one stops it.
Blocking (it scans processes and waits): the supervisor calls it on a thread.

- The supervisor writes `engine.pid` in the runtime directory when it spawns an engine (the
  group's id and the leader's start time) and removes it once that group is stopped.
- An llmd killed with SIGKILL (an operator, the OOM killer, a container runtime) cannot remove
  it; its engine gets SIGTERM from the kernel (PR_SET_PDEATHSIG, `process.py`), but what that
  leader had not yet stopped can outlive it (vLLM's engine core survives its API server,
  vllm#55510).
- The next llmd on the same runtime directory reads the file before it starts its own engine
  and stops whatever is left of that group (`stop_leftover`; a PID reused since:
  `leftover_members`). Before any engine boots it also stops the groups of the pid files no
  engine of its own will read (`stop_unclaimed`, all at once): a canary's, or an engine
  removed from the config since, which on a GPU would hold the memory its engines need.
- Where the leader is gone, a group's members are told by the group id and a start time no
  earlier than the leader's: a group whose PID was reused by another leader, itself gone
  since, with members still alive, would pass. Each file is acted on once, then removed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Collection, Sequence
from pathlib import Path

import psutil

from llmd.runtime import RuntimePaths
from llmd.supervisor import group

# psutil's start times come from /proc ticks (1/100 s); one process always reads the same.
_SAME_START_S = 0.05


@dataclasses.dataclass(frozen=True)
class EngineRecord:
    """One spawned engine: its process group (`pgid`, the leader's PID) and the leader's start
    time (`started`, Unix s, psutil's `create_time`)."""

    pgid: int
    started: float


def record_engine(path: Path, pgid: int) -> EngineRecord | None:
    """Write the record of the engine leading group `pgid` to `path` (replaced atomically);
    None when the leader is already gone."""
    try:
        record = EngineRecord(pgid, psutil.Process(pgid).create_time())
    except psutil.Error:
        return None
    partial = path.with_suffix(".tmp")
    partial.write_text(json.dumps(dataclasses.asdict(record)))
    partial.replace(path)
    return record


def forget_engine(path: Path, record: EngineRecord | None) -> None:
    """Remove the pid file once `record`'s group is stopped (unless a newer one replaced it)."""
    if record is not None and read_record(path) == record:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def read_record(path: Path) -> EngineRecord | None:
    """The record at `path`; None when there is none or it is unreadable."""
    try:
        raw = json.loads(path.read_text())
        return EngineRecord(int(raw["pgid"]), float(raw["started"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def leftover_members(record: EngineRecord) -> list[psutil.Process]:
    """The processes still alive of the group `record` describes.

    A PID may have been reused since: the recorded start time tells. A leader alive with another
    start time is an unrelated process (its group is left alone: the old group was gone when its
    PID was given out again); a leader gone leaves the group's other members, identified by the
    group id, which Linux never hands out while a process of that group lives.
    """
    try:
        leader = psutil.Process(record.pgid)
        if abs(leader.create_time() - record.started) > _SAME_START_S:
            return []  # the PID was reused: the recorded group was gone by then
    except psutil.NoSuchProcess:
        pass  # the leader is gone; members of its group may remain
    return [
        process
        for process in group.members(record.pgid)
        if process.create_time() >= record.started - _SAME_START_S
    ]


def stop_leftover(path: Path, timeout_s: float) -> list[int]:
    """Stop what is left of the engine group recorded at `path` (SIGTERM, SIGKILL after
    `timeout_s`, each to the very process found), then remove the file. The PIDs that were
    stopped (none: nothing was left)."""
    return stop_leftovers([path], timeout_s)[path]


def stop_leftovers(paths: Sequence[Path], timeout_s: float) -> dict[Path, list[int]]:
    """`stop_leftover` for each of `paths` at once: every group's processes get SIGTERM, then
    one wait of `timeout_s` for them all, SIGKILL to what is left, and the files are removed (a
    file that cannot be removed is left: it names a group that is gone). By path: the PIDs that
    were stopped."""
    found = {}
    for path in paths:
        record = read_record(path)
        found[path] = [] if record is None else leftover_members(record)
    every = [process for processes in found.values() for process in processes]
    # Each process signalled through its psutil handle, which checks it is still the same
    # process: never a signal to a group id or a PID that changed hands meanwhile.
    for process in every:
        with contextlib.suppress(psutil.Error):
            process.terminate()
    alive = group.wait_gone(every, timeout_s)
    for process in alive:
        with contextlib.suppress(psutil.Error):
            process.kill()
    group.wait_gone(alive, 10.0)
    for path in paths:
        with contextlib.suppress(OSError):
            path.unlink()
    return {path: [process.pid for process in processes] for path, processes in found.items()}


def stop_unclaimed(
    paths: RuntimePaths, claimed: Collection[Path], timeout_s: float
) -> dict[str, list[int]]:
    """Stop the groups recorded by every engine pid file in `paths` but the `claimed` ones
    (which their own engines' supervisors read before they boot), all at once as
    `stop_leftovers` does, and remove those files. By engine name: the PIDs stopped (a file
    whose group was gone is removed and not named)."""
    unclaimed = [path for path in paths.pid_files() if path not in claimed]
    stopped = stop_leftovers(unclaimed, timeout_s)
    return {paths.engine_of(path): pids for path, pids in stopped.items() if pids}
