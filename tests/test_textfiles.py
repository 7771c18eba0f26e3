"""Text files llmd reads: where a file stops being UTF-8, and log lines that are not skipped
and counted."""

from __future__ import annotations

import io

import pytest

from llmd.textfiles import LogLines, log_lines, not_utf8


def test_not_utf8_names_the_line_and_the_byte() -> None:
    """The line (from 1) of the first bad byte, its value and its offset."""
    data = b"a = 1\nb = 2\nc = '\xff'\n"
    with pytest.raises(UnicodeDecodeError) as raised:
        data.decode("utf-8")
    assert not_utf8(data, raised.value) == (3, "not UTF-8 text (byte 0xff at offset 17)")


def test_log_lines_skips_and_counts_lines_not_utf8() -> None:
    """Good lines are yielded decoded; bad ones are skipped, counted, the first numbered."""
    lines = LogLines(io.BytesIO(b"caf\xc3\xa9\n\xe9t\xe9\nok\n\xff\n"), "x.log")
    assert lines.warning() is None
    assert list(lines) == ["café\n", "ok\n"]
    assert (lines.skipped, lines.first_skipped) == (2, 2)
    assert lines.warning() == "x.log: 2 lines skipped: not UTF-8 text (the first: line 2)"


def test_log_lines_reads_a_file_or_stdin(monkeypatch: pytest.MonkeyPatch) -> None:
    """A path is opened as bytes; "-" reads standard input's bytes, named stdin."""
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"one\n\xff\n")))
    with log_lines("-") as lines:
        assert (lines.name, list(lines), lines.skipped) == ("stdin", ["one\n"], 1)
    with pytest.raises(OSError), log_lines("/nonexistent/llmd.log"):
        pass
