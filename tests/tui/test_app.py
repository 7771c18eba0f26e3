"""llmd-top's behaviour against a fake daemon (no processes): confirmations, --readonly,
filter, sort, losing and finding the daemon again, and the `llmd-top` arguments."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.app import ComposeResult

import llmd.tui.app
from llmd.tui.app import TopApp
from llmd.tui.cli import _parser
from llmd.tui.deploys import in_progress
from llmd.tui.engines import EngineTable
from llmd.tui.link import changes
from llmd.tui.screens import ConfirmScreen
from llmd.tui.sequences import SequenceTable
from tests.tui.conftest import FakeDaemon, example_status, fleet_status, screen_text, until

SIZE = (160, 48)


async def test_destructive_keys_ask_and_only_y_confirms() -> None:
    """d, r and c act only after `y`; any other key cancels; u needs no confirmation."""
    daemon = FakeDaemon()
    app = TopApp(daemon)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.snapshot is not None)
        for key in ("d", "r", "c"):
            await pilot.press(key, "n")
        await pilot.press("d", "escape")
        assert daemon.calls == []
        selected = app.query_one(SequenceTable).selected_id
        await pilot.press("d", "y", "r", "y", "c", "y", "u")
        await until(pilot, lambda: len(daemon.calls) == 4)
        assert sorted(daemon.calls) == sorted(["drain", "restart", f"cancel {selected}", "resume"])


async def test_readonly_removes_the_controls() -> None:
    """--readonly: d, u, r, c do nothing and are not offered in the footer."""
    daemon = FakeDaemon()
    app = TopApp(daemon, readonly=True)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.snapshot is not None)
        await pilot.press("d", "y", "u", "r", "y", "c", "y")
        await pilot.pause()
        footer = screen_text(app).splitlines()[-1]
        assert daemon.calls == [] and "drain" not in footer and "quit" in footer


async def test_filter_and_sort_the_sequences() -> None:
    """`/` filters by id, tenant, class or phase; `s` moves the sort to the next column; a
    header click sorts by that column and again reverses it."""
    app = TopApp(FakeDaemon())
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.snapshot is not None)
        table = app.query_one(SequenceTable)
        await pilot.press("slash", *"decode", "enter")
        assert table.ids and len(table.ids) < 40
        assert table.border_title is not None and "filter “decode”" in table.border_title
        await pilot.press("escape")
        assert len(table.ids) == 40
        await pilot.press("s")
        assert table.sort_by == "ttft_s"
        table.sort_on("output_tokens")
        app._reshow()
        outputs = [s["output_tokens"] for s in map(app_sequence(app), table.ids)]
        assert outputs == sorted(outputs, reverse=True)
        table.sort_on("output_tokens")
        app._reshow()
        outputs = [s["output_tokens"] for s in map(app_sequence(app), table.ids)]
        assert outputs == sorted(outputs)


def app_sequence(app: TopApp):  # type: ignore[no-untyped-def]
    by_id = {s["id"]: s for s in (app.snapshot or {})["sequences"]}
    return by_id.__getitem__


async def test_lost_daemon_is_said_plainly_and_found_again() -> None:
    """The daemon stops answering: NOT CONNECTED with the reason, last snapshot kept; when it
    answers again as a new process, the header is live and the restart is announced."""
    daemon = FakeDaemon()
    app = TopApp(daemon, interval_s=0.05)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.snapshot is not None)
        daemon.reachable = False
        await until(pilot, lambda: "NOT CONNECTED" in screen_text(app))
        screen = screen_text(app)
        assert "no llmd daemon answers on /run/llmd/admin.sock" in screen
        assert "showing the last snapshot" in screen and "SERVING" in screen
        daemon.snapshot["started_at"] += 60
        daemon.reachable = True
        await until(pilot, lambda: "connected to /run/llmd/admin.sock" in screen_text(app))
        await pilot.pause(0.2)
        notices = [n.message for n in app._notifications]
        assert "llmd restarted: this is a new daemon process" in notices
        assert "reconnected to llmd" in notices


def test_changes_between_snapshots() -> None:
    """Engine restarts and drain changes become plain sentences; a new daemon says so alone."""
    before = example_status()
    after = example_status()
    after["engine"].update(restarts=1, pid=99, last_exit_reason="oom_killed")
    after["draining"] = True
    assert changes(before, after) == [
        "engine restarted (oom_killed); pid " + str(before["engine"]["pid"]) + " → 99",
        "llmd is draining",
    ]
    after["started_at"] = 1.0
    assert changes(before, after) == ["llmd restarted: this is a new daemon process"]
    assert changes(None, after) == []


def test_arguments() -> None:
    """--socket and --runtime-dir exclude each other; --interval defaults to 1 s."""
    args = _parser().parse_args(["--runtime-dir", "/tmp/x", "--readonly"])
    assert (args.runtime_dir, args.socket, args.readonly, args.interval) == (
        "/tmp/x", None, True, 1.0
    )  # fmt: skip
    with pytest.raises(SystemExit):
        _parser().parse_args(["--socket", "a", "--runtime-dir", "b"])


@pytest.mark.parametrize("text", ["nan", "inf", "-inf", "0", "-1", "1e308", "x"])
def test_top_interval_takes_positive_finite_seconds(
    text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """llmd-top --interval nan (a busy loop), inf, 0 or past 30 days is a usage error (exit 64)."""
    with pytest.raises(SystemExit) as exited:
        _parser().parse_args(["--interval", text])
    assert exited.value.code == 64 and "argument --interval: expected" in capsys.readouterr().err
    assert _parser().parse_args(["--interval", "0.25"]).interval == 0.25


async def test_refresh_goes_on_under_a_dialog() -> None:
    """With the help or a confirmation open, snapshots keep arriving and panels keep updating."""
    daemon = FakeDaemon()
    app = TopApp(daemon, interval_s=0.05)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.snapshot is not None)
        await pilot.press("question_mark")
        daemon.snapshot["in_flight"] = 41
        await until(pilot, lambda: app.snapshot is not None and app.snapshot["in_flight"] == 41)
        assert "in flight 41" in app.header.content.plain
        await pilot.press("x", "d")
        daemon.snapshot["in_flight"] = 42
        await until(pilot, lambda: app.snapshot is not None and app.snapshot["in_flight"] == 42)
        assert "in flight 42" in app.header.content.plain
        await pilot.press("n")
        await until(pilot, lambda: "in flight 42" in screen_text(app))


async def test_a_failed_engine_shows_its_diagnosis_and_hint() -> None:
    """The engine gave up (state failed): the header names the cause and the setting to change,
    and keeps it on screen, dimmed, when the daemon has exited (NOT CONNECTED)."""
    snapshot = example_status()
    snapshot["engine"].update(
        state="failed",
        last_exit_reason="oom",
        diagnosis=[
            {
                "check": "oom",
                "severity": "error",
                "message": "the engine ran out of GPU memory (weights + KV cache + activations)",
                "hint": "lower --max-model-len or --max-num-seqs in engine.args",
                "evidence": "torch.OutOfMemoryError: CUDA out of memory.",
            }
        ],
    )
    daemon = FakeDaemon(snapshot)
    app = TopApp(daemon, interval_s=0.05)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: "DIAGNOSIS" in screen_text(app))
        screen = screen_text(app)
        assert "the engine ran out of GPU memory" in screen
        assert "hint: lower --max-model-len or --max-num-seqs in engine.args" in screen
        daemon.reachable = False
        await until(pilot, lambda: "NOT CONNECTED" in screen_text(app))
        assert "DIAGNOSIS" in screen_text(app)


async def test_a_serving_engine_shows_no_diagnosis_line() -> None:
    """Boot-time slow paths (warnings) do not take header space while the engine serves."""
    snapshot = example_status()
    snapshot["engine"]["diagnosis"] = [
        {"check": "slow_path", "severity": "warning", "message": "V1 model runner",
         "hint": "install triton", "evidence": ""},
    ]  # fmt: skip
    app = TopApp(FakeDaemon(snapshot), interval_s=0.05)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.snapshot is not None)
        await pilot.pause()
        assert "DIAGNOSIS" not in screen_text(app)


class ShownBeforeCompose(TopApp):
    """llmd-top handed the recorded snapshot while it composes: no panel (nor the parts of one)
    is composed or mounted yet, as when a first fetch wins the race with the layout."""

    CSS_PATH = Path(llmd.tui.app.__file__).with_name("top.tcss")

    def compose(self) -> ComposeResult:
        self.show(example_status())
        yield from super().compose()


async def test_a_snapshot_shown_before_compose_is_drawn_once_composed() -> None:
    """Every panel takes a snapshot before it is composed and draws it once mounted: the
    tokens/s parts, the sequence table's rows, the tables."""
    daemon = FakeDaemon()
    daemon.reachable = False  # nothing fetched: what shows is what was handed over early
    app = ShownBeforeCompose(daemon, interval_s=0.05)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: daemon.fetches >= 2)
        table = app.query_one(SequenceTable)
        await until(pilot, lambda: len(table.ids) == 40)
        screen = screen_text(app)
        assert "tokens/s generated" in screen and "finished" in screen and "interactive" in screen
        assert "CONNECTING" in screen and app.is_running


