"""With llmd's allocator setting, a flood of large bodies freed leaves nothing resident; without
it (glibc's default, the control), the heap keeps them."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from llmd.allocator import fix_mmap_threshold

MIB = 1024 * 1024

# Run in a fresh interpreter: the setting is process-wide. Prints the RSS growth in bytes after
# 200 MB of 500 KB bodies were allocated and all but the newest freed (the newest, on top of a
# heap, keeps the heap from shrinking: what a long request does while a flood ends).
FLOOD = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from llmd.allocator import fix_mmap_threshold

    def rss():
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024

    if sys.argv[1] == "fixed":
        assert fix_mmap_threshold()
    first = b"x" * (4 << 20)
    del first  # a mapped block freed: glibc's default raises its threshold past 500 KB
    idle = rss()
    bodies = [b"%d" % i + b"x" * 500_000 for i in range(400)]
    newest = bodies[-1]
    del bodies
    print(rss() - idle)
    """
)


def flood_growth(mode: str) -> int:
    done = subprocess.run(
        [sys.executable, "-c", FLOOD, mode], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return int(done.stdout)


def test_freed_bodies_leave_nothing_resident() -> None:
    """Bodies of 500 KB freed after a flood: with the fixed threshold RSS is back within a few
    MiB; with glibc's default the 200 MB stay resident."""
    assert flood_growth("fixed") < 20 * MIB
    assert flood_growth("default") > 150 * MIB


def test_the_operators_setting_stands(monkeypatch: pytest.MonkeyPatch) -> None:
    """With MALLOC_MMAP_THRESHOLD_ in the environment llmd leaves glibc's setting alone."""
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "65536")
    assert fix_mmap_threshold() is False
