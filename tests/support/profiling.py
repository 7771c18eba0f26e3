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
    for stack, count in _samples(collapsed):
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


def _samples(collapsed: Path) -> Iterator[tuple[str, int]]:
    """Each line of a collapsed-stack file: its stack ('frame;frame;...') and sample count."""
    for line in collapsed.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if stack:
            yield stack, int(count_text)


# Kinds of work in llmd, by a frame anywhere in the sample's stack (first match wins)...
_ANYWHERE = (
    ("logging (structlog)", ("structlog/", "llmd/logs.py")),
    ("Prometheus metrics", ("prometheus_client/",)),
    ("telemetry", ("llmd/telemetry/",)),
    ("tokenizer thread", ("_worker (concurrent/futures/thread.py",)),
    ("hand-off to the tokenizer thread", ("ThreadPoolExecutor.submit",)),
)
# ...else by the innermost frame of one of these.
_INNERMOST = (
    ("aiohttp (requests to the engine)", ("aiohttp/",)),
    ("validation", ("llmd/validation/",)),
    ("admission and routing", ("llmd/admission/", "llmd/routing/")),
    ("uvicorn", ("uvicorn/",)),
    ("starlette", ("starlette/",)),
    ("json", ("json/",)),
    ("llmd proxy", ("llmd/proxy/",)),
    ("asyncio (Python)", ("asyncio/",)),
)


def stage_shares(collapsed: Path) -> list[tuple[str, float]]:
    """Shares of all samples by kind of work (the lists above; a sample whose innermost frame
    is the loop's `run` is the event loop's own time: uvloop's sockets and callbacks)."""
    counts: collections.Counter[str] = collections.Counter()
    total = 0
    for stack, count in _samples(collapsed):
        total += count
        counts[_stage(stack)] += count
    return [(name, round(n / total, 4)) for name, n in counts.most_common()] if total else []


def _stage(stack: str) -> str:
    for name, marks in _ANYWHERE:
        if any(mark in stack for mark in marks):
            return name
    frames = stack.split(";")
    if frames[-1].startswith("Runner.run ") or frames[-1].startswith("run_until_complete"):
        return "event loop (uvloop)"
    for frame in reversed(frames):
        for name, marks in _INNERMOST:
            if any(mark in frame for mark in marks):
                return name
    return "other"


def _without_line(frame: str) -> str:
    """'f (path/x.py:12)' -> 'f (path/x.py)'."""
    head, sep, tail = frame.rpartition(":")
    return f"{head})" if sep and tail.rstrip(")").isdigit() else frame


def print_shares(shares: ProfileShares, title: str) -> None:
    """Print `frame_shares`' two lists under `title`."""
    print(f"\n{title}, share of samples:")
    for kind in ("stages", "self", "inclusive"):
        print(f"  {kind}:")
        for frame, share in shares[kind]:
            print(f"    {share:6.1%}  {frame}")


def report_profile(binary: str | None, collapsed: Path, title: str) -> ProfileShares | None:
    """When a profile was recorded (`binary` given): its `frame_shares`, printed under
    `title`; else None."""
    if binary is None:
        return None
    shares = frame_shares(collapsed)
    shares["stages"] = stage_shares(collapsed)
    print_shares(shares, title)
    return shares
