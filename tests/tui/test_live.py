"""llmd-top driven by Pilot against a live llmd on the simulator: every key acts on the real
daemon through the admin socket, a drain with 20 streams in flight, and a daemon that goes
away and comes back."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator

import httpx
import pytest

from llmd.tui.app import TopApp
from llmd.tui.client import DaemonClient
from llmd.tui.screens import HelpScreen
from llmd.tui.sequences import SequenceTable
from tests.support.llmd_process import LlmdProcess, short_tmpdir
from tests.support.model import ensure_tiny_model
from tests.support.sim_process import sim_config
from tests.support.streams import STREAM, Stream
from tests.tui.conftest import screen_text, until

SIZE = (160, 48)
SHORT = {**STREAM, "stream": False, "max_tokens": 3}


def top(llmd: LlmdProcess, **kwargs: object) -> TopApp:
    return TopApp(DaemonClient(llmd.runtime_dir / "admin.sock"), interval_s=0.25, **kwargs)  # type: ignore[arg-type]


async def test_one_engine_drained_by_name_shows_drained_in_the_header(llmd: LlmdProcess) -> None:
    """llmd's only engine drained by name (`POST /drain {"engine": "main"}`): the header says
    DRAINED, not `admitting`, with a note; resumed, it says `admitting` again."""
    app = top(llmd)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: "admitting" in screen_text(app))
        with llmd.admin() as admin:
            assert admin.post("/drain", json={"engine": "main"}).status_code == 200
        try:
            await until(pilot, lambda: "DRAINED: main" in screen_text(app))
            assert "SERVING DRAINED" in screen_text(app) and "admitting" not in screen_text(app)
            note = "engine main drained: it takes no new request"
            await until(pilot, lambda: any(note in n.message for n in app._notifications))
        finally:
            with llmd.admin() as admin:
                assert admin.post("/resume", json={"engine": "main"}).status_code == 200
        await until(pilot, lambda: "admitting" in screen_text(app))
        assert "DRAINED" not in screen_text(app)


async def test_each_key_against_a_live_daemon(llmd: LlmdProcess) -> None:
    """`/` filters, `c`+`y` cancels only the selected stream, `s` sorts, `d` then `n` does
    nothing, `d`+`y` drains, `u` resumes, `r`+`y` restarts the engine, `?` helps, `q` quits."""
    # 1,000 tokens (about 20 s at SLOW), so both are still streaming once llmd-top is up and
    # filtered, however long that takes on a loaded machine (300 tokens, 6 s, were over first).
    long = {**STREAM, "max_tokens": 1000}
    victim, bystander = Stream(llmd, "victim-7", long), Stream(llmd, "bystander-7", long)
    victim.start()
    bystander.start()
    assert victim.first.wait(10) and bystander.first.wait(10)
    app = top(llmd)
    async with app.run_test(size=SIZE) as pilot:
        table = app.query_one(SequenceTable)
        await until(pilot, lambda: {"victim-7", "bystander-7"} <= set(table.ids))
        await pilot.press("slash", *"victim", "enter")
        await until(pilot, lambda: table.ids == ["victim-7"])
        await pilot.press("c", "y")
        await asyncio.to_thread(victim.join, 30)
        assert victim.last_event()["error"]["code"] == "cancelled"
        await pilot.press("escape", "s")
        assert table.sort_by == "ttft_s"

        await pilot.press("d", "n")
        await pilot.pause(0.5)
        assert llmd.admin_status()["draining"] is False
        await pilot.press("d", "y")
        await until(pilot, lambda: "DRAINING" in screen_text(app))
        assert llmd.admin_status()["draining"] is True
        await pilot.press("u")
        await until(pilot, lambda: "admitting" in screen_text(app))
        assert llmd.admin_status()["draining"] is False
        await asyncio.to_thread(bystander.join, 60)
        assert bystander.last_event()["choices"][0]["finish_reason"] == "length"

        pid = llmd.admin_status()["engine"]["pid"]
        await pilot.press("r", "y")
        await until(
            pilot,
            lambda: (
                app.snapshot is not None
                and app.snapshot["engine"]["pid"] != pid
                and app.snapshot["engine"]["state"] == "serving"
            ),
            timeout_s=60,
        )
        await until(pilot, lambda: any("engine restarted" in n.message for n in app._notifications))

        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("x", "q")
        await pilot.pause()
    assert app.return_code == 0 and not app.is_running


async def test_drain_from_the_tui_with_20_streams_in_flight(llmd: LlmdProcess) -> None:
    """`d`+`y` with 20 streams in flight: all 20 complete, a new request gets 503 `draining`
    with Retry-After; `u` restores service."""
    streams = [Stream(llmd) for _ in range(20)]
    for stream in streams:
        stream.start()
    assert all(stream.first.wait(15) for stream in streams)
    app = top(llmd)
    async with httpx.AsyncClient(base_url=llmd.base_url, timeout=30) as client:
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.snapshot is not None and app.snapshot["in_flight"] >= 20)
            await pilot.press("d", "y")
            await until(pilot, lambda: app.snapshot is not None and app.snapshot["draining"])
            refused = await client.post("/v1/completions", json=SHORT)
            for stream in streams:
                await asyncio.to_thread(stream.join, 60)
            await until(pilot, lambda: app.snapshot is not None and app.snapshot["in_flight"] == 0)
            await pilot.press("u")
            await until(pilot, lambda: app.snapshot is not None and not app.snapshot["draining"])
        served = await client.post("/v1/completions", json=SHORT)
    assert all(s.last_event()["choices"][0]["finish_reason"] == "length" for s in streams)
    assert refused.status_code == 503 and refused.json()["error"]["code"] == "draining"
    assert int(refused.headers["retry-after"]) >= 1
    assert served.status_code == 200


async def test_a_rejection_shows_as_a_rejection(llmd: LlmdProcess) -> None:
    """A request refused by admission (a bad x-llmd-deadline-ms) is counted under `rejected`
    with its code (the counts panel's total, the endpoints panel's `completions` row), and not
    under `errors`."""
    app = top(llmd)
    async with (
        httpx.AsyncClient(base_url=llmd.base_url, timeout=30) as client,
        app.run_test(size=SIZE) as pilot,
    ):
        await until(pilot, lambda: app.snapshot is not None)
        assert app.snapshot is not None
        before = app.snapshot["counts"]
        bad = {"x-llmd-deadline-ms": "soon"}
        assert (await client.post("/v1/completions", json=SHORT, headers=bad)).status_code == 400

        def counted() -> bool:
            counts = app.snapshot["counts"] if app.snapshot else before
            was = before["rejections"].get("invalid_request", 0)
            return bool(counts["rejections"].get("invalid_request", 0) == was + 1)

        await until(pilot, counted)
        assert app.snapshot is not None
        assert app.snapshot["counts"]["errors"] == before["errors"]
        rejected = sum(app.snapshot["counts"]["rejections"].values())
        ends = {e["name"]: e["rejected"] for e in app.snapshot["endpoints"]}
        rows = (
            rf"rejected {rejected} [^│]*invali",
            rf"completions 0 0 [\d.]+ \d+ {ends['completions']} 0",
        )
        shown = lambda: all(re.search(row, " ".join(screen_text(app).split())) for row in rows)  # noqa: E731
        await until(pilot, shown)


@pytest.fixture
def workdir() -> Iterator[object]:
    yield short_tmpdir("llmd-top-")


async def test_daemon_going_away_and_coming_back(workdir: object) -> None:
    """llmd stops: the header says NOT CONNECTED; a new llmd on the same runtime directory is
    picked up again and announced as a new daemon process."""
    config = sim_config(ensure_tiny_model())
    first = await asyncio.to_thread(LlmdProcess.start, config, workdir)  # type: ignore[arg-type]
    await asyncio.to_thread(first.wait_ready, 30)
    app = top(first)
    second: LlmdProcess | None = None
    try:
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.link.connected)
            await asyncio.to_thread(first.stop)
            await until(pilot, lambda: "NOT CONNECTED" in screen_text(app))
            second = await asyncio.to_thread(LlmdProcess.start, config, workdir)  # type: ignore[arg-type]
            await until(pilot, lambda: app.link.connected, timeout_s=30)
            await pilot.pause(0.3)
            notices = [n.message for n in app._notifications]
            assert "llmd restarted: this is a new daemon process" in notices
            assert "NOT CONNECTED" not in screen_text(app)
    finally:
        first.stop()
        if second is not None:
            second.stop()
