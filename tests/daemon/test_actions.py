"""Operator actions never race, against a live daemon on the simulator: a second restart, a
resume during a SIGTERM drain and a restart over an operator's drain deadline are refused or
kept apart, with 409 and a message in the CLI and in llmd-top."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator

import httpx
import pytest

from llmd.tui.app import TopApp
from llmd.tui.client import DaemonClient
from tests.support.cli import llmd_verb
from tests.support.llmd_process import LlmdProcess, short_tmpdir
from tests.support.model import ensure_tiny_model
from tests.support.sim_process import sim_config
from tests.support.streams import SLOW, STREAM, Stream
from tests.support.waiting import wait_for
from tests.tui.conftest import screen_text, until

# Each boot of the simulator takes 3 s: a restart stays under way that long.
SLOW_BOOT = (*SLOW, "--fault-boot-delay", "3")


def admin(llmd: LlmdProcess) -> httpx.Client:
    transport = httpx.HTTPTransport(uds=str(llmd.runtime_dir / "admin.sock"))
    return httpx.Client(transport=transport, base_url="http://llmd", timeout=120)


class Restart(threading.Thread):
    """`llmd restart` run in a thread, as its own process (another verb runs meanwhile);
    `result` once it has returned."""

    def __init__(self, llmd: LlmdProcess) -> None:
        super().__init__(daemon=True)
        self.llmd = llmd
        self.result: subprocess.CompletedProcess[str] | None = None

    def run(self) -> None:
        command = [sys.executable, "-m", "llmd.cli", "restart"]
        command += ["--runtime-dir", str(self.llmd.runtime_dir)]
        self.result = subprocess.run(command, capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def llmd() -> Iterator[LlmdProcess]:
    process = LlmdProcess.start(
        sim_config(ensure_tiny_model(), SLOW_BOOT, server={"drain_timeout_s": 60.0})
    )
    process.wait_ready(timeout_s=60)
    yield process
    process.stop()


def engine(llmd: LlmdProcess) -> dict[str, object]:
    status: dict[str, object] = llmd.admin_status()["engine"]
    return status


def test_a_second_restart_is_refused_while_one_is_under_way(llmd: LlmdProcess) -> None:
    """Two restarts at once: the second gets 409 (the CLI says why and exits 1; llmd-top shows
    it), the first restarts the engine once and returns when the new one serves."""
    before = engine(llmd)
    first = Restart(llmd)
    first.start()
    assert wait_for(lambda: engine(llmd)["pid"] != before["pid"], timeout_s=30)
    second = llmd_verb(llmd, "restart")
    with admin(llmd) as client:
        answer = client.post("/restart")
    first.join(60)
    assert second.returncode == 1 and "a restart is under way" in second.stderr
    assert answer.status_code == 409 and answer.json()["error"]["code"] == "action_refused"
    assert first.result is not None and first.result.returncode == 0, first.result
    assert "engine restarted; engine serving" in first.result.stdout
    after = engine(llmd)
    assert after["state"] == "serving" and after["restarts"] == before["restarts"] + 1


async def test_llmd_top_shows_a_refused_restart(llmd: LlmdProcess) -> None:
    """`r`+`y` in llmd-top while a restart is under way: the daemon's refusal is shown."""
    first = Restart(llmd)
    before = engine(llmd)["pid"]
    first.start()
    app = TopApp(DaemonClient(llmd.runtime_dir / "admin.sock"), interval_s=0.25)
    async with app.run_test(size=(160, 48)) as pilot:
        await until(pilot, lambda: app.snapshot is not None)
        await until(
            pilot, lambda: app.snapshot is not None and app.snapshot["engine"]["pid"] != before
        )
        await pilot.press("r", "y")
        await until(pilot, lambda: "a restart is under way" in screen_text(app))
    await asyncio.to_thread(first.join, 60)
    assert first.result is not None and first.result.returncode == 0


