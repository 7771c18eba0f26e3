"""Text from the daemon or the user is shown as it is, never read as markup.

Rich reads a `str` table cell as console markup and Textual reads a border title, a
notification and a `Static`'s string as its own: `a [b] c` lost its `[b]`, and a closing tag
with nothing to close (`[/]`, `x[/` typed as a sequence filter) raised MarkupError and closed
llmd-top. Tenant, engine and GPU names, event messages, errors and request ids all come from
outside, so every table, title, notification and dialog here takes text as text.
"""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text


class PlainTable(Table):
    """A Rich table whose `str` cells are plain text (Rich's own reads them as markup)."""

    def add_row(self, *renderables: Any, **kwargs: Any) -> None:
        """`Table.add_row`, each `str` cell made a `Text` as it is."""
        cells = [Text(cell) if isinstance(cell, str) else cell for cell in renderables]
        super().add_row(*cells, **kwargs)
