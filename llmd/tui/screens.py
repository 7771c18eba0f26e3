"""Modal screens: the confirmation every destructive action asks for, and the key help."""

from __future__ import annotations

from typing import Any, Self, TypeVar

from textual import events
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.geometry import Region
from textual.screen import ModalScreen, Screen
from textual.widgets import Static

Answer = TypeVar("Answer")

HELP = """\
[b]d[/]  drain: stop admitting; in-flight requests finish; new ones get 503 + Retry-After
[b]u[/]  resume: admit requests again
[b]r[/]  restart: drain, restart the engines, resume
[b]c[/]  cancel the selected sequence (its client gets an in-band error)
[b]a[/]  abort the deploy in progress (the old release takes all traffic back)
[b]/[/]  filter sequences by id, tenant, class, phase or backend (Esc clears)
[b]s[/]  sort sequences by the next column (again: reverse); clicking a header sorts too
[b]↑ ↓ PgUp PgDn[/]  move through the sequences (or the engines)
[b]w[/]  wake the selected on-demand engine    [b]z[/]  put it to sleep (engines panel)
[b]Tab[/]  to the engines panel (several engines): there d, u and r act on the selected one
[b]?[/]  this help        [b]q[/]  quit

d, r, c, a, w and z ask first: [b]y[/] confirms, any other key cancels.
--readonly removes d, u, r, c, a, w and z."""


class Dialog(ModalScreen[Answer]):
    """A dialog over the dashboard, which shows through dimmed (top.tcss). The panels keep
    taking snapshots behind it, so the dashboard is current the moment the dialog closes; the
    dimmed picture is painted again when the dashboard is laid out again (a panel shown or
    hidden, the footer's keys, a resize), not when only figures change.

    Why: Textual paints a translucent screen's background by blending every cell of the screen
    below, and did it again, whole, at every change below (Textual 8.2: the screen below hands
    its changed regions to the `refresh` of the one on top, whose `render` is a
    `BackgroundScreen` of the whole screen below). The sparkline alone changes at each
    snapshot: a frame under a dialog cost 41-51 ms of CPU against 6-10 ms without (160x50,
    docs/bench/fast-suite.md, sessions 15 and 18). The dimmed figures are context; the
    question is what is read.
    """

    _below: Screen[Any]  # the screen the dialog opened over

    def on_mount(self) -> None:
        self._below = self.app.screen_stack[-2]
        self._below.screen_layout_refresh_signal.subscribe(self, self._laid_out)

    def on_unmount(self) -> None:
        self._below.screen_layout_refresh_signal.unsubscribe(self)

    def _laid_out(self, screen: Screen[Any]) -> None:
        self.refresh()

    def refresh(
        self, *regions: Region, repaint: bool = True, layout: bool = False,
        recompose: bool = False,
    ) -> Self:  # fmt: skip
        """Textual's `refresh`, less the repaints of regions: on a screen, only the screen
        below asks for those (`Screen._compositor_refresh`), when a widget of it changed."""
        if regions and not layout and not recompose:
            return self
        return super().refresh(*regions, repaint=repaint, layout=layout, recompose=recompose)


class ConfirmScreen(Dialog[bool]):
    """Asks `question`; dismissed with True on `y`, False on any other key."""

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Static(self.question, id="question", markup=False)
            yield Static("[b]y[/] confirms · any other key cancels", id="hint")

    def on_key(self, event: events.Key) -> None:
        event.stop()
        event.prevent_default()
        self.dismiss(event.key == "y")


class HelpScreen(Dialog[None]):
    """The keys; any key closes it."""

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Static(HELP, id="help")
            yield Static("any key closes", id="hint")

    def on_key(self, event: events.Key) -> None:
        event.stop()
        event.prevent_default()
        self.dismiss(None)