def test_resume_during_a_sigterm_drain_is_refused() -> None:
    """While SIGTERM drains a stream, `llmd resume` is refused (exit 1, 409) and admission
    stays closed until llmd has stopped."""
    # A drain deadline far past the stream's 6 s: on a loaded machine (four test workers) the
    # stream outlasted sim.toml's 10 s and ended with the drain's error, not its last token.
    drain = {"drain_timeout_s": 60.0}
    process = LlmdProcess.start(sim_config(ensure_tiny_model(), SLOW, server=drain))
    try:
        process.wait_ready(timeout_s=30)
        stream = Stream(process)
        stream.start()
        assert stream.first.wait(10)
        process.process.send_signal(signal.SIGTERM)
        assert wait_for(
            lambda: httpx.get(process.base_url + "/ready").status_code == 503, timeout_s=10
        )
        resumed = llmd_verb(process, "resume")
        drained = llmd_verb(process, "drain")
        ready = httpx.get(process.base_url + "/ready")
        refused = httpx.post(process.base_url + "/v1/completions", json={**STREAM, "stream": False})
        stream.join(30)
        assert process.process.wait(timeout=30) == 0
    finally:
        process.stop()
    assert resumed.returncode == 1 and "resume refused: llmd is shutting down" in resumed.stderr
    assert drained.returncode == 1 and "shutting down" in drained.stderr
    assert ready.status_code == 503 and refused.json()["error"]["code"] == "draining"
    assert stream.last_event()["choices"][0]["finish_reason"] == "length"


def test_sigterm_ends_a_restart_waiting_for_its_engine_at_once() -> None:
    """SIGTERM while `llmd restart` waits for a new engine that boots for 60 s: the restart is
    answered at once that llmd is stopping (exit 1, not a 500 nor 'engine restarted'), and
    llmd stops cleanly (status 0, no cancelled request in its log) well before that boot."""
    workdir = short_tmpdir("llmd-stop-")
    model = ensure_tiny_model()
    process = LlmdProcess.start(sim_config(model), workdir=workdir)
    try:
        process.wait_ready(timeout_s=60)
        (workdir / "llmd.toml").write_text(sim_config(model, ("--fault-boot-delay", "60")))
        assert "llmd restart" in llmd_verb(process, "reload").stdout
        before = engine(process)["pid"]
        restart = Restart(process)
        restart.start()
        assert wait_for(lambda: engine(process)["pid"] not in (before, None), timeout_s=30)
        process.process.send_signal(signal.SIGTERM)
        restart.join(60)
        assert process.process.wait(timeout=50) == 0, process.log_tail()
    finally:
        process.stop()
    assert restart.result is not None and restart.result.returncode == 1, restart.result
    assert "restart ended: llmd is stopping" in restart.result.stderr, restart.result
    log = process.log_path.read_text()
    assert "CancelledError" not in log and "Exception in ASGI" not in log, log[-3000:]


def test_a_restart_keeps_the_operators_drain_deadline(llmd: LlmdProcess) -> None:
    """`llmd drain --timeout 1` then `llmd restart`: the operator's deadline still ends the
    long stream in-band (the restart's own drain would wait 60 s), the restart goes on, and
    admission stays closed after it until `llmd resume`."""
    stream = Stream(llmd, body={**STREAM, "max_tokens": 1000})  # about 20 s at SLOW
    stream.start()
    assert stream.first.wait(10)
    assert llmd_verb(llmd, "drain", "--timeout", "1").returncode == 0
    restart = Restart(llmd)
    restart.start()
    stream.join(30)
    restart.join(60)
    assert stream.last_event()["error"]["code"] == "draining"
    assert restart.result is not None and restart.result.returncode == 0, restart.result
    assert llmd.admin_status()["draining"] is True
    assert httpx.get(llmd.base_url + "/ready").status_code == 503
    assert llmd_verb(llmd, "resume").returncode == 0
    assert httpx.get(llmd.base_url + "/ready").status_code == 200
