"""The engine process group: its own group inside llmd's session, pausing it (the device pause),
stopping it, and emptying its internal sockets' directory."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading
from pathlib import Path

import uvloop

from llmd.engine.launch import RPC_BASE_ENV, EngineLaunch
from llmd.supervisor.group import group_members
from llmd.supervisor.process import EngineProcess
from tests.support.llmd_process import LlmdProcess
from tests.support.model import ensure_tiny_model
from tests.support.sim_process import sim_config
from tests.support.waiting import until, wait_for


def test_engine_leads_its_own_group_in_llmds_session() -> None:
    """The engine child leads a new process group (so llmd can signal all of it) but stays in
    llmd's session (so autogroup scheduling puts it in llmd's CPU group, not one of its own)."""
    llmd = LlmdProcess.start(sim_config(ensure_tiny_model(), ()))
    try:
        llmd.wait_ready(timeout_s=30)
        engine_pid = llmd.admin_status()["engine"]["pid"]
        assert os.getpgid(engine_pid) == engine_pid
        assert os.getpgid(llmd.process.pid) != engine_pid
        assert os.getsid(engine_pid) == os.getsid(llmd.process.pid)
    finally:
        llmd.stop()


async def test_a_wait_in_progress_survives_stop_group(tmp_path: Path) -> None:
    """stop_group cancels the output pump; a wait() already past the leader's exit and
    draining that pump still returns the exit status instead of ending cancelled."""
    # The leader exits at once; the sleep it leaves behind keeps the output pipe open, so the
    # pump is still running when the wait reaches it.
    launch = EngineLaunch(("sh", "-c", "sleep 30 & exit 0"), {}, tmp_path / "engine.sock")
    process = await EngineProcess.spawn(launch, lambda level, line: None)
    exited = asyncio.create_task(process.wait())
    await asyncio.sleep(0.5)
    assert not exited.done()  # the leader is gone; the wait is on the pump
    await process.stop_group(timeout_s=2.0)
    assert await exited == 0
    assert group_members(process.pgid) == []


def test_the_engine_is_spawned_only_from_the_main_thread(tmp_path: Path) -> None:
    """The parent-death signal follows the thread that forks: a spawn from any other thread
    (where the engine would die with that thread) is refused."""
    launch = EngineLaunch(("true",), {}, tmp_path / "engine.sock")
    errors: list[BaseException] = []

    def spawn_in_a_thread() -> None:
        try:
            asyncio.run(EngineProcess.spawn(launch, lambda level, line: None))
        except RuntimeError as exc:
            errors.append(exc)

    thread = threading.Thread(target=spawn_in_a_thread)
    thread.start()
    thread.join(10)
    assert errors and "main thread" in str(errors[0])


async def test_the_engine_runs_niced_by_engine_nice(tmp_path: Path) -> None:
    """`EngineLaunch.nice` (engine.nice) is added to the child's niceness, and the processes
    it starts inherit it; llmd's own niceness is unchanged."""
    probe = "import os, subprocess; print(os.nice(0)); subprocess.run(['nice'])"
    launch = EngineLaunch((sys.executable, "-c", probe), {}, tmp_path / "engine.sock", nice=7)
    lines: list[str] = []
    process = await EngineProcess.spawn(launch, lambda level, line: lines.append(line))
    assert await process.wait() == 0
    own = os.nice(0)
    assert list(process.output.recent)[-2:] == [str(own + 7), str(own + 7)]


async def test_the_engine_gets_sigterm_when_its_parent_dies(tmp_path: Path) -> None:
    """The child's parent-death signal is SIGTERM (read from /proc: PR_GET_PDEATHSIG)."""
    probe = (
        "import ctypes, signal; sig = ctypes.c_int(); "
        "ctypes.CDLL(None).prctl(2, ctypes.byref(sig), 0, 0, 0); print(sig.value)"
    )
    launch = EngineLaunch((sys.executable, "-c", probe), {}, tmp_path / "engine.sock")
    lines: list[str] = []
    process = await EngineProcess.spawn(launch, lambda level, line: lines.append(line))
    assert await process.wait() == 0
    assert process.output.recent[-1] == str(int(signal.SIGTERM))


def test_the_leaders_exit_is_seen_while_an_orphan_holds_the_output(tmp_path: Path) -> None:
    """On uvloop (the loop `llmd serve` runs), leader_exited returns the leader's code as soon
    as it is gone, while a process it left in the group still holds the output pipe (vLLM's
    engine core outliving its API server): the supervisor stops routing to it at once."""

    async def scenario() -> tuple[int, bool]:
        launch = EngineLaunch(("sh", "-c", "sleep 30 & exit 3"), {}, tmp_path / "engine.sock")
        process = await EngineProcess.spawn(launch, lambda level, line: None)
        try:
            code = await asyncio.wait_for(process.leader_exited(), 10)
            return code, process._pump.done()
        finally:
            await process.stop_group(timeout_s=2.0)

    code, output_closed = uvloop.run(scenario())
    assert code == 3 and not output_closed