async def test_panels_removed_from_the_screen_take_snapshots_without_failing() -> None:
    """With every panel removed, snapshots keep arriving and the header keeps up with them."""
    daemon = FakeDaemon()
    app = TopApp(daemon, interval_s=0.05)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.snapshot is not None)
        for panel in (app.kv, app.gpu, app.latency, app.throughput, app.queues, app.tenants,
                      app.counts, app.sequences, app.events):  # fmt: skip
            await panel.remove()
        daemon.snapshot["in_flight"] = 41
        await until(pilot, lambda: "in flight 41" in screen_text(app))
        fetched = daemon.fetches
        await until(pilot, lambda: daemon.fetches >= fetched + 3)
        assert app.link.fault is None and app.is_running


async def test_a_failing_fetch_is_shown_and_polling_goes_on() -> None:
    """A fetch that raises what the client did not foresee: the header says it, the last
    snapshot stays, polling goes on and finds the daemon again; a failing action is a notice."""
    daemon = FakeDaemon()
    app = TopApp(daemon, interval_s=0.05)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.snapshot is not None)
        daemon.failure = RuntimeError("the socket caught fire")
        await until(pilot, lambda: "RuntimeError: the socket caught fire" in screen_text(app))
        screen = screen_text(app)
        assert "NOT CONNECTED" in screen and "showing the last snapshot" in screen
        fetched = daemon.fetches
        await until(pilot, lambda: daemon.fetches >= fetched + 3)
        await pilot.press("u")
        await until(
            pilot,
            lambda: (
                "resume failed: RuntimeError: the socket caught fire"
                in [n.message for n in app._notifications]
            ),
        )
        daemon.failure = None
        await until(pilot, lambda: "connected to /run/llmd/admin.sock" in screen_text(app))
        assert app.is_running


