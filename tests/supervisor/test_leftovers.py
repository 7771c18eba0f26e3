"""No engine outlives llmd: `kill -9` of `llmd serve` takes its engine along (the parent-death
signal), a group an llmd left behind is stopped by the next one before it starts its own (the
pid file), a reused PID is left alone, and one runtime directory serves one llmd at a time."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from llmd.runtime import RuntimePaths
from llmd.supervisor.group import group_members
from llmd.supervisor.leftovers import record_engine, stop_leftover, stop_unclaimed
from tests.support.llmd_process import LlmdProcess, short_tmpdir
from tests.support.model import ensure_tiny_model
from tests.support.sim_process import sim_config
from tests.support.waiting import wait_for

# A stand-in for vLLM after its API server was SIGKILLed (vllm#55510): a group leader that
# prints the PID of a child it forked, a child that ignores SIGTERM and lives on once the
# leader is gone.
LEFTOVER = """
import os, signal, time
child = os.fork()
if child == 0:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    time.sleep(600)
else:
    print(child, flush=True)
    time.sleep(600)
"""


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def leftover_group(pid_file: Path) -> tuple[int, int]:
    """A leader and its surviving child in a group of their own, recorded in `pid_file` as
    llmd records its engine; the leader is then SIGKILLed. (pgid, the child's PID)."""
    leader = subprocess.Popen(
        [sys.executable, "-c", LEFTOVER], stdout=subprocess.PIPE, text=True, process_group=0
    )
    assert leader.stdout is not None
    child = int(leader.stdout.readline())
    leader.stdout.close()
    assert record_engine(pid_file, leader.pid) is not None
    leader.kill()
    leader.wait()
    assert alive(child) and os.getpgid(child) == leader.pid
    return leader.pid, child


def test_kill_9_of_llmd_leaves_no_engine_and_the_next_start_serves() -> None:
    """SIGKILL to `llmd serve`: the kernel ends its engine (no process of the group is left),
    and a new llmd on the same runtime directory starts and serves."""
    workdir = short_tmpdir("llmd-kill9-")
    config = sim_config(ensure_tiny_model())
    first = LlmdProcess.start(config, workdir=workdir)
    pgid = 0
    try:
        first.wait_ready(timeout_s=30)
        pgid = first.admin_status()["engine"]["pid"]
        assert group_members(pgid)
        first.process.kill()
        first.process.wait(10)
        assert wait_for(lambda: not group_members(pgid), timeout_s=20), group_members(pgid)
    finally:
        first.stop()
        if pgid and group_members(pgid):  # a failed check must not leave the engine running
            os.killpg(pgid, signal.SIGKILL)
    second = LlmdProcess.start(config, workdir=workdir)
    try:
        second.wait_ready(timeout_s=30)
        assert second.admin_status()["engine"]["state"] == "serving"
    finally:
        assert second.stop() == 0


def test_a_group_left_behind_is_stopped_before_the_next_engine() -> None:
    """Pid files left by a killed llmd name groups whose leader is gone and whose child ignores
    SIGTERM, one of its engine and one of an engine this llmd does not run (its canary): the
    next llmd SIGKILLs both (after engine.stop_timeout_s), says so, and serves; the engine's
    file then names its own engine, the canary's is gone."""
    workdir = short_tmpdir("llmd-leftover-")
    run = workdir / "run"
    run.mkdir(mode=0o750)
    pgid, child = leftover_group(run / "engine.pid")
    canary_pgid, canary_child = leftover_group(run / "engine-main-canary.pid")
    # Each group is waited for in turn (the canary's, then the engine's): 2 s each, where
    # etc/sim.toml's 5 s made 10 s of the test's 12.
    config = sim_config(ensure_tiny_model(), engine={"stop_timeout_s": 2.0})
    llmd = LlmdProcess.start(config, workdir=workdir)
    try:
        llmd.wait_ready(timeout_s=60)
        assert not alive(child) and not alive(canary_child)
        log = llmd.log_path.read_text()
        assert f'"pids": [{child}]' in log and f'"pids": [{canary_child}]' in log
        assert log.count("engine_leftover_stopped") == 2
        engine_pid = llmd.admin_status()["engine"]["pid"]
        assert f'"pgid": {engine_pid}' in (run / "engine.pid").read_text()
        assert not (run / "engine-main-canary.pid").exists()
    finally:
        for group_id in (pgid, canary_pgid):
            if group_members(group_id):
                os.killpg(group_id, signal.SIGKILL)
        assert llmd.stop() == 0
    assert not (run / "engine.pid").exists()


def test_only_the_groups_of_unclaimed_pid_files_are_stopped(tmp_path: Path) -> None:
    """`stop_unclaimed` stops the groups of the pid files no engine claims, together (SIGKILL
    after one wait for those that ignore SIGTERM), and removes their files, stale ones too; a
    claimed file and its group are left to their engine's supervisor, and what is not a pid
    file llmd writes (a directory, another name) is left alone."""
    paths = RuntimePaths(tmp_path)
    claimed_pgid, claimed_child = leftover_group(paths.pid_file_of("main"))
    removed = [leftover_group(paths.pid_file_of(name)) for name in ("coder", "main-canary")]
    paths.pid_file_of("gone").write_text('{"pgid": 999999999, "started": 0.0}')
    paths.pid_file_of("dir").mkdir()
    other_pgid, other_child = leftover_group(tmp_path / "engineZ.pid")
    try:
        started = time.monotonic()
        stopped = stop_unclaimed(paths, {paths.pid_file_of("main")}, timeout_s=2.0)
        assert time.monotonic() - started < 4.0  # one wait for both, not one each
        assert stopped == {"coder": [removed[0][1]], "main-canary": [removed[1][1]]}
        assert not any(alive(child) for _, child in removed)
        assert alive(claimed_child) and alive(other_child)
        assert paths.pid_files() == [paths.pid_file_of("main")]
        assert paths.pid_file_of("dir").is_dir() and (tmp_path / "engineZ.pid").exists()
    finally:
        for group_id in (claimed_pgid, other_pgid, *(pgid for pgid, _ in removed)):
            if group_members(group_id):
                os.killpg(group_id, signal.SIGKILL)


def test_a_reused_pid_is_left_alone(tmp_path: Path) -> None:
    """A record whose leader PID now belongs to a process with another start time names a
    group that is gone: nothing is signalled, the file is removed."""
    stranger = subprocess.Popen(["sleep", "60"], process_group=0)
    try:
        started = psutil.Process(stranger.pid).create_time()
        pid_file = tmp_path / "engine.pid"
        pid_file.write_text(f'{{"pgid": {stranger.pid}, "started": {started - 100}}}')
        assert stop_leftover(pid_file, timeout_s=1.0) == []
        assert alive(stranger.pid) and not pid_file.exists()
        record_engine(pid_file, stranger.pid)
        assert stop_leftover(pid_file, timeout_s=5.0) == [stranger.pid]
        assert stranger.wait(5) == -signal.SIGTERM
    finally:
        stranger.kill()
        stranger.wait()


def test_one_llmd_per_runtime_directory() -> None:
    """A second `llmd serve` on a runtime directory in use exits 1 naming the first one's PID,
    and the first one's engine is untouched."""
    workdir = short_tmpdir("llmd-twice-")
    config = sim_config(ensure_tiny_model())
    first = LlmdProcess.start(config, workdir=workdir)
    try:
        first.wait_ready(timeout_s=30)
        engine = first.admin_status()["engine"]["pid"]
        second = LlmdProcess.start(config, workdir=workdir)
        assert second.process.wait(30) == 1
        assert f"another llmd (pid {first.process.pid})" in second.log_path.read_text()
        assert first.admin_status()["engine"]["pid"] == engine and alive(engine)
    finally:
        assert first.stop() == 0
