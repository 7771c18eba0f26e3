"""Exchanges as the relay leaves them when a request has ended, for the telemetry tests."""

from __future__ import annotations

import time

from llmd.inflight import Exchange


def finished_exchange(
    *,
    tenant: str = "anonymous",
    request_class: str = "normal",
    prompt_tokens: int | None = 100,
    output_tokens: int = 20,
    status: int = 200,
    queue_s: float = 0.0,
    ttft_s: float | None = 0.05,
    total_s: float = 0.5,
    error_code: str | None = None,
    client_gone: bool = False,
    request_id: str = "req-1",
    model: str | None = "tiny",
    backend: str | None = "main",
    endpoint: str = "chat",
    gaps_s: tuple[float, ...] = (),
) -> Exchange:
    """An Exchange as the relay leaves it when the request has ended (on `backend`), its
    stream's chunks `gaps_s` apart after the first byte."""
    start = time.monotonic() - total_s
    exchange = Exchange(request_id, stream=True, started_at=start, queued_at=start)
    exchange.tenant = tenant
    exchange.request_class = request_class
    exchange.prompt_tokens = prompt_tokens
    exchange.output_tokens = output_tokens
    exchange.status = status
    exchange.admitted_at = start + queue_s
    exchange.first_byte_at = None if ttft_s is None else start + ttft_s
    exchange.ended_at = start + total_s
    exchange.error_code = error_code
    exchange.client_gone = client_gone
    exchange.model = model
    exchange.backend = backend
    exchange.endpoint = endpoint
    if exchange.first_byte_at is not None:
        at = exchange.first_byte_at
        exchange.chunk_sent(at)
        for gap in gaps_s:
            at += gap
            exchange.chunk_sent(at)
    return exchange
