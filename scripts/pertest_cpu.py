#!/usr/bin/env python3
"""Each test's own CPU in its pytest process, and the run's shape over time (which workers were
busy near the end): a pytest plugin, and the report of what it wrote.

Usage:
    PERTEST_CPU_DIR=DIR PYTHONPATH=scripts scripts/test.sh -m "not e2e" -p pertest_cpu
    scripts/pertest_cpu.py DIR [--top N]

The plugin appends JSON lines to DIR/PID.jsonl in each pytest process (each xdist worker):
`collected` (the process's CPU-s from its start to the end of collection), one `test` per test
(its `time.process_time()` over setup, call and teardown, its start and end, epoch seconds),
`end`. CPU of the processes a test starts (daemons, simulators) is not in it:
scripts/suite_cpu.py counts those."""

from __future__ import annotations

import argparse
import collections
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

_worker = "main"


def _write(record: dict[str, Any]) -> None:
    out = Path(os.environ["PERTEST_CPU_DIR"])
    out.mkdir(parents=True, exist_ok=True)
    with (out / f"{os.getpid()}.jsonl").open("a") as file:
        file.write(json.dumps({"w": _worker, **record}) + "\n")


def pytest_configure(config: pytest.Config) -> None:
    global _worker
    _worker = getattr(config, "workerinput", {}).get("workerid", "main")


def pytest_collection_finish(session: pytest.Session) -> None:
    _write({"ev": "collected", "cpu": time.process_time(), "t": time.time()})


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    cpu, started = time.process_time(), time.time()
    yield
    spent = time.process_time() - cpu
    _write({"ev": "test", "id": item.nodeid, "cpu": spent, "t0": started, "t1": time.time()})


def pytest_sessionfinish(session: pytest.Session) -> None:
    _write({"ev": "end", "cpu": time.process_time(), "t": time.time()})


def report(directory: Path, top: int) -> str:
    """Collection CPU per worker, tests' CPU and end time per worker, the busy workers in each
    10 s of the run, and the `top` tests and modules by CPU."""
    records = [
        json.loads(line) for f in directory.glob("*.jsonl") for line in f.read_text().splitlines()
    ]
    tests = [r for r in records if r["ev"] == "test"]
    if not tests:
        return "no tests recorded"
    start = min(r["t0"] for r in tests)
    collected = sorted(f"{r['w']} {r['cpu']:.1f}" for r in records if r["ev"] == "collected")
    lines = [f"CPU-s to the end of collection: {', '.join(collected)}"]
    by_worker: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    for r in tests:
        by_worker[r["w"]].append(r)
    for worker, mine in sorted(by_worker.items()):
        last = max(mine, key=lambda r: r["t1"])
        lines.append(
            f"{worker}: {len(mine)} tests, {sum(r['cpu'] for r in mine):.1f} CPU-s in tests, "
            f"done at {last['t1'] - start:.1f} s (last: {last['id']})"
        )
    busy: dict[int, set[str]] = collections.defaultdict(set)
    for r in tests:
        for slot in range(int((r["t0"] - start) // 10), int((r["t1"] - start) // 10) + 1):
            busy[slot].add(r["w"])
    lines.append("busy workers by 10 s: " + " ".join(f"{s * 10}:{len(busy[s])}" for s in busy))
    lines.append(f"tests: {sum(r['cpu'] for r in tests):.1f} CPU-s; the most:")
    for r in sorted(tests, key=lambda r: -r["cpu"])[:top]:
        lines.append(f"{r['cpu']:6.2f} CPU-s {r['t1'] - r['t0']:6.1f} s  {r['w']}  {r['id']}")
    modules: collections.Counter[str] = collections.Counter()
    for r in tests:
        modules[r["id"].split("::")[0]] += r["cpu"]
    lines.append("modules:")
    lines += [f"{cpu:6.1f} CPU-s  {name}" for name, cpu in modules.most_common(top)]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("directory", type=Path, help="PERTEST_CPU_DIR of the run")
    parser.add_argument("--top", type=int, default=25, help="tests and modules to list")
    args = parser.parse_args()
    print(report(args.directory, args.top))


if __name__ == "__main__":
    main()
