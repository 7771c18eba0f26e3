"""Whole numbers from configs, headers and engine args: ASCII digits only, vLLM's suffixes."""

from __future__ import annotations

import pytest

from llmd.numerals import ascii_int, human_readable_int


@pytest.mark.parametrize(
    ("text", "number"),
    [
        ("0", 0),
        ("8000", 8000),
        (b"42", 42),
        ("²", None),  # str.isdigit() is true for it, int() refuses it
        ("٨٣٠١", None),  # Arabic-Indic digits: int() would read 8301
        (b"\xb2", None),
        ("", None),
        ("-1", None),
        ("+1", None),
        (" 1", None),
        ("1_000", None),
        ("9" * 5000, None),  # past Python's int_max_str_digits: no ValueError
    ],
)
def test_only_ascii_digits_are_a_whole_number(text: str | bytes, number: int | None) -> None:
    """ascii_int reads ASCII digits and nothing else, never raising."""
    assert ascii_int(text) == number


@pytest.mark.parametrize(
    ("text", "number"),
    [
        ("1024", 1024),
        ("1k", 1000),
        ("1K", 1024),
        ("25.6k", 25600),
        ("64M", 64 * 2**20),
        ("2g", 2 * 10**9),
        (" 7 ", 7),
    ],
)
def test_human_readable_ints_read_as_vllm_reads_them(text: str, number: int) -> None:
    """vLLM 0.32's human_readable_int: k/m/g/t decimal, K/M/G/T binary."""
    assert human_readable_int(text) == number


@pytest.mark.parametrize("text", ["x", "1.5K", "²", "٨k", "-1", "1e3", "", "9" * 5000])
def test_other_forms_are_refused(text: str) -> None:
    """Anything else (a decimal with a binary suffix too, as vLLM refuses it) is a ValueError."""
    with pytest.raises(ValueError):
        human_readable_int(text)
