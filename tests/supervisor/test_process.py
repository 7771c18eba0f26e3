"""The engine process group: its own group inside llmd's session, and stopping it."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from llmd.engine.launch import EngineLaunch
from llmd.supervisor.process import EngineProcess, group_members
from tests.support.llmd_process import LlmdProcess
from tests.support.model import ensure_tiny_model
from tests.support.sim_process import sim_config


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
