"""With llmd's allocator setting, a flood of large bodies freed leaves nothing resident; without
it (glibc's default, the control), the heap keeps them."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap

import pytest

from llmd.allocator import HeapTrimmer, fix_mmap_threshold

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


# Prints the RSS (bytes) left over idle after 200 MB of 64 KB pieces (under the mmap threshold:
# heap) were freed, all but one kept on top of the heap, before and after a trim.
CHUNKS = textwrap.dedent(
    """
    from pathlib import Path
    from llmd.allocator import trim_heap

    def rss():
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024

    idle = rss()
    chunks = [b"%d" % i + b"x" * 64_000 for i in range(3200)]
    newest = chunks[-1]
    del chunks
    before = rss() - idle
    trimmed = trim_heap()
    print(before, rss() - idle, trimmed)
    """
)


def test_a_trim_gives_freed_heap_pages_back() -> None:
    """200 MB of 64 KB pieces freed stay resident (the heap keeps them); after trim_heap they
    are back within a few MiB."""
    done = subprocess.run(
        [sys.executable, "-c", CHUNKS], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    before, after, trimmed = done.stdout.split()
    assert int(before) > 150 * MIB
    assert int(after) < 20 * MIB and trimmed == "True"


async def test_the_trimmer_trims_once_per_flood_off_the_loop() -> None:
    """A flood under the threshold is not trimmed; one over it is, on a worker thread, and a
    second drain while that trim runs does not start another."""
    trimmer = HeapTrimmer(after_bytes=100)
    trimmer(99)
    assert trimmer.trims == 0
    trimmer(100)
    trimmer(10_000)
    assert trimmer.trims == 1
    running = trimmer._running
    assert running is not None
    await running
    await asyncio.sleep(0)  # the done callback runs on the loop's next turn
    trimmer(100)
    assert trimmer.trims == 2
