"""Draw only what changed: Textual redraws a widget on every update, even to what it shows
already, and `Static.update` lays the whole screen out again (Textual 8.2). llmd-top shows a
snapshot a second, most of it the same as the last one."""

from __future__ import annotations

from rich.text import Text
from textual.widget import Widget
from textual.widgets import Static


def show_text(static: Static, text: Text) -> None:
    """Draw `text` in `static` unless it shows that text already: the same characters, spans
    and base style (Rich's `Text.__eq__` leaves the base style out)."""
    shown = static.content
    if not (isinstance(shown, Text) and shown == text and shown.style == text.style):
        static.update(text)


def show_title(widget: Widget, title: str) -> None:
    """Set `widget`'s border title unless it is that title already (`title` is plain text
    without markup, as the getter gives it back)."""
    if widget.border_title != title:
        widget.border_title = title