async def test_a_snapshot_that_cannot_be_shown_is_said_and_polling_goes_on() -> None:
    """A snapshot a panel cannot read (a key missing): the header says SNAPSHOT NOT SHOWN with
    the error, the last snapshot shown stays, and the next good snapshot is shown again."""
    daemon = FakeDaemon()
    app = TopApp(daemon, interval_s=0.05)
    shown = example_status()["in_flight"]
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.snapshot is not None)
        del daemon.snapshot["kv_cache"]
        daemon.snapshot["in_flight"] = 41
        await until(pilot, lambda: "SNAPSHOT NOT SHOWN" in screen_text(app))
        screen = screen_text(app)
        assert "KeyError: 'kv_cache'" in screen and "showing the last snapshot shown" in screen
        assert app.snapshot is not None and app.snapshot["in_flight"] == shown
        fetched = daemon.fetches
        await until(pilot, lambda: daemon.fetches >= fetched + 3)
        daemon.snapshot["kv_cache"] = example_status()["kv_cache"]
        await until(pilot, lambda: "connected to /run/llmd/admin.sock" in screen_text(app))
        assert "in flight 41" in screen_text(app) and app.is_running


async def test_engine_keys_act_on_the_selected_engine() -> None:
    """With several engines, Tab focuses the engines panel: there d and r (confirmed with y)
    and u act on the engine under the cursor; back on the sequences they act on all of llmd.
    With one engine the panel is hidden."""
    daemon = FakeDaemon(fleet_status())
    app = TopApp(daemon)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.snapshot is not None)
        table = app.query_one(EngineTable)
        assert table.display and table.names == ["pa", "pb", "lab"]
        table.focus()
        await pilot.press("down")
        assert table.selected() == "pb"
        await pilot.press("d")
        assert "Drain engine pb?" in screen_text(app) and "the 4 in flight" in screen_text(app)
        await pilot.press("y", "u", "r", "y")
        await until(pilot, lambda: len(daemon.calls) == 3)
        assert daemon.calls == ["drain pb", "resume pb", "restart pb"]
        app.query_one(SequenceTable).focus()
        await pilot.press("d", "y")
        await until(pilot, lambda: len(daemon.calls) == 4)
        assert daemon.calls[-1] == "drain"
    single = TopApp(FakeDaemon())
    async with single.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: single.snapshot is not None)
        assert not single.query_one(EngineTable).display


