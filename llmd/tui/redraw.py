"""Draw only what changed: Textual redraws a widget on every update, even to what it shows
already, and `Static.update` lays the whole screen out again (Textual 8.2). llmd-top shows a
snapshot a second, most of it the same as the last one."""

from __future__ import annotations

from rich.cells import cell_len
from rich.text import Text
from textual.content import Content
from textual.widget import Widget
from textual.widgets import Static


def show_text(static: Static, text: Text) -> None:
    """Draw `text` in `static` unless it shows that text already: the same characters, spans
    and base style (Rich's `Text.__eq__` leaves the base style out). The screen is laid out
    again only when the widget's size may change: a new count of lines, a line that does not
    fit the widget's width (it would wrap), before or after, or a width set by the text."""
    shown = static.content
    if isinstance(shown, Text) and shown == text and shown.style == text.style:
        return
    width = static.content_size.width
    sized_by_text = static.styles.width is not None and static.styles.width.is_auto
    static.update(text, layout=sized_by_text or not _same_height(shown, text, width))


def _same_height(shown: object, text: Text, width: int) -> bool:
    """Whether `text` takes the height `shown` took: both `Text`, as many lines, and none of
    either wider than `width` cells (none wraps)."""
    if not isinstance(shown, Text):
        return False
    old, new = shown.plain.split("\n"), text.plain.split("\n")
    return len(old) == len(new) and all(cell_len(line) <= width for line in (*old, *new))


def show_title(widget: Widget, title: str) -> None:
    """Set `widget`'s border title to `title`, as it is (never read as markup: llmd/tui/plain.py),
    unless it is that title already."""
    content = Content(title)
    if widget.border_title != content.markup:
        widget.border_title = content
