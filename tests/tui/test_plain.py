"""Text from the daemon or the user is shown as it is in llmd-top, never read as markup: a
closing tag with nothing to close (`[/]`) used to raise MarkupError and close llmd-top, and
`[b]` vanished (llmd/tui/plain.py)."""

from __future__ import annotations

from llmd.tui.app import TopApp
from tests.tui.conftest import FakeDaemon, screen_text, until

SIZE = (160, 48)
ODD = "x[/]y [b]z"  # a stray closing tag, and what would be a style


def flat(app: TopApp) -> str:
    return " ".join(screen_text(app).split())


async def test_a_filter_that_looks_like_markup_is_shown_as_typed() -> None:
    daemon = FakeDaemon()
    app = TopApp(daemon, interval_s=0.05)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.snapshot is not None)
        await pilot.press("slash", *ODD.replace(" ", ""), "enter")
        await until(pilot, lambda: "filter “x[/]y[b]z”" in flat(app))
        assert app.is_running


async def test_names_and_messages_from_the_daemon_are_shown_as_they_are() -> None:
    """A tenant, a GPU, an endpoint and an event message with brackets in them."""
    daemon = FakeDaemon()
    snapshot = daemon.snapshot
    snapshot["tenants"][0]["name"] = f"t-{ODD}"
    snapshot["gpus"] = {"reason": None, "devices": [
        {"index": 0, "name": "NVIDIA g[/]", "utilization": 0.5, "memory_used_bytes": 1 << 30,
         "memory_total_bytes": 8 << 30, "temperature_c": 50, "power_w": 100}
    ]}  # fmt: skip
    snapshot["endpoints"][0]["name"] = f"e-{ODD}"
    snapshot["events"][-1]["message"] = f"m-{ODD}"  # the newest, shown first
    app = TopApp(daemon, interval_s=0.05)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.snapshot is not None)
        for shown in (f"t-{ODD}", "0 g[/]", f"e-{ODD}", f"m-{ODD}"):
            await until(pilot, lambda shown=shown: shown in flat(app))  # type: ignore[misc]
        assert app.is_running


async def test_an_error_and_a_request_id_with_brackets_are_said_as_they_are() -> None:
    """A failed action's notice carries the error's text; the cancel dialog names the request
    id, which a client may choose."""
    daemon = FakeDaemon()
    daemon.snapshot["sequences"][0]["id"] = f"r-{ODD}"
    app = TopApp(daemon, interval_s=0.05)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.snapshot is not None)
        await until(pilot, lambda: f"r-{ODD}" in app.sequences.ids)
        app.sequences.move_cursor(row=app.sequences.ids.index(f"r-{ODD}"))
        await pilot.press("c")
        await until(pilot, lambda: f"Cancel request r-{ODD}?" in flat(app))
        daemon.failure = RuntimeError(f"refused: {ODD}")
        await pilot.press("y")
        await until(pilot, lambda: any(ODD in n.message for n in app._notifications))
        await until(pilot, lambda: f"refused: {ODD}" in flat(app))
        assert app.is_running


async def test_control_characters_from_the_daemon_never_reach_the_terminal() -> None:
    """An ESC in an engine's output line or a model's name, a CR in an endpoint's, a bell in an
    error: each shown as its escape, none written to the terminal as itself."""
    daemon = FakeDaemon()
    snapshot = daemon.snapshot
    snapshot["events"][-1]["message"] = "m-\x1b[31mred\x07"
    snapshot["endpoints"][0]["name"] = "e-\rcr"
    app = TopApp(daemon, interval_s=0.05)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.snapshot is not None)
        for shown in ("m-\\x1b[31mred\\x07", "e-\\x0dcr"):
            await until(pilot, lambda shown=shown: shown in flat(app))  # type: ignore[misc]
        daemon.failure = RuntimeError("refused: \x1b[2J")
        await pilot.press("d", "y")
        await until(pilot, lambda: "refused: \\x1b[2J" in flat(app))
        text = screen_text(app)
        assert not any(c in text for c in "\x1b\x07\r"), repr(text)


async def test_a_long_tenant_name_leaves_the_other_columns_their_headers() -> None:
    daemon = FakeDaemon()
    daemon.snapshot["tenants"][0]["name"] = "t" * 64  # the longest name llmd allows
    app = TopApp(daemon, interval_s=0.05)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: "t" * 20 in flat(app))
        for header in ("in flight", "queued", "kv cache", "budget left"):
            assert header in flat(app), header