async def test_w_and_z_wake_and_sleep_the_selected_engine_once_confirmed() -> None:
    """In the engines panel, w asks to wake the selected engine and z to put it to sleep; `y`
    sends it, any other key does not; outside the panel they say to select an engine."""
    daemon = FakeDaemon(fleet_status())
    app = TopApp(daemon)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.snapshot is not None)
        await pilot.press("w")
        await until(pilot, lambda: any("select an engine" in n.message for n in app._notifications))
        table = app.query_one(EngineTable)
        table.focus()
        await pilot.press("down")
        await pilot.press("w")
        assert "Wake engine pb?" in screen_text(app)
        await pilot.press("n", "z")
        assert "Put engine pb to sleep?" in screen_text(app)
        await pilot.press("y")
        await until(pilot, lambda: daemon.calls == ["sleep pb"])


async def test_r_on_an_asleep_engine_says_it_is_not_woken() -> None:
    """r on an engine asleep on demand asks whether to restart it saying that llmd does not
    wake it (its next wake boots a fresh process); `y` sends the restart."""
    status = fleet_status()
    next(e for e in status["engines"] if e["name"] == "pb")["state"] = "asleep"
    daemon = FakeDaemon(status)
    app = TopApp(daemon)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.snapshot is not None)
        table = app.query_one(EngineTable)
        table.focus()
        await pilot.press("down", "r")
        assert "It is asleep on demand: llmd does not wake it" in screen_text(app)
        await pilot.press("y")
        await until(pilot, lambda: daemon.calls == ["restart pb"])


async def test_an_upstream_row_offers_drain_but_says_why_it_cannot_restart() -> None:
    """On an upstream's row of the engines panel, d (confirmed) drains that upstream; r asks
    nothing and calls nothing: a note says llmd does not run it, so cannot restart it."""
    daemon = FakeDaemon(fleet_status())
    app = TopApp(daemon)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.snapshot is not None)
        table = app.query_one(EngineTable)
        table.focus()
        await pilot.press("down", "down")
        assert table.selected() == "lab"
        await pilot.press("r")
        await until(pilot, lambda: any("upstream" in n.message for n in app._notifications))
        assert not isinstance(app.screen, ConfirmScreen) and daemon.calls == []
        assert any("cannot restart it" in n.message for n in app._notifications)
        await pilot.press("d")
        assert "Drain upstream lab?" in screen_text(app)
        await pilot.press("y")
        await until(pilot, lambda: daemon.calls == ["drain lab"])


