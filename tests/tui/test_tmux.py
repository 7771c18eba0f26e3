"""`llmd-top` in a real terminal: started in a detached tmux session (160x48) against a live
llmd on the simulator, its screen read back with capture-pane. Needs tmux (Debian/Ubuntu
package `tmux`; .ci/run installs it); skipped without it on a developer's machine, never in CI
(CI=true), where a missing tmux fails the test instead."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable

import pytest

from tests.support.llmd_process import REPO, LlmdProcess
from tests.support.streams import STREAM, Stream

pytestmark = pytest.mark.skipif(
    shutil.which("tmux") is None and not os.environ.get("CI"), reason="tmux is not installed"
)


class Tmux:
    """One detached session on a private tmux server (`-L`), so no user session is touched."""

    def __init__(self, command: str) -> None:
        self.server = f"llmd-test-{uuid.uuid4().hex[:8]}"
        env = {**os.environ, "PYTHONPATH": str(REPO), "TERM": "xterm-256color"}
        self.run("new-session", "-d", "-s", "top", "-x", "160", "-y", "48", command, env=env)
        # With no client attached, tmux 3.3 may keep the default 80x24; size the window.
        self.run("resize-window", "-t", "top", "-x", "160", "-y", "48")

    def run(
        self, *args: str, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["tmux", "-L", self.server, *args], capture_output=True, text=True, env=env, timeout=10
        )

    def screen(self) -> str:
        return self.run("capture-pane", "-p", "-t", "top").stdout

    def wait_for(self, condition: Callable[[str], bool], timeout_s: float = 60.0) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            screen = self.screen()
            if condition(screen):
                return screen
            time.sleep(0.2)
        raise AssertionError(f"timed out; screen:\n{self.screen()}")

    def alive(self) -> bool:
        return self.run("has-session", "-t", "top").returncode == 0

    def kill(self) -> None:
        self.run("kill-server")


def test_llmd_top_in_a_real_terminal(llmd: LlmdProcess) -> None:
    """The dashboard draws in tmux with the engine serving and a live stream listed; `?` shows
    the help, `q` quits and the session ends."""
    # 1,000 slow tokens: ~20 s in flight, while llmd-top starts and draws (seconds under load).
    stream = Stream(llmd, "tmux-stream-1", body={**STREAM, "max_tokens": 1000})
    stream.start()
    assert stream.first.wait(10)
    command = f"{sys.executable} -m llmd.tui --runtime-dir {llmd.runtime_dir} --interval 0.5"
    tmux = Tmux(command)
    try:
        screen = tmux.wait_for(lambda s: "SERVING" in s and "tmux-stream-1" in s)
        assert "KV cache" in screen and "recent events" in screen and "sequences" in screen
        assert "no NVIDIA GPU" in screen or "util" in screen
        tmux.run("send-keys", "-t", "top", "?")
        tmux.wait_for(lambda s: "drain: stop admitting" in s)
        tmux.run("send-keys", "-t", "top", "x")
        tmux.wait_for(lambda s: "drain: stop admitting" not in s)
        tmux.run("send-keys", "-t", "top", "q")
        deadline = time.monotonic() + 10
        while tmux.alive() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not tmux.alive()
    finally:
        tmux.kill()
        stream.join(30)
