"""How error messages show what a client sent: a header value as the bytes it was (escaped past
ASCII), a JSON value by its JSON type (RFC 8259 §3), never a Python repr or type name."""

from __future__ import annotations

import re
from typing import Any

# What a terminal acts on rather than shows: the C0 controls but line feed and tab (ESC starts a
# colour or cursor sequence, CR moves back over the line), DEL, and the C1 controls.
_TERMINAL_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def header_text(value: bytes) -> str:
    """`value` (raw header bytes) quoted, printable ASCII as it is and every other byte as a
    `\\xNN` escape, e.g. b"bogus" → "'bogus'", "é" sent in UTF-8 → "'\\xc3\\xa9'". A byte past
    ASCII in a header is opaque (RFC 9110 §5.5): a client may have meant ISO-8859-1 or UTF-8,
    and either guess would show the other's text garbled."""
    return repr(value)[1:]


def encodable(text: str) -> str:
    """`text` with what no UTF-8 encoder takes (lone UTF-16 surrogates, which a JSON escape
    such as "\\udc00" yields) written as a backslash escape, e.g. "a\\udc00" → "a\\\\udc00";
    other text is returned as is."""
    if text.isascii():
        return text
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def json_type(value: object) -> str:
    """The JSON type of a parsed JSON value: null, boolean, number, string, array or object."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def printable(text: str) -> str:
    """`text` for a terminal: each character a terminal would act on (`_TERMINAL_CONTROL`)
    written as its `\\xNN` escape, e.g. "a\\x1b[31m" shown as `a\\x1b[31m`, never a colour
    change; other text as it is."""
    if _TERMINAL_CONTROL.search(text) is None:
        return text
    return _TERMINAL_CONTROL.sub(lambda match: f"\\x{ord(match.group()):02x}", text)


def printable_tree(value: Any) -> Any:
    """`value` (decoded JSON: dicts, lists, strings, numbers) with `printable` applied to every
    string in it, keys included; the same objects where nothing changes."""
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, dict):
        return {printable(k): printable_tree(v) for k, v in value.items()}
    if isinstance(value, list):
        return [printable_tree(item) for item in value]
    return value
