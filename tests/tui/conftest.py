"""llmd-top test support: a fake daemon client serving a recorded status, the screen as plain
text, a live daemon on the simulator, and a wait helper for Pilot."""

from __future__ import annotations

import copy
import io
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from textual.app import App
from textual.pilot import Pilot

from llmd.tui.client import AdminUnreachable, Answer, Snapshot
from tests.support.llmd_process import LlmdProcess
from tests.support.model import ensure_tiny_model
from tests.support.sim_process import sim_config
from tests.support.streams import SLOW

EXAMPLE = Path(__file__).parents[1] / "data" / "status_example.json"


def example_status() -> Snapshot:
    snapshot: Snapshot = json.loads(EXAMPLE.read_text())
    return snapshot


class FakeDaemon:
    """Stands in for DaemonClient: serves `snapshot` (the recorded one by default), records
    actions. `reachable = False`: every call fails as a missing daemon does; `failure`: every
    call raises it (a fault the client did not foresee). `fetches` counts status calls."""

    def __init__(self, snapshot: Snapshot | None = None) -> None:
        self.socket = Path("/run/llmd/admin.sock")
        self.snapshot = copy.deepcopy(snapshot) if snapshot is not None else example_status()
        self.reachable = True
        self.failure: Exception | None = None
        self.calls: list[str] = []
        self.fetches = 0

    async def status(self) -> Snapshot:
        self.fetches += 1
        self._answer()
        return copy.deepcopy(self.snapshot)

    def _answer(self) -> None:
        if self.failure is not None:
            raise self.failure
        if not self.reachable:
            raise AdminUnreachable(f"no llmd daemon answers on {self.socket}")

    async def drain(self, engine: str | None = None) -> Answer:
        return self._act("drain", engine)

    async def resume(self, engine: str | None = None) -> Answer:
        return self._act("resume", engine)

    async def restart(self, engine: str | None = None) -> Answer:
        return self._act("restart", engine)

    def _act(self, what: str, engine: str | None) -> Answer:
        """Record `what` ('drain', or 'drain pb' for one engine)."""
        self._answer()
        self.calls.append(what if engine is None else f"{what} {engine}")
        return {}

    async def rollback(self, engine: str | None = None) -> Answer:
        return self._act("rollback", engine)

    async def wake(self, engine: str) -> Answer:
        return self._act("wake", engine)

    async def sleep(self, engine: str) -> Answer:
        return self._act("sleep", engine)

    async def cancel(self, request_id: str) -> Answer:
        self._answer()
        self.calls.append(f"cancel {request_id}")
        return {}


def screen_text(app: App[Any]) -> str:
    """What the terminal shows, as plain text (the same render as `export_screenshot`)."""
    width, height = app.size
    console = Console(
        width=width, height=height, file=io.StringIO(), record=True, color_system=None
    )
    screens = app._background_screens  # a modal dialog shows over the dashboard
    console.print(app.screen._compositor.render_update(full=True, screen_stack=screens))
    return console.export_text(styles=False)


async def until(pilot: Pilot[Any], condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    """Let the app run until `condition()` holds. Raises AssertionError on timeout."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s; screen:\n{screen_text(pilot.app)}")
        await pilot.pause(0.05)


async def settled_text(pilot: Pilot[Any], timeout_s: float = 10.0) -> str:
    """The screen once the footer lists the keys (it is composed after the panels) and two
    captures 0.1 s apart agree (layout and cursor done)."""
    await until(pilot, lambda: "quit" in screen_text(pilot.app).splitlines()[-1], timeout_s)
    deadline = time.monotonic() + timeout_s
    before = screen_text(pilot.app)
    while True:
        await pilot.pause(0.1)
        now = screen_text(pilot.app)
        if now == before or time.monotonic() > deadline:
            return now
        before = now


@pytest.fixture(scope="package")
def llmd() -> Iterator[LlmdProcess]:
    """A live llmd on the simulator with slow steps (streams last seconds), shared by the live
    and tmux tests (each leaves it serving and admitting). The stall watchdog is set past any
    test's length: the tmux test's request hangs in the simulator on purpose."""
    quiet = {"stall_timeout_s": 3600.0, "request_idle_timeout_s": 3600.0}
    process = LlmdProcess.start(sim_config(ensure_tiny_model(), SLOW, engine=quiet))
    process.wait_ready(timeout_s=30)
    yield process
    process.stop()


def fleet_status() -> Snapshot:
    """The recorded status with three backends: engines pa and pb (pb drained) serving `tiny`,
    and an upstream `lab` whose breaker is open."""
    snapshot = example_status()
    engine = snapshot["engines"][0]
    snapshot["engines"] = [
        {**engine, "name": "pa", "gpus": ["0"], "in_flight": 25},
        {**engine, "name": "pb", "gpus": ["1"], "in_flight": 4, "draining": True},
        {
            **engine, "name": "lab", "kind": "upstream", "state": "unreachable", "pid": None,
            "model": "big", "gpus": [], "url": "http://10.0.0.5:8000", "breaker": "open",
            "in_flight": 0, "restarts": 0, "kv_usage": None, "running": None, "waiting": None,
        },
    ]  # fmt: skip
    for i, sequence in enumerate(snapshot["sequences"]):
        if sequence["backend"] is not None:
            sequence["backend"] = "pb" if i % 5 == 0 else "pa"
    return snapshot
