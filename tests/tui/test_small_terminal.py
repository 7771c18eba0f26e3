"""llmd-top on a short terminal (80x24 is a common one): the header stays on top from the
start and the sequence table keeps rows; panels shrink or fold (llmd/tui/top.tcss)."""

from __future__ import annotations

import pytest

from llmd.tui.app import TopApp
from tests.tui.conftest import FakeDaemon, screen_text, until


@pytest.mark.parametrize("size", [(80, 24), (160, 20)])
async def test_the_header_and_sequence_rows_are_on_screen_from_the_start(
    size: tuple[int, int],
) -> None:
    """At start-up the header is the top of the screen and at least two sequences are listed."""
    app = TopApp(FakeDaemon(), interval_s=0.05)
    async with app.run_test(size=size) as pilot:
        await until(pilot, lambda: len(app.sequences.ids) == 40)
        first_two = app.sequences.ids[:2]
        await until(pilot, lambda: all(i in screen_text(app) for i in first_two), timeout_s=3)
        top = "".join(screen_text(app).splitlines()[:3])
        assert "engine" in top and "SERVING" in top and "connected to" in top


@pytest.mark.parametrize("size", [(80, 24), (160, 20)])
async def test_without_a_daemon_the_header_says_so_on_top(size: tuple[int, int]) -> None:
    """No daemon: the reason llmd-top is not connected is on the top lines from the start."""
    daemon = FakeDaemon()
    daemon.reachable = False
    app = TopApp(daemon, interval_s=0.05)
    async with app.run_test(size=size) as pilot:
        await until(pilot, lambda: daemon.fetches >= 10)  # laid out and refreshed, settled
        await until(
            pilot,
            lambda: "no llmd daemon answers" in "".join(screen_text(app).splitlines()[:3]),
            timeout_s=3,
        )
        assert "request id" in screen_text(app)  # the sequence table's header is on screen
