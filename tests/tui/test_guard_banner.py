"""llmd-top's SLO guard banner (Pilot, fake daemon): shown while the guard degrades service or
an operator overrides it, absent at level 0 in automatic mode and from an older daemon."""

from __future__ import annotations

from typing import Any

from llmd.tui.app import TopApp
from tests.tui.conftest import FakeDaemon, example_status, screen_text, until

SIZE = (200, 48)
CLASSES = [
    {"name": "interactive", "p95_s": 1.85, "samples": 40, "budget_s": 1.5},
    {"name": "normal", "p95_s": 2.0, "samples": 12, "budget_s": 6.0},
    {"name": "batch", "p95_s": None, "samples": 0, "budget_s": None},
]


def with_guard(level: int, mode: str, reason: str) -> dict[str, Any]:
    snapshot = example_status()
    names = ["normal", "hold_batch", "cap_max_tokens", "shed_batch", "shed_normal"]
    snapshot["guard"] = {
        "level": level, "name": names[level], "reason": reason, "since_s": 12.0, "mode": mode,
        "classes": CLASSES,
    }  # fmt: skip
    return snapshot


async def screen_of(snapshot: dict[str, Any]) -> str:
    app = TopApp(FakeDaemon(snapshot), interval_s=0.05)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.snapshot is not None)
        await pilot.pause()
        return screen_text(app)


async def test_a_degrading_guard_shows_its_level_why_and_p95_against_budget() -> None:
    """Level 3: the banner names the level, what it does, the reason, and each budgeted
    class's TTFT p95 against its budget."""
    reason = "interactive TTFT p95 1850 ms over its budget 1500 ms (40 requests)"
    screen = await screen_of(with_guard(3, "auto", reason))
    assert "SLO GUARD LEVEL 3  shed_batch · " + reason in screen
    assert "interactive p95 1.9s / budget 1.5s · normal p95 2.0s / budget 6.0s" in screen


async def test_an_override_is_shown_and_a_quiet_guard_is_not() -> None:
    """Turned off or pinned by the operator: said; level 0 in automatic mode, or a daemon
    without a guard: no banner."""
    off = await screen_of(with_guard(0, "off", "turned off by the operator"))
    assert "SLO GUARD OFF  · turned off by the operator" in off
    pinned = await screen_of(with_guard(2, "pinned", "pinned by the operator"))
    assert "SLO GUARD LEVEL 2  cap_max_tokens (pinned) · pinned by the operator" in pinned
    assert "SLO GUARD" not in await screen_of(with_guard(0, "auto", "every class within budget"))
    assert "SLO GUARD" not in await screen_of(example_status())
