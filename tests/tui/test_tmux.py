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

import httpx
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
        # Textual takes COLUMNS and LINES over the terminal's size; a test worker may have them.
        env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
        env |= {"PYTHONPATH": str(REPO), "TERM": "xterm-256color"}
        # With no client attached tmux may keep its default size: set it before the session.
        self.run(
            "start-server", ";", "set-option", "-g", "default-size", "160x48", ";",
            "new-session", "-d", "-s", "top", "-x", "160", "-y", "48", command,
            env=env,
        )  # fmt: skip

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
    """The dashboard draws in tmux with a live stream listed and a request refused while it
    runs among the recent events; `?` shows the help, `q` quits and the session ends."""
    # A request that hangs in the simulator stays in flight however long llmd-top takes to
    # start and draw on a loaded machine (it ends when the daemon stops).
    stream = Stream(llmd, "tmux-stream-1", body={**STREAM, "sim_fault": "hang"})
    stream.start()
    deadline = time.monotonic() + 30
    while not any(q["id"] == "tmux-stream-1" for q in llmd.admin_status()["sequences"]):
        assert time.monotonic() < deadline, "the hanging request never reached llmd"
        time.sleep(0.1)
    command = f"{sys.executable} -m llmd.tui --runtime-dir {llmd.runtime_dir} --interval 0.5"
    tmux = Tmux(command)
    try:
        # What every terminal size shows: on a small window (tmux may keep 80 columns when no
        # client is attached) the header and the table rows can be cut; the panel titles stay.
        # (Textual paints a frame's panels in turn: each is waited for, not read off one frame.)
        titles = ("sequences · 1 live", "recent events", "queues", "tenants")
        tmux.wait_for(lambda s: all(title in s for title in titles))
        # An event of this test's own, the newest (a refusal: the panel lists lifecycle events
        # and requests that did not succeed). What came before on this llmd depends on which
        # tests shared it, and in what order: it looked for engine_ready, which was the newest
        # only when test_live's restart had run just before.
        refused = httpx.post(
            llmd.base_url + "/v1/completions",
            json={**STREAM, "stream": False, "max_tokens": 5000},
            headers={"x-request-id": "tmux-refused-1"},
            timeout=60,
        )
        assert refused.status_code == 400
        tmux.wait_for(lambda s: "request_finished" in s and "tmux-refused-1" in s)
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
        with llmd.admin() as admin:  # the hanging request would outlast the test by a drain
            admin.post("/requests/tmux-stream-1/cancel")
        stream.join(30)
        assert not stream.is_alive()
