"""The llmd-top application: composes the panels, binds the keys, polls the daemon.

Each refresh fetches one Status snapshot through `DaemonClient` and hands it to every panel.
When the daemon goes away the header says so and the last snapshot stays on screen, greyed;
polling goes on at the same interval and picks the daemon up again when it is back.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar

from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.notifications import SeverityLevel
from textual.widgets import DataTable, Footer, Input

from llmd.quoting import printable, printable_tree
from llmd.tui.client import AdminRefused, AdminUnreachable, DaemonClient, Snapshot
from llmd.tui.deploys import in_progress
from llmd.tui.endpoints import EndpointPanel
from llmd.tui.engine_latency import EngineLatencyPanel
from llmd.tui.engines import EngineTable
from llmd.tui.link import Link, changes
from llmd.tui.panels import (
    CountsPanel,
    EventsPanel,
    GpuPanel,
    HeaderPanel,
    KvCachePanel,
    LatencyPanel,
    QueuePanel,
    TenantPanel,
    ThroughputPanel,
)
from llmd.tui.screens import ConfirmScreen, HelpScreen
from llmd.tui.sequences import SequenceTable

# Actions that change the daemon: --readonly removes them.
CONTROL_ACTIONS = frozenset(
    {"drain", "resume", "restart", "cancel", "abort_deploy", "wake", "sleep"}
)
DEFAULT_INTERVAL_S = 1.0
PANEL_TITLES = {
    "kv": "KV cache · engine load",
    "gpu": "GPU",
    "latency": "latency",
    "throughput": "tokens/s",
    "queues": "queues",
    "tenants": "tenants",
    "endpoints": "endpoints",
    "counts": "since llmd started",
    "engine-latency": "engine side · 1m mean",
    "events": "recent events",
}


class TopApp(App[None]):
    """llmd-top against the daemon behind `client`, refreshed every `interval_s` seconds."""

    CSS_PATH = "top.tcss"
    TITLE = "llmd-top"
    # The screen's class by its height in rows (top.tcss folds panels on -short and -tiny): the
    # full layout needs about 42 rows, 80x24 is a common terminal.
    VERTICAL_BREAKPOINTS = [  # noqa: RUF012 (Textual reads it off the class; mypy refuses ClassVar)
        (0, "-tiny"),
        (24, "-short"),
        (42, "-tall"),
    ]
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("d", "drain", "drain"),
        Binding("u", "resume", "resume"),
        Binding("r", "restart", "restart"),
        Binding("w", "wake", "wake", show=False),
        Binding("z", "sleep", "sleep", show=False),
        Binding("c", "cancel", "cancel seq"),
        Binding("a", "abort_deploy", "abort deploy", show=False),
        Binding("slash", "filter", "filter"),
        Binding("s", "sort", "sort"),
        Binding("question_mark", "help", "help"),
        Binding("q", "quit", "quit"),
        Binding("escape", "clear_filter", show=False),
    ]

    def __init__(
        self, client: DaemonClient, interval_s: float = DEFAULT_INTERVAL_S, readonly: bool = False
    ) -> None:
        super().__init__()
        self.client = client
        self.interval_s = interval_s
        self.readonly = readonly
        self.link = Link(str(client.socket), interval_s)
        self.snapshot: Snapshot | None = None
        self._wake = asyncio.Event()
        # The panels, held here: a dialog on top of the dashboard hides them from queries.
        self.header = HeaderPanel(id="header")
        self.kv = KvCachePanel(id="kv", classes="panel")
        self.gpu = GpuPanel(id="gpu", classes="panel")
        self.latency = LatencyPanel(id="latency", classes="panel")
        self.throughput = ThroughputPanel(id="throughput", classes="panel")
        self.queues = QueuePanel(id="queues", classes="panel")
        self.tenants = TenantPanel(id="tenants", classes="panel")
        self.endpoints = EndpointPanel(id="endpoints", classes="panel")
        self.counts = CountsPanel(id="counts", classes="panel")
        self.engine_latency = EngineLatencyPanel(id="engine-latency", classes="panel")
        self.sequences = SequenceTable(id="sequences", classes="panel")
        self.events = EventsPanel(id="events", classes="panel")
        self.engines = EngineTable(id="engines", classes="panel")
        self.filter = Input(placeholder="filter: id, tenant, class, phase or backend", id="filter")

    def compose(self) -> ComposeResult:
        yield self.header
        with Horizontal(id="top"):
            yield from (self.kv, self.gpu, self.latency, self.throughput)
        with Horizontal(id="middle"):
            yield from (self.queues, self.tenants, self.counts)
        yield self.engines
        yield self.engine_latency
        yield self.sequences
        with Horizontal(id="bottom"):
            yield from (self.events, self.endpoints)
        yield self.filter
        yield Footer()

    def notify(
        self,
        message: str,
        *,
        title: str = "",
        severity: SeverityLevel = "information",
        timeout: float | None = None,
        markup: bool = False,
    ) -> None:
        """Textual's `notify`, the message taken as it is by default: what llmd-top says comes
        with names and errors from outside, never markup (llmd/tui/plain.py), and never a
        control character (`printable`)."""
        message = printable(message)
        super().notify(message, title=title, severity=severity, timeout=timeout, markup=markup)

    def on_mount(self) -> None:
        for widget_id, title in PANEL_TITLES.items():
            self.query_one(f"#{widget_id}").border_title = title
        self.header.show(self.snapshot, self.link)
        # Without scrolling to it: on a screen too short for every panel, focus scrolled the
        # header out of view at start-up.
        self.sequences.focus(scroll_visible=False)
        # At once: a panel takes a snapshot whether or not its own parts are composed yet.
        self.run_worker(self._poll(), name="poll", exclusive=True)

    async def _poll(self) -> None:
        while True:
            try:
                await self.refresh_status()
            except Exception as exc:  # a fault in llmd-top itself: say it, keep polling
                self.link.not_shown(_said(exc))
                self.notify(f"llmd-top: {_said(exc)}", severity="error", timeout=10)
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.interval_s)

    async def refresh_status(self) -> None:
        """Fetch one snapshot and show it, or show that the daemon cannot be reached, or that
        the snapshot could not be shown (the last one shown stays on screen)."""
        try:
            # Names, ids and messages come from outside: no control character reaches the
            # terminal as one (an ESC in a tenant's name changed colours and broke a border).
            snapshot = printable_tree(await self.client.status())
        except (AdminUnreachable, AdminRefused) as exc:
            self._lost(str(exc))
            return
        except Exception as exc:  # any other failure to fetch is a lost daemon too
            self._lost(_said(exc))
            return
        was_lost = self.link.fetched and not self.link.connected
        self.link.up()
        self.remove_class("-stale")
        try:
            self.show(snapshot)
        except Exception as exc:  # a snapshot this llmd-top cannot read (say, a missing key)
            self.link.not_shown(_said(exc))
            self.header.show(self.snapshot, self.link)
            return
        for note in changes(self.snapshot, snapshot):
            self.notify(note, title="llmd", timeout=10)
        if was_lost:
            self.notify("reconnected to llmd", title="llmd", timeout=10)
        self.snapshot = snapshot

    def _lost(self, error: str) -> None:
        self.link.lost(printable(error))
        self.add_class("-stale")
        self.header.show(self.snapshot, self.link)

    def show(self, s: Snapshot) -> None:
        """Hand snapshot `s` to every panel (each takes it at any time: before it is composed,
        after it was removed). Raises what a panel raises on a snapshot it cannot read."""
        self.header.show(s, self.link)
        for panel in (self.kv, self.gpu, self.latency, self.throughput, self.queues,
                      self.tenants, self.endpoints, self.counts, self.events,
                      self.engine_latency):  # fmt: skip
            panel.show(s)
        self.engines.show(s.get("engines") or [])
        self.sequences.show(s["sequences"], s["in_flight"] + (s.get("queued") or 0))

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """--readonly: the control actions are gone (not shown, keys do nothing)."""
        return not (self.readonly and action in CONTROL_ACTIONS)

    # Keys ---------------------------------------------------------------------------------

    def action_drain(self) -> None:
        engine = self._target()
        if engine is not None:
            self._confirm(
                f"Drain {self._kind(engine)} {engine}? It takes no new request (the rest of its "
                f"pool does)\nuntil you resume it (u); the {self._in_flight(engine)} in flight "
                "there finish.",
                f"drain {engine}",
                lambda: self.client.drain(engine),
            )
            return
        s = self.snapshot
        live = f"{s['in_flight']} in flight and {s.get('queued') or 0} queued" if s else "? live"
        self._confirm(
            f"Drain llmd? New requests get 503 with Retry-After until you resume (u);\n"
            f"the {live} finish.",
            "drain",
            self.client.drain,
        )

    def action_resume(self) -> None:
        engine = self._target()
        if engine is not None:
            self._act(f"resume {engine}", lambda: self.client.resume(engine))
            return
        self._act("resume", self.client.resume)

    def action_restart(self) -> None:
        engine = self._target()
        if engine is not None and self._kind(engine) == "upstream":
            self.notify(
                f"{engine} is an upstream: llmd does not run it, so it cannot restart it "
                "(restart it where it runs; d drains it here, u resumes it)",
                severity="warning",
                timeout=8,
            )
            return
        if engine is not None and self._entry(engine, "state", "") == "asleep":
            self._confirm(
                f"Restart engine {engine}? It is asleep on demand: llmd does not wake it; its\n"
                "next wake boots a fresh process.",
                f"restart {engine}",
                lambda: self.client.restart(engine),
            )
            return
        if engine is not None:
            self._confirm(
                f"Restart engine {engine}? llmd drains it first (its requests finish, up to the\n"
                "drain timeout), then boots it again; the other engines serve on.",
                f"restart {engine}",
                lambda: self.client.restart(engine),
            )
            return
        self._confirm(
            "Restart the engines? llmd drains first (in-flight requests finish, up to the\n"
            "drain timeout), then boots new engines and admits again.",
            "restart",
            self.client.restart,
        )

    def action_wake(self) -> None:
        self._swap("wake")

    def action_sleep(self) -> None:
        self._swap("sleep")

    def _swap(self, action: str) -> None:
        """Wake, or put to sleep, the on-demand engine selected in the engines panel (asked
        first); llmd refuses, saying why, one not on demand or whose group is full."""
        engine = self._target()
        if engine is None:
            self.notify(
                f"select an engine first (Tab to the engines panel) to {action} it",
                severity="warning",
            )
            return
        if action == "wake":
            question = (
                f"Wake engine {engine}? It serves again once it answers a first token;\n"
                "its swap group must have room."
            )
            call = functools.partial(self.client.wake, engine)
        else:
            question = (
                f"Put engine {engine} to sleep? Requests for its model then wait in llmd's\n"
                "queue while it is woken again."
            )
            call = functools.partial(self.client.sleep, engine)
        self._confirm(question, f"{action} {engine}", call)

    def action_cancel(self) -> None:
        selected = self.sequences.selected()
        if selected is None:
            self.notify("no sequence selected", severity="warning")
            return
        request_id = selected["id"]
        self._confirm(
            f"Cancel request {request_id}?\ntenant {selected['tenant']}, "
            f"{selected['request_class']}, {selected['phase']}, "
            f"{selected['output_tokens']} tokens out. Its client gets an error.",
            f"cancel {request_id}",
            lambda: self.client.cancel(request_id),
        )

    def action_abort_deploy(self) -> None:
        deploys = [d for d in (self.snapshot or {}).get("deploys") or [] if in_progress(d)]
        if not deploys:
            self.notify("no deploy in progress", severity="warning")
            return
        deploy = deploys[0]
        engine = deploy["engine"]
        self._confirm(
            f"Abort the deploy of {deploy['new']} on engine {engine}? The old release\n"
            f"{deploy['old']} takes all its traffic back.",
            f"abort deploy on {engine}",
            lambda: self.client.rollback(engine),
        )

    def action_filter(self) -> None:
        field = self.filter
        field.display = True
        field.focus()

    def action_clear_filter(self) -> None:
        field = self.filter
        field.value = ""
        field.display = False
        self.sequences.focus()

    def action_sort(self) -> None:
        self.sequences.next_sort()
        self._reshow()

    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    # Events -------------------------------------------------------------------------------

    def on_input_changed(self, event: Input.Changed) -> None:
        self.sequences.filter_text = event.value.strip()
        self._reshow()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.input.display = bool(event.value.strip())
        self.sequences.focus()

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        self.sequences.sort_on(str(event.column_key.value))
        self._reshow()

    # Helpers ------------------------------------------------------------------------------

    def _target(self) -> str | None:
        """The engine the drain, resume and restart keys act on: the engines panel's selected
        row while that panel has the focus; None (all of llmd) otherwise."""
        if self.engines.display and self.engines.has_focus:
            return self.engines.selected()
        return None

    def _kind(self, backend: str) -> str:
        """`engine` or `upstream`, as the last snapshot said (`engine` when it did not)."""
        return str(self._entry(backend, "kind", "engine"))

    def _entry(self, backend: str, key: str, default: Any) -> Any:
        """Field `key` of `backend`'s entry in the last snapshot's engines (`default`: none)."""
        entries = (self.snapshot or {}).get("engines") or []
        return next((e.get(key, default) for e in entries if e["name"] == backend), default)

    def _in_flight(self, engine: str | None) -> Any:
        """Requests in flight in llmd (or on `engine`), as the last snapshot said ('?')."""
        if self.snapshot is None:
            return "?"
        if engine is None:
            return self.snapshot["in_flight"]
        entries = self.snapshot.get("engines") or []
        return next((e["in_flight"] for e in entries if e["name"] == engine), "?")

    def _reshow(self) -> None:
        s = self.snapshot
        if s is not None:
            self.sequences.show(s["sequences"], s["in_flight"] + (s.get("queued") or 0))

    def _confirm(
        self, question: str, what: str, call: Callable[[], Awaitable[dict[str, Any]]]
    ) -> None:
        def answered(yes: bool | None) -> None:
            if yes:
                self._act(what, call)
            else:
                self.notify(f"{what}: not done", timeout=3)

        self.push_screen(ConfirmScreen(question), answered)

    def _act(self, what: str, call: Callable[[], Awaitable[dict[str, Any]]]) -> None:
        async def run() -> None:
            try:
                await call()
            except (AdminUnreachable, AdminRefused) as exc:
                self.notify(f"{what} failed: {exc}", severity="error", timeout=10)
                return
            except Exception as exc:  # a fault in llmd-top itself must not end the dashboard
                self.notify(f"{what} failed: {_said(exc)}", severity="error", timeout=10)
                return
            self.notify(f"{what}: done", timeout=5)
            self._wake.set()

        self.notify(f"{what}…", timeout=3)
        self.run_worker(run(), name=what, group="actions")


def _said(exc: Exception) -> str:
    """An unexpected exception as the header says it: `KeyError: 'engine'`."""
    return f"{type(exc).__name__}: {exc}"
