"""How error messages quote what a client sent."""

from __future__ import annotations

import pytest

from llmd.quoting import header_text


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (b"bogus", "'bogus'"),
        ("café".encode(), "'caf\\xc3\\xa9'"),
        (b"caf\xe9", "'caf\\xe9'"),
        (b"a\x00\tb", "'a\\x00\\tb'"),
        (b"it's", '"it\'s"'),
    ],
)
def test_a_header_value_is_shown_as_its_bytes(value: bytes, shown: str) -> None:
    """Printable ASCII as it is, any other byte escaped: UTF-8 is not shown as ISO-8859-1
    mojibake ('cafÃ©'), nor ISO-8859-1 guessed as UTF-8 (RFC 9110 §5.5: such bytes are
    opaque)."""
    assert header_text(value) == shown
