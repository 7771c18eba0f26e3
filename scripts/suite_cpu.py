#!/usr/bin/env python3
"""Where the fast suite's CPU goes: run `scripts/test.sh ARGS` with every Python it starts
recording its own CPU (scripts/suite_cpu/sitecustomize.py), then sum it by kind of process
(pytest workers, `llmd serve`, the simulator, CLI verbs, other Pythons) and by test module.

Usage:
    scripts/suite_cpu.py run [--log FILE] [--top N] -- -m "not e2e"
    scripts/suite_cpu.py report FILE [--top N]

`run` prints the wall time, the CPU of the whole run (user + system of every process it
waited for, as `time` counts it), the load average before and after (other work on the
machine lengthens the wall time, not the CPU), then the report. CPU-seconds are the steady
figure on a shared machine. Processes killed by SIGKILL, and non-Python ones, are in the
total but not in the report's rows."""

from __future__ import annotations

import argparse
import collections
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HOOK = REPO / "scripts" / "suite_cpu"


def kind(argv: list[str]) -> str:
    """What a process was, from its argv: 'pytest worker', 'llmd serve', 'simulator',
    'llmd VERB', 'pytest', or 'python -c ...' / the script it ran."""
    joined = " ".join(argv)
    if "execnet" in joined or "exec(eval(sys.stdin.readline()))" in joined:
        return "pytest worker"
    if "llmd.engine.sim" in argv:
        return "simulator"
    if "llmd.cli" in argv:
        verb = argv[argv.index("llmd.cli") + 1 :][:1]
        return "llmd serve" if verb == ["serve"] else f"llmd {' '.join(verb)}".strip()
    if "pytest" in argv:
        return "pytest"
    if "-c" in argv[:3]:
        code = argv[argv.index("-c") + 1] if argv.index("-c") + 1 < len(argv) else ""
        return "python -c " + " ".join(code.split())[:40]
    if "-m" in argv[:2]:
        return "python -m " + " ".join(argv[argv.index("-m") + 1 :][:1])
    return " ".join(argv[1:2]) or "?"


def report(log: Path, top: int) -> str:
    """The per-kind and per-module table of `log` (the hook's lines); `alive-s`, the kind's
    seconds from start to exit summed (logs written before exits were dated give 0)."""
    started: dict[int, dict[str, object]] = {}
    cpu: dict[int, float] = {}
    life: dict[int, float] = {}  # seconds from start to exit, where both were dated
    for line in log.read_text().splitlines():
        record = json.loads(line)
        if record["ev"] == "start":
            started[record["pid"]] = record
        else:
            cpu[record["pid"]] = record["cpu"]
            begun = started.get(record["pid"], {}).get("t")
            if "t" in record and isinstance(begun, float):
                life[record["pid"]] = record["t"] - begun
    kinds: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0, 0, 0.0])
    modules: dict[str, dict[str, list[float]]] = collections.defaultdict(
        lambda: collections.defaultdict(lambda: [0, 0.0])
    )
    for pid, record in started.items():
        name = kind(list(record["argv"]))  # type: ignore[call-overload]
        row = kinds[name]
        row[0] += 1
        row[1] += cpu.get(pid, 0.0)
        row[2] += pid not in cpu
        row[3] += life.get(pid, 0.0)
        if name not in ("pytest worker", "pytest"):
            module = str(record.get("test") or "(outside a test)").split("::")[0]
            modules[module][name][0] += 1
            modules[module][name][1] += cpu.get(pid, 0.0)
    lines = [f"{'CPU-s':>8} {'procs':>6} {'each':>6} {'unseen':>6} {'alive-s':>8}  kind"]
    for name, (count, seconds, unseen, alive) in sorted(kinds.items(), key=lambda kv: -kv[1][1]):
        each = seconds / max(count - unseen, 1)
        lines.append(f"{seconds:8.1f} {count:6d} {each:6.2f} {unseen:6d} {alive:8.0f}  {name}")
    lines.append(f"{sum(row[1] for row in kinds.values()):8.1f} in all processes seen")
    lines.append("")
    lines.append("Test modules by the CPU of the processes they started (count, CPU-s):")
    ranked = sorted(modules.items(), key=lambda kv: -sum(v[1] for v in kv[1].values()))
    for module, by_kind in ranked[:top]:
        parts = ", ".join(
            f"{name} {count} {seconds:.1f}"
            for name, (count, seconds) in sorted(by_kind.items(), key=lambda kv: -kv[1][1])
        )
        lines.append(f"{sum(v[1] for v in by_kind.values()):7.1f}  {module}: {parts}")
    return "\n".join(lines)


def run(log: Path, pytest_args: list[str]) -> str:
    """Run scripts/test.sh `pytest_args` under the hook; the summary of the whole run."""
    log.unlink(missing_ok=True)
    env = {**os.environ, "LLMD_SUITE_CPU_LOG": str(log)}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HOOK), env.get("PYTHONPATH")]))
    before, started = os.getloadavg(), time.monotonic()
    done = subprocess.run([str(REPO / "scripts" / "test.sh"), *pytest_args], env=env)
    wall = time.monotonic() - started
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    after = os.getloadavg()
    return (
        f"exit {done.returncode}; wall {wall:.1f} s; CPU {usage.ru_utime + usage.ru_stime:.1f} s "
        f"(user {usage.ru_utime:.1f}, system {usage.ru_stime:.1f}); load average before "
        f"{before[0]:.2f}, after {after[0]:.2f}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    verbs = parser.add_subparsers(dest="verb", required=True)
    running = verbs.add_parser("run", help="run scripts/test.sh ARGS under the hook, report")
    running.add_argument("--log", type=Path, help="the hook's log (default: a temporary file)")
    running.add_argument("--top", type=int, default=40, help="test modules to list")
    running.add_argument("pytest_args", nargs="*", help="arguments for scripts/test.sh")
    reporting = verbs.add_parser("report", help="report a log written by `run`")
    reporting.add_argument("log", type=Path)
    reporting.add_argument("--top", type=int, default=40, help="test modules to list")
    args = parser.parse_args()
    if args.verb == "report":
        print(report(args.log, args.top))
        return 0
    log = args.log or Path(tempfile.mkstemp(prefix="llmd-suite-cpu-", suffix=".jsonl")[1])
    summary = run(log, args.pytest_args)
    print(summary, report(log, args.top), f"log: {log}", sep="\n\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
