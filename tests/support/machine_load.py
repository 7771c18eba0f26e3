"""Quiet-machine checks for measurement runs: the load average, and a bounded wait for the
machine and an engine to be idle before a run (other engineers share the 2 cores)."""

from __future__ import annotations

import time
from pathlib import Path

from tests.support.engine_metrics import engine_gauge


def load_average() -> float:
    """The 1-minute load average (/proc/loadavg)."""
    return float(Path("/proc/loadavg").read_text().split()[0])


def settle(engine_socket: Path | None, max_load: float, limit_s: float) -> float:
    """Wait, at most `limit_s` seconds, until the engine on `engine_socket` (if any) runs and
    queues nothing and the 1-minute load is under `max_load`; the load average then."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        busy = 0.0
        if engine_socket is not None:
            busy = engine_gauge(engine_socket, "vllm:num_requests_running")
            busy += engine_gauge(engine_socket, "vllm:num_requests_waiting")
        if not busy and load_average() < max_load:
            break
        time.sleep(2)
    return load_average()
