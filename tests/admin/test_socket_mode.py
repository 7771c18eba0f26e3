"""The admin socket's access control: mode 0660 owned by the daemon's user and group (root and
the llmd group under systemd), inside a runtime directory of mode 0750."""

from __future__ import annotations

import os
import stat

from tests.support.llmd_process import LlmdProcess
from tests.support.model import ensure_tiny_model
from tests.support.sim_process import sim_config


def test_admin_socket_is_0660_for_the_daemons_group() -> None:
    """A live daemon binds admin.sock as a socket with mode 0660, its uid and gid, in a 0750
    runtime directory (llmd-top and the CLI verbs need the group's write bit)."""
    llmd = LlmdProcess.start(sim_config(ensure_tiny_model()))
    try:
        llmd.wait_ready(timeout_s=30)
        info = os.stat(llmd.runtime_dir / "admin.sock")
        directory = os.stat(llmd.runtime_dir)
    finally:
        llmd.stop()
    assert stat.S_ISSOCK(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o660
    assert (info.st_uid, info.st_gid) == (os.getuid(), os.getgid())
    assert stat.S_IMODE(directory.st_mode) == 0o750
