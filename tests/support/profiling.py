"""Sampling profiles of a running process for the benchmark scripts: py-spy (a separate tool,
not a dependency: pass its path) recording collapsed stacks, and a summary of where they went."""

from __future__ import annotations

import collections
import contextlib
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

# 'inclusive' and 'self': (function, share of all samples), the largest first.
ProfileShares = dict[str, list[tuple[str, float]]]


@contextlib.contextmanager
def py_spy_record(binary: str | None, pid: int, output: Path, rate: int = 100) -> Iterator[None]:
    """Sample `pid` (its threads, idle ones excluded, native frames off) with py-spy at `rate`
    per second while the block runs, into `output` as collapsed stacks ('frame;frame count'
    lines). Does nothing when `binary` is None."""
    if binary is None:
        yield
        return
    argv = [binary, "record", "--pid", str(pid), "--rate", str(rate), "--format", "raw"]
    process = subprocess.Popen(
        [*argv, "--nonblocking", "--output", str(output)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield
    finally:
        process.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()


def frame_shares(collapsed: Path, top: int = 25) -> ProfileShares:
    """From a collapsed-stack file: the `top` functions by inclusive and by self share of all
    samples ('function (file:line)' as py-spy names them, line numbers dropped)."""
    inclusive: collections.Counter[str] = collections.Counter()
    own: collections.Counter[str] = collections.Counter()
    total = 0
    for line in collapsed.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack:
            continue
        count = int(count_text)
        total += count
        frames = [_without_line(frame) for frame in stack.split(";")]
        for frame in set(frames):
            inclusive[frame] += count
        own[frames[-1]] += count
    if not total:
        return {"inclusive": [], "self": []}
    return {
        name: [(frame, round(n / total, 4)) for frame, n in counter.most_common(top)]
        for name, counter in (("inclusive", inclusive), ("self", own))
    }


def _without_line(frame: str) -> str:
    """'f (path/x.py:12)' -> 'f (path/x.py)'."""
    head, sep, tail = frame.rpartition(":")
    return f"{head})" if sep and tail.rstrip(")").isdigit() else frame


def print_shares(shares: ProfileShares, title: str) -> None:
    """Print `frame_shares`' two lists under `title`."""
    print(f"\n{title}, share of samples:")
    for kind in ("self", "inclusive"):
        print(f"  {kind}:")
        for frame, share in shares[kind]:
            print(f"    {share:6.1%}  {frame}")


def report_profile(binary: str | None, collapsed: Path, title: str) -> ProfileShares | None:
    """When a profile was recorded (`binary` given): its `frame_shares`, printed under
    `title`; else None."""
    if binary is None:
        return None
    shares = frame_shares(collapsed)
    print_shares(shares, title)
    return shares
