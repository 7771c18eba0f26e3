"""Text files llmd is given to read, and what it says of bytes that are not UTF-8.

- A whole file that must be UTF-8 (a config, a release record): said to be otherwise with the
  line and offset of its first bad byte.
- A log read line by line (`llmd doctor --log`, `llmd tune --from-traffic`): its lines that are
  not UTF-8 are skipped and counted.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path


def not_utf8(data: bytes, exc: UnicodeDecodeError) -> tuple[int, str]:
    """Where `data` stops being UTF-8 (`exc`, from decoding it): its line (from 1) and the
    words for it, e.g. (3, "not UTF-8 text (byte 0xff at offset 41)")."""
    line = data.count(b"\n", 0, exc.start) + 1
    return line, f"not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})"


@dataclasses.dataclass
class LogLines:
    """The lines of a log read as bytes (`raw`: a binary file or `sys.stdin.buffer`), each
    decoded as UTF-8; a line that is not UTF-8 (a torn write, a binary blob, a log in another
    encoding) is skipped and counted in `skipped`, with the number of the first in
    `first_skipped`. Iterate once; `warning()` then says what was skipped, if anything."""

    raw: Iterable[bytes]
    name: str
    skipped: int = 0
    first_skipped: int | None = None

    def __iter__(self) -> Iterator[str]:
        for number, line in enumerate(self.raw, 1):
            try:
                yield line.decode("utf-8")
            except UnicodeDecodeError:
                self.skipped += 1
                if self.first_skipped is None:
                    self.first_skipped = number

    def warning(self) -> str | None:
        """E.g. "traffic.log: 2 lines skipped: not UTF-8 text (the first: line 7)"; None when
        every line was read."""
        if not self.skipped:
            return None
        lines = "line" if self.skipped == 1 else "lines"
        return (
            f"{self.name}: {self.skipped} {lines} skipped: not UTF-8 text "
            f"(the first: line {self.first_skipped})"
        )


@contextlib.contextmanager
def log_lines(source: str) -> Iterator[LogLines]:
    """`LogLines` of the file `source`, or of standard input for "-" (named "stdin", left
    open). Raises OSError when the file cannot be opened or read."""
    if source == "-":
        yield LogLines(sys.stdin.buffer, "stdin")
        return
    with Path(source).open("rb") as raw:
        yield LogLines(raw, source)
