"""A canary's figures from finished requests: each counts on the release it ran on, a request
refused while it waited counts on the release its split assigned it, and one its client left
counts on neither."""

from __future__ import annotations

import dataclasses
import time

from llmd.inflight import Exchange
from llmd.releases.canary import CanaryFigures


def ended(backend: str | None, **fields: object) -> Exchange:
    """A finished request on `backend` with `fields` set (a 200 with text, by default)."""
    now = time.monotonic()
    exchange = Exchange("r", stream=True, model="tiny", backend=backend, started_at=now - 1)
    values: dict[str, object] = {
        "admitted_at": now - 0.9,
        "first_byte_at": now - 0.8,
        "ended_at": now,
        "status": 200,
        "prompt_tokens": 10,
        "output_tokens": 8,
        "has_text": True,
        "finish_reason": "stop",
    }
    values.update(fields)
    return dataclasses.replace(exchange, **values)  # type: ignore[arg-type]


def test_each_request_counts_on_its_release_and_refusals_on_the_assigned_one() -> None:
    """Empty and cut-off answers on the canary, a queue_full refusal assigned to the canary,
    a refusal before the queue and a client that left: only the first three count."""
    figures = CanaryFigures("main", (512,))
    figures.record(ended("main"))
    figures.record(ended("main.canary", has_text=False, output_tokens=1))
    figures.record(ended("main.canary", finish_reason="length"))
    queued = time.monotonic()
    refused = ended(None, rejected=True, status=429, error_code="queue_full", queued_at=queued)
    figures.record(refused, "main.canary")
    figures.record(ended(None, rejected=True, status=400), "main.canary")  # before the queue
    figures.record(ended("main.canary", client_gone=True, has_text=False))
    observed = figures.observed()
    assert (observed.old.answered, observed.old.empty, observed.old.rejected) == (1, 0, 0)
    new = observed.new
    assert (new.answered, new.empty, new.cut_off, new.rejected) == (2, 1, 1, 1)
