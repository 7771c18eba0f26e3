"""Snapshot tests: llmd-top rendering the recorded status (tests/data/status_example.json) as
plain text, compared with tests/tui/snapshots/*.txt. After an intended change of the layout,
rewrite them with `LLMD_UPDATE_SNAPSHOTS=1 pytest tests/tui/test_snapshots.py` and review the
diff."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from llmd.tui.app import TopApp
from tests.tui.conftest import FakeDaemon, example_status, fleet_status, settled_text, until

SNAPSHOTS = Path(__file__).parent / "snapshots"
UPDATE = os.environ.get("LLMD_UPDATE_SNAPSHOTS") == "1"
SIZE = (160, 48)


@pytest.fixture(autouse=True)
def utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Event times are local clock times: render them in UTC."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def assert_snapshot(name: str, text: str) -> None:
    """`text` (trailing spaces dropped) equals snapshots/NAME.txt."""
    screen = "\n".join(line.rstrip() for line in text.splitlines()) + "\n"
    path = SNAPSHOTS / f"{name}.txt"
    if UPDATE:
        path.write_text(screen)
    assert path.exists(), f"no snapshot {path.name}: run with LLMD_UPDATE_SNAPSHOTS=1"
    assert screen == path.read_text(), f"{path.name} differs:\n{screen}"


async def test_dashboard_renders_the_recorded_status() -> None:
    """Every panel of the recorded status under load: header, KV, GPU reason, latency,
    tokens/s, queues, tenants, counts, 40 sequences, recent events, keys."""
    app = TopApp(FakeDaemon(), interval_s=3600)  # one fetch: a fixed sparkline
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.snapshot is not None)
        assert_snapshot("dashboard", await settled_text(pilot))


async def test_dashboard_with_gpus_draining_and_a_restarted_engine() -> None:
    """GPUs in the strip, the DRAINING badge and the last exit reason in the header, queues and
    tenants with limits (a KV share and token budgets: the one with the least left), a warning
    event."""
    status = example_status()
    status["draining"] = True
    status["engine"].update(restarts=2, last_exit_reason="oom_killed")
    status["gpus"] = {
        "devices": [
            {"index": 0, "name": "NVIDIA H100 80GB HBM3", "utilization": 0.93,
             "memory_used_bytes": 75 * 2**30, "memory_total_bytes": 80 * 2**30,
             "temperature_c": 71, "power_w": 612.4},
            {"index": 1, "name": "NVIDIA H100 80GB HBM3", "utilization": 0.0,
             "memory_used_bytes": 2**29, "memory_total_bytes": 80 * 2**30,
             "temperature_c": 35, "power_w": None},
        ],
        "reason": None,
    }  # fmt: skip
    status["queues"][0].update(depth=3, oldest_wait_s=0.42)
    status["queues"][2].update(depth=120, oldest_wait_s=75.0)
    status["tenants"] = [
        {"name": "alice", "in_flight": 4, "queued": 3, "max_in_flight": 8, "max_queued": 64,
         "kv_tokens": 1536, "max_kv_tokens": 4096,
         "budgets": [
             {"name": "input_tokens_per_minute", "limit": 20000, "remaining": 12400,
              "reset_s": 22.8},
             {"name": "output_tokens_per_minute", "limit": 5000, "remaining": 650,
              "reset_s": 52.2},
         ]},
        {"name": "batch-etl", "in_flight": 36, "queued": 120, "max_in_flight": None,
         "max_queued": None, "kv_tokens": 250_112, "max_kv_tokens": None, "budgets": []},
    ]  # fmt: skip
    status["events"].append(
        {"at": status["taken_at"] - 1, "level": "warning", "event": "log_lines_suppressed",
         "message": "message=suppressed 9 similar similar_to=request_finished count=9"}
    )  # fmt: skip
    app = TopApp(FakeDaemon(status), interval_s=3600)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.snapshot is not None)
        assert_snapshot("dashboard_gpus_draining", await settled_text(pilot))


async def test_help_and_confirmation_dialogs() -> None:
    """`?` shows the keys; `d` asks before draining, naming what will happen."""
    app = TopApp(FakeDaemon(), interval_s=3600)  # one fetch: a fixed sparkline
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.snapshot is not None)
        await pilot.press("question_mark")
        assert_snapshot("help", await settled_text(pilot))
        await pilot.press("x")
        await pilot.press("d")
        assert_snapshot("confirm_drain", await settled_text(pilot))


async def test_dashboard_with_several_engines() -> None:
    """Three backends: the engines panel lists each (state, drained, GPU or upstream, KV,
    running, waiting, in flight, restarts) and the sequences show their backend."""
    app = TopApp(FakeDaemon(fleet_status()), interval_s=3600)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.snapshot is not None)
        assert_snapshot("dashboard_engines", await settled_text(pilot))
