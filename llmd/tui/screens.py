"""Modal screens: the confirmation every destructive action asks for, and the key help."""

from __future__ import annotations

from textual import events
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static

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


class ConfirmScreen(ModalScreen[bool]):
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


class HelpScreen(ModalScreen[None]):
    """The keys; any key closes it."""

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Static(HELP, id="help")
            yield Static("any key closes", id="hint")

    def on_key(self, event: events.Key) -> None:
        event.stop()
        event.prevent_default()
        self.dismiss(None)
