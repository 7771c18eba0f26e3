"""A stalled upstream (a simulator whose core stops while its HTTP answers, run apart from llmd):
its streams end with the in-band engine_stalled error and [DONE], and its circuit breaker opens,
so its model's next request gets 503 with Retry-After instead of joining the stall; a client
that holds its stream from it opens no breaker."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.configs import multi_sim_config
from tests.support.engine_metrics import wait_for_gauge
from tests.support.llmd_process import LlmdProcess
from tests.support.model import ensure_tiny_model
from tests.support.sim_process import SimProcess
from tests.support.slow_client import (
    HELD,
    HELD_TOKENS,
    read_at_least,
    served_whole,
    slow_consumers,
    stalled_reader,
)
from tests.support.waiting import wait_for


def upstream_behind_llmd(
    step_ms: str, **sections: dict[str, Any]
) -> Iterator[tuple[SimProcess, LlmdProcess]]:
    """An upstream `live` (model `near`, a simulator at a `step_ms` step) behind llmd with a
    1 s stall timeout for it and `sections` merged into its config."""
    sim = SimProcess.start(ensure_tiny_model(), "--step-base-ms", step_ms, name="near")
    sim.wait_ready()
    config = multi_sim_config(
        ensure_tiny_model(),
        {"main": ("tiny", ())},
        upstreams={"live": {"url": f"unix:{sim.socket}", "models": ["near"],
                            "stall_timeout_s": 1.0}},
        **sections,
    )  # fmt: skip
    llmd = LlmdProcess.start(config)
    try:
        yield sim, llmd
    finally:
        llmd.stop()
        sim.stop()


@pytest.fixture
def stalling() -> Iterator[tuple[SimProcess, LlmdProcess]]:
    """The upstream at a 10 ms step (a stream of 1,000 tokens takes 10 s)."""
    yield from upstream_behind_llmd("10")


def ready(llmd: LlmdProcess, query: str) -> int | None:
    """GET /ready's status (None: llmd does not answer yet)."""
    try:
        return httpx.get(llmd.base_url + "/ready" + query, timeout=5).status_code
    except httpx.TransportError:
        return None


def entry(llmd: LlmdProcess, name: str) -> dict[str, Any]:
    found: dict[str, Any] = next(e for e in llmd.admin_status()["engines"] if e["name"] == name)
    return found


def test_a_stalled_upstream_ends_its_streams_and_opens_its_breaker(
    stalling: tuple[SimProcess, LlmdProcess],
) -> None:
    """Its core stalled (the simulator's `stall` fault, sent to it directly) under a stream:
    the stream ends with engine_stalled then [DONE] within the stall timeout + 5 s of its
    last token; the upstream leaves `serving`; the next request for its model is a 503 with
    Retry-After; the log says `upstream_stalled`."""
    sim, llmd = stalling
    assert wait_for(lambda: ready(llmd, "?model=near") == 200, 60, 0.1), llmd.log_tail()
    body = {"model": "near", "prompt": "Go", "max_tokens": 1000, "ignore_eos": True,
            "stream": True}  # fmt: skip
    lines, last_token_at = [], 0.0
    with httpx.stream("POST", llmd.base_url + "/v1/completions", json=body, timeout=60) as r:
        for line in r.iter_lines():
            if line:
                lines.append(line)
                if '"text"' in line:
                    last_token_at = time.monotonic()
                if len(lines) == 5:  # tokens flow: stall the upstream's core now
                    stall = {"prompt": "x", "max_tokens": 1, "sim_fault": "stall"}
                    with (
                        sim.client(timeout_s=0.5) as direct,
                        contextlib.suppress(httpx.TimeoutException),
                    ):
                        direct.post("/v1/completions", json=stall)
    ended_at = time.monotonic()
    assert lines[-1] == "data: [DONE]", lines[-3:]
    assert json.loads(lines[-2].removeprefix("data: "))["error"]["code"] == "engine_stalled"
    assert ended_at - last_token_at <= 1.0 + 5.0
    assert entry(llmd, "live")["state"] != "serving"
    refused = httpx.post(llmd.base_url + "/v1/completions", json={**body, "stream": False})
    assert refused.status_code == 503 and int(refused.headers["retry-after"]) >= 1
    assert "upstream_stalled" in llmd.log_tail(100)


@pytest.fixture
def holding() -> Iterator[tuple[SimProcess, LlmdProcess]]:
    """The upstream at a 0.5 ms step, llmd with an 8 s send timeout and 4 KiB send buffers
    (past the 0.2-3.2 s the engine took to make HELD at a load of 7-8:
    tests/support/slow_client.py)."""
    yield from upstream_behind_llmd(
        "0.5",
        server={"send_timeout_s": 8.0, "send_buffer_bytes": 4096},
        telemetry={"engine_interval_s": 0.1},
    )


def test_a_client_that_holds_its_stream_opens_no_breaker(
    holding: tuple[SimProcess, LlmdProcess],
) -> None:
    """A client that stops reading after the upstream finished generating holds llmd off its
    stream past the upstream's stall timeout: its breaker stays closed (no upstream_stalled),
    the send timeout cuts the client off as a slow consumer, and the upstream serves on."""
    sim, llmd = holding
    assert wait_for(lambda: ready(llmd, "?model=near") == 200, 60, 0.1), llmd.log_tail()
    body = {**HELD, "model": "near"}  # more than the buffers hold, at any load
    held = stalled_reader(llmd.port, body)
    try:
        generated, _ = wait_for_gauge(
            sim.socket, "vllm:generation_tokens_total", lambda v: v >= HELD_TOKENS, 60
        )
        assert generated, llmd.log_tail()  # the upstream is done; llmd holds the rest for it
        assert read_at_least(held, 32768) >= 32768  # llmd sends more, then waits again
        assert wait_for(lambda: slow_consumers(llmd) == 1, 30), llmd.log_tail()
    finally:
        held.close()
    assert served_whole(llmd.base_url, {**body, "max_tokens": 50, "n": 1})
    assert entry(llmd, "live")["state"] == "serving"
    assert "stalled" not in llmd.log_path.read_text()
