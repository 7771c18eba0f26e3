"""The active-sequence table: one row per live request, sortable by any column, filterable.

Rows are updated in place by position (row i shows the i-th sequence of the sorted, filtered
list), so the scroll position stays put and a refresh with 500 sequences rewrites only cell
values; the cursor follows the selected request id.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from rich.text import Text
from textual.widgets import DataTable

from llmd.tui import format as fmt
from llmd.tui.redraw import show_title

Sequence = dict[str, Any]  # one item of the snapshot's `sequences`


@dataclasses.dataclass(frozen=True)
class Column:
    """A column: its key in the sequence, header, width, how it is shown and sorted."""

    key: str
    label: str
    width: int
    show: Callable[[Any], str] = str
    right: bool = False


COLUMNS = (
    Column("id", "request id", 32),
    Column("tenant", "tenant", 14),
    Column("request_class", "class", 11),
    Column("phase", "phase", 7),
    Column("backend", "backend", 10),
    Column("prompt_tokens", "prompt", 7, fmt.count, right=True),
    Column("output_tokens", "output", 7, fmt.count, right=True),
    Column("age_s", "age", 8, fmt.duration, right=True),
    Column("ttft_s", "TTFT", 8, fmt.duration, right=True),
    Column("tokens_per_s", "tok/s", 7, fmt.rate, right=True),
)
PHASE_STYLE = {"queued": "yellow", "prefill": "cyan", "decode": "green"}
DEFAULT_SORT = "age_s"
# What `/` matches, as substrings.
FILTERED = ("id", "tenant", "request_class", "phase", "backend")


def _plain(column: Column, sequence: Sequence) -> str:
    value = sequence.get(column.key)
    return column.show(value) if value is not None else fmt.MISSING


def _cell(column: Column, text: str) -> Text:
    style = PHASE_STYLE.get(text, "") if column.key == "phase" else ""
    return Text(text, style=style, justify="right" if column.right else "left", no_wrap=True)


def _sort_key(key: str) -> Callable[[Sequence], tuple[bool, Any]]:
    """Unknown values (null) sort after known ones in either direction's first rows."""
    return lambda s: (s.get(key) is not None, s.get(key) if s.get(key) is not None else 0)


class SequenceTable(DataTable[Text]):
    """Live sequences; `sort_by` / `filter_text` choose what is listed and in what order."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)
        self.sort_by = DEFAULT_SORT
        self.reverse = True  # oldest first
        self.filter_text = ""
        self.ids: list[str] = []
        self._rows: list[tuple[str, ...]] = []
        self._total = 0
        self._by_id: dict[str, Sequence] = {}
        # Columns are added on mount (measuring a label needs the running app); a snapshot
        # shown before then waits here and is drawn on mount.
        self._columns_added = False
        self._pending: tuple[list[Sequence], int] | None = None

    def on_mount(self) -> None:
        for column in COLUMNS:
            self.add_column(self._label(column), width=column.width, key=column.key)
        self._columns_added = True
        if self._pending is not None:
            self.show(*self._pending)

    @property
    def selected_id(self) -> str | None:
        """The request id of the row under the cursor."""
        if not self.ids or not 0 <= self.cursor_row < len(self.ids):
            return None
        return self.ids[self.cursor_row]

    def selected(self) -> Sequence | None:
        """The sequence under the cursor, as the last snapshot gave it."""
        return self._by_id.get(self.selected_id or "")

    def show(self, sequences: list[Sequence], total: int) -> None:
        """List `sequences` (the snapshot's; `total` live: relayed to the engine or queued in
        llmd) sorted and filtered; before the table is mounted, remember them and list them on
        mount."""
        if not self._columns_added:
            self._pending = (sequences, total)
            return
        self._pending = None
        self._total = total
        self._by_id = {s["id"]: s for s in sequences}
        wanted = [s for s in sequences if self._matches(s)]
        wanted.sort(key=_sort_key(self.sort_by), reverse=self.reverse)
        selected = self.selected_id
        plain = [tuple(_plain(c, s) for c in COLUMNS) for s in wanted]
        for i, row in enumerate(plain):
            if i >= len(self._rows):
                self.add_row(
                    *(_cell(c, text) for c, text in zip(COLUMNS, row, strict=True)), key=str(i)
                )
            elif row != self._rows[i]:
                for column, text, old in zip(COLUMNS, row, self._rows[i], strict=True):
                    if text != old:
                        self.update_cell(str(i), column.key, _cell(column, text))
        for i in range(len(self._rows) - 1, len(plain) - 1, -1):
            self.remove_row(str(i))
        self._rows = plain
        self.ids = [s["id"] for s in wanted]
        if selected in self.ids and self.ids.index(selected) != self.cursor_row:
            self.move_cursor(row=self.ids.index(selected), animate=False)
        self._title()

    def sort_on(self, key: str) -> None:
        """Sort by column `key`; the same column again flips the order."""
        self.reverse = not self.reverse if key == self.sort_by else key != "id"
        self.sort_by = key
        for column in COLUMNS:
            self.columns[self._column_key(column)].label = Text(self._label(column))
        # DataTable keeps each rendered cell, the header's too, until its rows or size change
        # (Textual 8.2): without this the arrow stayed on the old column until the rows did.
        self._clear_caches()
        self.refresh()

    def next_sort(self) -> None:
        """Sort by the column after the one sorted by now (after the last: the first)."""
        keys = [c.key for c in COLUMNS]
        self.sort_on(keys[(keys.index(self.sort_by) + 1) % len(keys)])

    def _matches(self, s: Sequence) -> bool:
        if not self.filter_text:
            return True
        needle = self.filter_text.lower()
        return any(needle in str(s.get(k, "")).lower() for k in FILTERED)

    def _label(self, column: Column) -> str:
        if column.key != self.sort_by:
            return column.label
        return f"{column.label} {'▼' if self.reverse else '▲'}"

    def _column_key(self, column: Column) -> Any:
        return next(k for k in self.columns if k.value == column.key)

    def _title(self) -> None:
        shown = f"{len(self.ids)} of {self._total}" if self.filter_text else f"{self._total}"
        label = next(c.label for c in COLUMNS if c.key == self.sort_by)
        title = f"sequences · {shown} live · sorted by {label}"
        if self.filter_text:
            title += f" · filter “{self.filter_text}”"
        show_title(self, title)
