"""The engines panel: one row per backend (a supervised engine or an upstream) with its state,
release, GPUs, KV cache, running, waiting, llmd's requests there and restarts.

Shown only when llmd has more than one backend (with one, the header and the KV panel say it
all). The row under the cursor is the engine that drain, resume and restart act on while the
panel has the focus.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.widgets import DataTable

from llmd.tui import format as fmt
from llmd.tui.panels import PHASE_STYLE
from llmd.tui.redraw import show_title

Backend = dict[str, Any]  # one item of the snapshot's `engines`

# (key, header, width, right-aligned)
COLUMNS = (
    ("name", "engine", 14, False),
    ("state", "state", 12, False),
    ("model", "model", 18, False),
    ("release", "release", 10, False),
    ("gpus", "GPU", 8, False),
    ("kv_usage", "KV", 5, True),
    ("running", "running", 7, True),
    ("waiting", "waiting", 7, True),
    ("in_flight", "in flight", 9, True),
    ("restarts", "restarts", 8, True),
)
STATE_STYLE = {**PHASE_STYLE, "unreachable": "bold red", "failed": "bold red"}


def cells(backend: Backend) -> tuple[Text, ...]:
    """The row of one backend: an upstream's GPU column reads `upstream`, a drained one's
    state `drained`."""
    state = "drained" if backend["draining"] else backend["state"]
    gpus = (",".join(backend["gpus"]) or fmt.MISSING) if backend["kind"] == "engine" else "upstream"
    values = {
        "name": backend["name"],
        "state": state,
        "model": backend["model"],
        "release": backend.get("release") or fmt.MISSING,
        "gpus": gpus,
        "kv_usage": fmt.MISSING if backend["kv_usage"] is None else f"{backend['kv_usage']:.0%}",
        "running": _number(backend["running"]),
        "waiting": _number(backend["waiting"]),
        "in_flight": str(backend["in_flight"]),
        "restarts": str(backend["restarts"]),
    }
    return tuple(
        Text(
            values[key],
            style=STATE_STYLE.get(state, "yellow") if key == "state" else "",
            justify="right" if right else "left",
            no_wrap=True,
        )
        for key, _, _, right in COLUMNS
    )


def _number(value: int | None) -> str:
    return fmt.MISSING if value is None else str(value)


class EngineTable(DataTable[Text]):
    """The backends of the last snapshot; `selected()` is the name under the cursor."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(cursor_type="row", **kwargs)
        self.display = False  # until a snapshot lists two backends or more
        self.names: list[str] = []
        self._rows: list[tuple[Text, ...]] = []
        self._columns_added = False
        self._pending: list[Backend] | None = None

    def on_mount(self) -> None:
        for key, label, width, _ in COLUMNS:
            self.add_column(label, width=width, key=key)
        self._columns_added = True
        if self._pending is not None:
            self.show(self._pending)

    def selected(self) -> str | None:
        """The backend under the cursor (None: no rows)."""
        if not self.names or not 0 <= self.cursor_row < len(self.names):
            return None
        return self.names[self.cursor_row]

    def show(self, backends: list[Backend]) -> None:
        """List `backends`; shown only when there are two or more. Before the table is
        mounted, remember them and list them on mount."""
        self.display = len(backends) > 1
        if not self._columns_added:
            self._pending = backends
            return
        self._pending = None
        self.styles.height = min(len(backends), 6) + 3  # border, header
        rows = [cells(backend) for backend in backends]
        names = [backend["name"] for backend in backends]
        if names != self.names:
            selected = self.selected()
            self.clear()
            for name, row in zip(names, rows, strict=True):
                self.add_row(*row, key=name)
            if selected in names:
                self.move_cursor(row=names.index(selected), animate=False)
        else:
            for name, row, old in zip(names, rows, self._rows, strict=True):
                for (key, *_), cell, before in zip(COLUMNS, row, old, strict=True):
                    if cell.plain != before.plain or cell.style != before.style:
                        self.update_cell(name, key, cell)
        self.names, self._rows = names, rows
        show_title(self, f"engines · {len(backends)}")
