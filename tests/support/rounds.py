"""Figures over benchmark rounds, and a process's own resources, for the scripts/bench_* runs:
'median (min-max)' strings, and CPU, RSS and open descriptors read through psutil."""

from __future__ import annotations

import datetime
import json
import os
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psutil


def as_ms(seconds: float | None) -> float | None:
    """`seconds` in milliseconds to 0.1 ms, for a benchmark's record (None stays None)."""
    return None if seconds is None else round(seconds * 1000, 1)


def rounded(value: float | None) -> float | None:
    """`value` to 3 decimals, for a benchmark's record (None stays None)."""
    return None if value is None else round(value, 3)


def spread(values: Sequence[float | None], digits: int = 0) -> str:
    """'median (min-max)' of the values that are not None, with `digits` decimals and
    thousands separators; '-' when there are none."""
    present = [v for v in values if v is not None]
    if not present:
        return "-"
    median, low, high = statistics.median(present), min(present), max(present)
    return f"{median:,.{digits}f} ({low:,.{digits}f}-{high:,.{digits}f})"


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of `pid` itself, its children excluded."""
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


def rss_and_fds(pid: int) -> tuple[int, int]:
    """(resident set size in bytes, open file descriptors) of `pid`."""
    process = psutil.Process(pid)
    return int(process.memory_info().rss), int(process.num_fds())


def slope_per_min(samples: list[dict[str, float]], key: str) -> float | None:
    """Least-squares slope of `key` against the samples' time `t` (s), per minute; None with
    fewer than 3 samples."""
    if len(samples) < 3:
        return None
    fit = statistics.linear_regression([s["t"] for s in samples], [s[key] for s in samples])
    return fit.slope * 60


def rotated(paths: Sequence[str], round_no: int) -> list[str]:
    """`paths` in round `round_no`'s order (from 1): rotated by one each round, so that each
    path runs first, second, ... in turn."""
    shift = (round_no - 1) % len(paths)
    return [*paths[shift:], *paths[:shift]]


def round_record(round_no: int, **figures: Any) -> dict[str, Any]:
    """A round's record: its number, when it started (local time, to the second), `figures`."""
    started = datetime.datetime.now().isoformat(timespec="seconds")
    return {"round": round_no, "started": started, **figures}


def write_record(path: Path | None, **figures: Any) -> None:
    """Write `figures` as JSON to `path` (nothing when None), with the command that made them,
    the date and the machine's CPU count first."""
    if path is None:
        return
    record = {
        "command": " ".join(sys.argv),
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "cpus": os.cpu_count(),
        **figures,
    }
    path.write_text(json.dumps(record, indent=2, default=str) + "\n")
