#!/usr/bin/env python3
"""llmd-top's CPU use at a given refresh interval with N active sequences.

A fake admin socket (in this process) serves the recorded status (tests/data/status_example.json)
widened to N sequences whose ages, token counts and rates change on every fetch, as a busy
daemon's do. `python -m llmd.tui --socket ... --interval S` runs in a pseudo-terminal of
160x48 whose output is read and discarded; after a warm-up its CPU time (user + system, from
/proc) is measured over the window. Run from the repo root:
`.venv/bin/python scripts/bench_tui.py [--sequences 500] [--interval 1] [--seconds 30]`.
Pass `--socket PATH` to measure against a live daemon instead of the fake, `--dialog` to
measure with the help dialog open (`?` is typed once the warm-up is over, a second before the
window), and `--code DIR` to run the llmd-top of another checkout (an A/B from one script).
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import copy
import fcntl
import json
import os
import pty
import shutil
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import time
from pathlib import Path
from typing import Any

from aiohttp import web

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "tests" / "data" / "status_example.json"
TENANTS = ("alice", "bob", "batch-etl", "ci", "notebook")
PHASES = ("queued", "prefill", "decode", "decode", "decode")


class FakeDaemon:
    """Serves GET /status: the example widened to `sequences`, changing on each fetch."""

    def __init__(self, sequences: int) -> None:
        self.base = json.loads(EXAMPLE.read_text())
        self.n = sequences
        self.fetches = 0

    def snapshot(self) -> dict[str, Any]:
        self.fetches += 1
        s = copy.deepcopy(self.base)
        tick = self.fetches
        s["taken_at"] = time.time()
        s["in_flight"] = self.n
        s["sequences"] = [
            {
                "id": f"req-{i:05d}-{'%08x' % (i * 2654435761 % 2**32)}",
                "tenant": TENANTS[i % len(TENANTS)],
                "request_class": ("interactive", "normal", "batch")[i % 3],
                "phase": PHASES[i % len(PHASES)],
                "stream": True,
                "prompt_tokens": 20 + i % 900,
                "output_tokens": (i * 7 + tick * 13) % 2000,
                "age_s": round(0.5 + i * 0.03 + tick, 3),
                "ttft_s": None if PHASES[i % 5] in ("queued", "prefill") else 0.05 + i % 40 / 100,
                "tokens_per_s": None if PHASES[i % 5] != "decode" else 10 + (i + tick) % 30,
            }
            for i in range(self.n)
        ]
        # Everything a busy daemon changes between fetches changes here too.
        s["throughput"]["engine_generation_tokens_per_s"] = 1500 + 300 * (tick % 7)
        s["engine"]["uptime_s"] += tick
        s["engine"]["running"] = 200 + tick % 50
        s["kv_cache"]["usage"] = (tick % 100) / 100
        s["counts"]["requests"] += 40 * tick
        for window in s["latency"].values():
            for p in window.values():
                p.update(p50=0.1 + tick % 10 / 100, p95=0.3 + tick % 7 / 10, count=40 * tick)
        s["queues"][2]["depth"] = tick % 30
        s["tenants"] = [
            {"name": name, "in_flight": (i + tick) % 100, "queued": tick % 9,
             "max_in_flight": 100, "max_queued": 200}
            for i, name in enumerate(TENANTS)
        ]  # fmt: skip
        return s

    async def status(self, request: web.Request) -> web.Response:
        return web.json_response(self.snapshot())


def serve(daemon: FakeDaemon, socket: Path, ready: threading.Event) -> None:
    async def main() -> None:
        app = web.Application()
        app.router.add_get("/status", daemon.status)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.UnixSite(runner, str(socket)).start()
        ready.set()
        await asyncio.Event().wait()

    asyncio.run(main())


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of `pid` (s), from /proc/PID/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sequences", type=int, default=500)
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--socket", help="a live daemon's admin socket instead of the fake")
    parser.add_argument("--dialog", action="store_true", help="with the help dialog open")
    parser.add_argument("--code", type=Path, default=REPO, help="the checkout to run")
    args = parser.parse_args()

    daemon = FakeDaemon(args.sequences)
    if args.socket:
        socket = Path(args.socket)
    else:
        workdir = Path(tempfile.mkdtemp(prefix="llmd-bench-tui-", dir="/tmp"))
        atexit.register(shutil.rmtree, workdir, ignore_errors=True)
        socket = workdir / "admin.sock"
        ready = threading.Event()
        threading.Thread(target=serve, args=(daemon, socket, ready), daemon=True).start()
        ready.wait(10)

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 48, 160, 0, 0))
    env = {**os.environ, "PYTHONPATH": str(args.code.resolve()), "TERM": "xterm-256color"}
    command = [sys.executable, "-m", "llmd.tui", "--socket", str(socket),
               "--interval", str(args.interval)]  # fmt: skip
    top = subprocess.Popen(
        command, stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True
    )
    os.close(slave)
    written = [0]

    def drain() -> None:  # the terminal: read and discard what llmd-top draws
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                return
            if not chunk:
                return
            written[0] += len(chunk)

    threading.Thread(target=drain, daemon=True).start()
    try:
        time.sleep(args.warmup)
        if args.dialog:
            os.write(master, b"?")
            time.sleep(1.0)
        fetched0, cpu0, bytes0, t0 = (
            daemon.fetches,
            cpu_seconds(top.pid),
            written[0],
            time.monotonic(),
        )
        time.sleep(args.seconds)
        fetched1, cpu1, bytes1, t1 = (
            daemon.fetches,
            cpu_seconds(top.pid),
            written[0],
            time.monotonic(),
        )
    finally:
        top.terminate()
        top.wait(10)
    wall = t1 - t0
    source = args.socket or f"fake daemon, {args.sequences} sequences"
    shown = " under the help dialog" if args.dialog else ""
    print(
        f"llmd-top ({args.code}) at --interval {args.interval:g} against {source}{shown}, "
        f"over {wall:.1f} s:"
    )
    if not args.socket:
        print(f"  snapshots fetched: {fetched1 - fetched0}")
    print(f"  CPU: {cpu1 - cpu0:.2f} s = {100 * (cpu1 - cpu0) / wall:.1f}% of one core")
    print(f"  terminal output: {(bytes1 - bytes0) / wall / 1024:.1f} KiB/s")


if __name__ == "__main__":
    main()
