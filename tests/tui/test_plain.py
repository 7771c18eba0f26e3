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
