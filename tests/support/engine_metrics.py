"""Read the engine's own Prometheus metrics over its Unix socket (parsed by prometheus_client)."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families


def engine_gauge(socket: Path, name: str) -> float:
    """Sum of gauge `name` (e.g. 'vllm:num_requests_running') over its label sets."""
    with httpx.Client(transport=httpx.HTTPTransport(uds=str(socket)), timeout=5) as client:
        text = client.get("http://engine/metrics").text
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    )


def wait_for_gauge(
    socket: Path, name: str, predicate: object, timeout_s: float
) -> tuple[bool, float]:
    """Poll `name` until `predicate(value)` holds; (held, seconds from the start to the read
    that showed it). A read is dated when it was sent: a busy engine can take a second to
    answer /metrics, and the value is the state when it began answering."""
    assert callable(predicate)
    start = time.monotonic()
    while True:
        asked = time.monotonic() - start
        if asked > timeout_s:
            return False, asked
        if predicate(engine_gauge(socket, name)):
            return True, asked
        time.sleep(0.02)
