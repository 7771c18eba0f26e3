#!/usr/bin/env python3
"""The CPU of one simulator's life as the fast suite lives it, phase by phase, A/B over checkouts.

Each life execs `python -m llmd.engine.sim --model MODEL --uds SOCK --served-model-name tiny`
as llmd's daemons do (llmd/engine/launch.py: PYTHONUNBUFFERED=1, VLLM_LOGGING_LEVEL=WARNING),
polls `GET /health` every 0.1 s until 200 (the supervisor's BOOT_PROBE_S), sends `--requests`
chat completions (every other one streamed), scrapes `GET /metrics` `--scrapes` times, stays
idle `--idle` seconds, then SIGTERMs it and reaps it. The child's on-CPU time is read at each
phase's end from /proc/PID/task/*/schedstat (nanoseconds, all its threads); the total, from
`os.wait4`'s rusage (user + system), includes the interpreter's exit.

Arms alternate within each round (`--arm LABEL:ROOT[:PYTHON]`, repeated: the checkout put
first on PYTHONPATH and used as the working directory, and the interpreter, by default this
one); the report gives each arm's median (min-max) per phase in ms of CPU. Run from the repo
root, e.g. `.venv/bin/python scripts/bench_sim_life.py --arm main:/work/main --arm
branch:. --rounds 7`. Compiled modules are cached as scripts/test.sh caches them (written, under
PYTHONPYCACHEPREFIX, by default .venv/pycache). The cache is keyed by the source's path: give
the interpreter by the path the suite uses (a worktree's `.venv` symlink is another path, whose
site-packages would be compiled afresh at every start until cached under that name too).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import http.client
import itertools
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PHASES = ("start", "requests", "scrapes", "idle", "stop", "total")


@dataclasses.dataclass(frozen=True)
class Arm:
    """One side of the comparison: a label, the checkout whose llmd runs, the interpreter."""

    label: str
    root: Path
    python: str


class UnixConnection(http.client.HTTPConnection):
    """An HTTP/1.1 connection over a Unix socket."""

    def __init__(self, path: str) -> None:
        super().__init__("localhost", timeout=30)
        self.path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(self.path)


def fetch(sock: str, method: str, path: str, body: dict[str, object] | None = None) -> int:
    """One request on a fresh connection (llmd opens one per request); the status."""
    conn = UnixConnection(sock)
    try:
        data = json.dumps(body).encode() if body is not None else None
        headers = {"content-type": "application/json"} if data is not None else {}
        conn.request(method, path, body=data, headers=headers)
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


def cpu_ns(pid: int) -> int:
    """The on-CPU time of every thread of `pid` so far, in ns (/proc/PID/task/*/schedstat)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):  # a thread ended
            total += int((task / "schedstat").read_text().split()[0])
    return total


def one_life(arm: Arm, model: Path, requests: int, scrapes: int, idle_s: float) -> dict[str, float]:
    """CPU ms of each phase of one simulator's life (PHASES)."""
    with tempfile.TemporaryDirectory(prefix="simlife-") as tmp:
        sock = str(Path(tmp) / "engine.sock")
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "VLLM_LOGGING_LEVEL": "WARNING"}
        env["PYTHONPATH"] = str(arm.root)
        env.setdefault("PYTHONPYCACHEPREFIX", str(REPO / ".venv" / "pycache"))
        env.pop("PYTHONDONTWRITEBYTECODE", None)  # as scripts/test.sh runs the suite
        argv = [arm.python, "-m", "llmd.engine.sim", "--model", str(model), "--uds", sock]
        argv += ["--served-model-name", "tiny"]
        child = subprocess.Popen(
            argv, cwd=arm.root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        marks = [0]
        deadline = time.monotonic() + 30
        while True:
            try:
                if fetch(sock, "GET", "/health") == 200:
                    break
            except OSError:
                pass
            if child.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"{arm.label}: the simulator did not come up ({child.returncode})")
            time.sleep(0.1)
        marks.append(cpu_ns(child.pid))
        for i in range(requests):
            body = {"model": "tiny", "messages": [{"role": "user", "content": f"hello {i}"}]}
            body |= {"max_tokens": 16, "stream": i % 2 == 1}
            assert fetch(sock, "POST", "/v1/chat/completions", body) == 200
        marks.append(cpu_ns(child.pid))
        for _ in range(scrapes):
            assert fetch(sock, "GET", "/metrics") == 200
        marks.append(cpu_ns(child.pid))
        time.sleep(idle_s)
        marks.append(cpu_ns(child.pid))
        child.send_signal(signal.SIGTERM)
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
        if child.returncode != 0:
            raise SystemExit(f"{arm.label}: the simulator exited {child.returncode}")
    total_ms = (usage.ru_utime + usage.ru_stime) * 1e3
    ms = [(b - a) / 1e6 for a, b in itertools.pairwise(marks)]
    return dict(zip(PHASES, [*ms, total_ms - marks[-1] / 1e6, total_ms], strict=True))


def parse_arm(text: str) -> Arm:
    label, _, rest = text.partition(":")
    root, _, python = rest.partition(":")
    return Arm(label, Path(root or ".").resolve(), python or sys.executable)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arm", action="append", type=parse_arm, help="LABEL:ROOT[:PYTHON]")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=4)
    parser.add_argument("--scrapes", type=int, default=10)
    parser.add_argument("--idle", type=float, default=1.0, help="seconds idle before SIGTERM")
    parser.add_argument("--model", type=Path, default=REPO / "var" / "models" / "tiny")
    args = parser.parse_args()
    arms = args.arm or [parse_arm(f"here:{REPO}")]
    results: dict[str, list[dict[str, float]]] = {arm.label: [] for arm in arms}
    for r in range(args.rounds):
        order = arms[r % len(arms) :] + arms[: r % len(arms)]  # rotate who goes first
        for arm in order:
            life = one_life(arm, args.model.resolve(), args.requests, args.scrapes, args.idle)
            results[arm.label].append(life)
            print(arm.label, " ".join(f"{k}={v:.0f}" for k, v in life.items()), flush=True)
    print(f"\nCPU ms, median (min-max) of {args.rounds} rounds:")
    print("arm".ljust(12) + "".join(p.rjust(18) for p in PHASES))
    for label, lives in results.items():
        cells = []
        for phase in PHASES:
            values = [life[phase] for life in lives]
            cells.append(f"{statistics.median(values):.0f} ({min(values):.0f}-{max(values):.0f})")
        print(label.ljust(12) + "".join(c.rjust(18) for c in cells))


if __name__ == "__main__":
    main()