def process_states(pgid: int) -> set[str]:
    """The states (/proc's letter: T stopped, S sleeping...) of the group's processes."""
    states = set()
    for pid in group_members(pgid):
        with open(f"/proc/{pid}/stat") as stat:
            states.add(stat.read().rsplit(")", 1)[1].split()[0])
    return states


async def test_pause_stops_the_whole_group_and_a_paused_group_still_stops(tmp_path: Path) -> None:
    """`pause(True)` stops every process of the group (the leader and its child), `pause(False)`
    lets them go on; a group stopped by a pause still ends at stop_group's SIGTERM."""
    launch = EngineLaunch(("sh", "-c", "sleep 60 & wait"), {}, tmp_path / "engine.sock")
    process = await EngineProcess.spawn(launch, lambda level, line: None)
    assert await asyncio.to_thread(wait_for, lambda: len(group_members(process.pgid)) == 2, 10)
    process.pause(True)
    assert await asyncio.to_thread(wait_for, lambda: process_states(process.pgid) == {"T"}, 10)
    process.pause(False)
    assert await asyncio.to_thread(wait_for, lambda: "T" not in process_states(process.pgid), 10)
    process.pause(True)
    assert await asyncio.to_thread(wait_for, lambda: process_states(process.pgid) == {"T"}, 10)
    await process.stop_group(timeout_s=30.0)
    assert process.proc.returncode == -signal.SIGTERM and group_members(process.pgid) == []


async def test_a_group_someone_else_stopped_ends_at_sigterm(tmp_path: Path) -> None:
    """A group stopped by a SIGSTOP llmd did not send (an operator's, a debugger's) still ends
    at stop_group's SIGTERM, followed by SIGCONT, not at the SIGKILL after the timeout."""
    launch = EngineLaunch(("sh", "-c", "sleep 60 & wait"), {}, tmp_path / "engine.sock")
    process = await EngineProcess.spawn(launch, lambda level, line: None)
    assert await asyncio.to_thread(wait_for, lambda: len(group_members(process.pgid)) == 2, 10)
    os.killpg(process.pgid, signal.SIGSTOP)
    assert await asyncio.to_thread(wait_for, lambda: process_states(process.pgid) == {"T"}, 10)
    await process.stop_group(timeout_s=30.0)
    assert process.proc.returncode == -signal.SIGTERM and group_members(process.pgid) == []


# An engine as vLLM leaves its internal sockets: it says what its VLLM_RPC_BASE_PATH holds at
# start, binds a Unix socket there, and writes one more file there as SIGTERM ends it.
RPC_ENGINE = """
import os, signal, socket, sys
base = os.environ["VLLM_RPC_BASE_PATH"]
print("found:" + ",".join(sorted(os.listdir(base))), flush=True)
def leave(signum, frame):
    open(os.path.join(base, "written-at-exit"), "w").close()
    sys.exit(0)
signal.signal(signal.SIGTERM, leave)
socket.socket(socket.AF_UNIX).bind(os.path.join(base, "sock"))
print("bound", flush=True)
signal.pause()
"""


async def test_the_engines_internal_sockets_directory_is_emptied_at_spawn_and_stop(
    tmp_path: Path,
) -> None:
    """Spawn empties the rpc directory of an earlier engine's files before the child starts;
    once the group is stopped, what the engine left there (even as it exited) is gone."""
    rpc_dir = tmp_path / "engine.rpc"
    rpc_dir.mkdir()
    (rpc_dir / "left-by-a-killed-engine").touch()
    env = {RPC_BASE_ENV: str(rpc_dir)}
    argv = (sys.executable, "-c", RPC_ENGINE)
    launch = EngineLaunch(argv, env, tmp_path / "engine.sock", rpc_dir=rpc_dir)
    process = await EngineProcess.spawn(launch, lambda level, line: None)
    assert await until(lambda: "bound" in process.output.recent, 10)
    assert process.output.recent[0] == "found:"
    assert os.listdir(rpc_dir) == ["sock"]
    await process.stop_group(timeout_s=10.0)
    assert process.proc.returncode == 0 and os.listdir(rpc_dir) == []


async def test_spawn_creates_the_rpc_directory_private_and_stop_forgives_it_gone(
    tmp_path: Path,
) -> None:
    """A missing rpc directory is created with mode 0700; one removed while the engine ran
    does not make its stop fail."""
    rpc_dir = tmp_path / "engine-big.rpc"
    launch = EngineLaunch(("sleep", "30"), {}, tmp_path / "engine.sock", rpc_dir=rpc_dir)
    process = await EngineProcess.spawn(launch, lambda level, line: None)
    assert rpc_dir.stat().st_mode & 0o777 == 0o700
    rpc_dir.rmdir()
    await process.stop_group(timeout_s=10.0)
    assert process.proc.returncode == -signal.SIGTERM and not rpc_dir.exists()
