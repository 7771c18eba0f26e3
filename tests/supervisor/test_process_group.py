"""The engine runs as the leader of its own process group, inside llmd's session."""

from __future__ import annotations

import os

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