async def test_a_deploy_in_progress_is_shown_and_a_aborts_it_once_confirmed() -> None:
    """The header names the engine's release and the deploy under way (phase, step, share,
    verdict); `a` asks first, and `y` sends the rollback that aborts it."""
    status = example_status()
    status["engine"]["release"] = "r1"
    status["deploys"] = [
        {"deploy": "d1", "engine": "main", "strategy": "canary", "old": "r1", "new": "r2",
         "phase": "canary", "step": 2, "steps": [5, 25, 50, 100], "share": 25,
         "verdict": {"decision": "hold", "reason": "12 of 50 requests"}, "reason": None},
    ]  # fmt: skip
    daemon = FakeDaemon(status)
    app = TopApp(daemon)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.snapshot is not None)
        text = screen_text(app)
        assert "release r1" in text
        assert "DEPLOY  main r1 → r2 · canary · canary · step 2/4 · share 25%" in text
        assert "verdict hold (12 of 50 requests)" in text
        await pilot.press("a")
        assert "Abort the deploy of r2 on engine main?" in screen_text(app)
        await pilot.press("n")
        assert daemon.calls == []
        await pilot.press("a", "y")
        await until(pilot, lambda: daemon.calls == ["rollback main"])


async def test_a_without_a_deploy_in_progress_does_nothing() -> None:
    """With no deploy under way, `a` says so and calls nothing."""
    daemon = FakeDaemon()
    app = TopApp(daemon)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.snapshot is not None)
        await pilot.press("a", "y")
        assert daemon.calls == []


def test_a_deploy_cut_by_llmds_stop_is_not_in_progress() -> None:
    """A deploy `interrupted` by llmd's stop has ended: `a` would have nothing to abort."""
    assert not in_progress({"phase": "interrupted"}) and in_progress({"phase": "booting_new"})


async def test_the_endpoints_panel_follows_the_snapshots() -> None:
    """The endpoints panel shows each endpoint's row as the daemon sends it, says when no
    request came yet, and when the daemon is older than the panel (no `endpoints`)."""
    snapshot = example_status()
    del snapshot["endpoints"]
    daemon = FakeDaemon(snapshot)
    app = TopApp(daemon, interval_s=0.05)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: "does not report them" in screen_text(app))
        daemon.snapshot["endpoints"] = []
        await until(pilot, lambda: "no request yet" in screen_text(app))
        daemon.snapshot["endpoints"] = [
            {"name": "embeddings", "in_flight": 7, "queued": 120, "requests": 4321,
             "answered": 4300, "rejected": 20, "cancelled": 0, "aborted": 0, "errors": 1,
             "requests_per_s": 12.5},
        ]  # fmt: skip
        row = "embeddings 7 120 12.5 4,321 20 1"
        await until(pilot, lambda: row in " ".join(screen_text(app).split()))


async def test_the_engine_side_shows_the_prefix_cache_hit_ratio_and_since_start() -> None:
    """The engine-side row gives the prefix cache's hit ratio over the last minute, then since
    the engine started, as the snapshot's `engines[].latency` has them."""
    snapshot = example_status()
    (engine,) = snapshot["engines"]
    engine["latency"]["prefix_cache_hit_ratio"] = 0.86
    engine["latency"]["prefix_cache_hit_ratio_total"] = 0.5
    app = TopApp(FakeDaemon(snapshot), interval_s=0.05)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: "86% 50%" in " ".join(screen_text(app).split()))


async def test_s_moves_the_sort_arrow_at_once_even_with_no_sequences() -> None:
    """`s` moves the header's ▼ to the next column at once, with no row changing (an empty
    table kept it on the old column)."""
    daemon = FakeDaemon()
    daemon.snapshot["sequences"] = []
    app = TopApp(daemon, interval_s=0.05)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: "age ▼" in screen_text(app))
        await pilot.press("s")
        await until(pilot, lambda: "TTFT ▼" in screen_text(app), timeout_s=3)
        assert "age ▼" not in screen_text(app)
