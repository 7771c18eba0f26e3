"""Read the engine's own Prometheus metrics over its Unix socket (parsed by prometheus_client)."""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
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
    socket: Path, name: str, predicate: object, timeout_s: float, every_s: float = 0.05
) -> tuple[bool, float]:
    """Read `name` every `every_s` until a read shows `predicate(value)`; (held, seconds from the
    start to that read). Reads overlap (up to 8 at once) and each is dated when it was sent: a
    busy engine takes a second or more to answer /metrics, and its answer is the state when it
    began answering."""
    assert callable(predicate)
    start = time.monotonic()
    reads: list[tuple[float, Future[float]]] = []
    with ThreadPoolExecutor(max_workers=8) as pool:
        while (asked := time.monotonic() - start) <= timeout_s:
            if sum(not future.done() for _, future in reads) < 8:
                reads.append((asked, pool.submit(engine_gauge, socket, name)))
            held = [at for at, future in reads if future.done() and predicate(future.result())]
            if held:
                return True, min(held)
            time.sleep(every_s)
        held = [at for at, future in reads if predicate(future.result())]
    return (True, min(held)) if held else (False, timeout_s)
