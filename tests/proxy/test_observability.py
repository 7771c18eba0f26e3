"""Observability through a real `llmd serve` on the simulator: /metrics after real traffic, a
storm of engine failures through HTTP, and `llmd status --json` with live sequences."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.cli import run_llmd
from tests.support.llmd_process import LlmdProcess
from tests.support.model import ensure_tiny_model
from tests.support.sim_process import sim_config
from tests.support.waiting import wait_for

CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 20}
STORM = 300


@pytest.fixture(scope="module")
def llmd() -> Iterator[LlmdProcess]:
    # An hour-long rate-limit window: the storm's line bound holds however slow the machine is.
    config = sim_config(ensure_tiny_model(), logging={"rate_limit_window_s": 3600})
    process = LlmdProcess.start(config)
    try:
        process.wait_ready(timeout_s=30)
        yield process
    finally:
        process.stop()


def samples(llmd: LlmdProcess) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    text = httpx.get(llmd.base_url + "/metrics").text
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(
    found: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str
) -> float | None:
    return found.get((name, frozenset(labels.items())))


def test_metrics_count_real_traffic(llmd: LlmdProcess) -> None:
    """Completed, streamed, refused and abandoned requests land in their series, and the
    engine's gauges are re-exported."""
    base = samples(llmd)
    url = llmd.base_url + "/v1/chat/completions"
    for _ in range(3):
        assert httpx.post(url, json=CHAT).json()["usage"]["completion_tokens"] == 20
    streamed = httpx.post(url, json={**CHAT, "stream": True})
    assert streamed.status_code == 200
    # Without usage in the stream, llmd counts its events (the role's aside): the engine may
    # put several tokens in one event when its streaming lags (vLLM does; the simulator too).
    events = streamed.text.count("data: {") - streamed.text.count('"role":"assistant"')
    assert httpx.post(url, json={**CHAT, "max_tokens": 5000}).status_code == 400
    with httpx.stream("POST", url, json={**CHAT, "max_tokens": 800, "stream": True}) as r:
        next(r.iter_bytes())  # the client leaves during decode
    found = base

    def delta(name: str, **labels: str) -> float:
        return (value(found, name, **labels) or 0) - (value(base, name, **labels) or 0)

    ok = {"tenant": "anonymous", "class": "normal", "status": "200", "model": "tiny",
          "endpoint": "chat", "outcome": "ok", "code": ""}  # fmt: skip
    left = {**ok, "outcome": "cancelled"}
    answered = {"engine": "main", "model": "tiny", "outcome": "answered", "release": ""}

    def accounted() -> bool:  # each request is accounted a moment after its answer ends
        nonlocal found
        found = samples(llmd)
        return (
            delta("llmd_requests_total", **ok) >= 4
            and delta("llmd_requests_total", **left) >= 1
            and delta("llmd_backend_requests_total", **answered) >= 5
            and delta("llmd_cancellations_total", phase="decode") >= 1
            # the engine's gauges come with llmd's first scrape of the engine (a loaded
            # machine had not scraped it yet when this test, the module's first, got here)
            and value(found, "llmd_engine_kv_cache_capacity_tokens", engine="main") is not None
        )

    wait_for(accounted, 10)  # the exact counts below say what is missing
    assert delta("llmd_requests_total", **ok) == 4
    assert delta("llmd_requests_total", **left) == 1  # the abandoned stream had its 200
    assert delta("llmd_rejections_total", reason="context_length_exceeded") == 1
    assert delta("llmd_cancellations_total", phase="decode") == 1
    lengths = {"tenant": "anonymous", "class": "normal", "input_length": "le512", "model": "tiny",
               "endpoint": "chat", "release": ""}  # fmt: skip
    assert delta("llmd_e2e_request_latency_seconds_count", **lengths) == 4
    assert delta("llmd_generation_tokens_total", tenant="anonymous") >= 3 * 20 + events
    assert delta("llmd_backend_requests_total", **answered) == 5
    main = {"engine": "main"}
    assert value(found, "llmd_engine_up", **main) == 1
    assert value(found, "llmd_engine_kv_cache_capacity_tokens", **main) == 1024 * 128
    assert value(found, "llmd_engine_requests_running", **main) is not None


def test_a_failure_storm_is_quiet_in_the_log_and_whole_in_the_counters(
    llmd: LlmdProcess,
) -> None:
    """300 engine failures in a burst: at most 10 lines per kind in the log, and /metrics
    counts all 300 failures and every suppressed line."""
    base = samples(llmd)
    before = len(llmd.log_records())

    async def storm() -> list[int]:
        async with httpx.AsyncClient(base_url=llmd.base_url, timeout=30) as client:
            body = {**CHAT, "sim_fault": "error:500"}
            limit = asyncio.Semaphore(16)

            async def one() -> int:
                async with limit:
                    return (await client.post("/v1/chat/completions", json=body)).status_code

            return await asyncio.gather(*(one() for _ in range(STORM)))

    assert set(asyncio.run(storm())) == {502}
    failed = {"tenant": "anonymous", "class": "normal", "status": "502", "model": "tiny",
              "endpoint": "chat", "outcome": "error", "code": "engine_error"}  # fmt: skip

    def counted(found: dict[tuple[str, frozenset[tuple[str, str]]], float]) -> float:
        return (value(found, "llmd_requests_total", **failed) or 0) - (
            value(base, "llmd_requests_total", **failed) or 0
        )

    # A request is accounted once its response is sent: the last few may land just after the
    # client has its 502.
    wait_for(lambda: counted(samples(llmd)) >= STORM, timeout_s=5, every_s=0.1)
    found = samples(llmd)
    assert counted(found) == STORM
    lines = llmd.log_records()[before:]
    events = [line["event"] for line in lines]
    assert events.count("request_failed") <= 10 and events.count("request_finished") <= 10
    suppressed = {
        event: (value(found, "llmd_log_lines_suppressed_total", event=event) or 0)
        - (value(base, "llmd_log_lines_suppressed_total", event=event) or 0)
        for event in ("request_failed", "request_finished")
    }
    assert suppressed["request_failed"] + events.count("request_failed") == STORM
    assert suppressed["request_finished"] + events.count("request_finished") == STORM


def test_status_shows_live_sequences_and_engine_load(llmd: LlmdProcess) -> None:
    """While streams run, `llmd status --json` lists them in decode with output so far, and
    the engine's running count from its own metrics."""
    url = llmd.base_url + "/v1/chat/completions"

    def stream() -> None:
        body = {**CHAT, "max_tokens": 1000, "stream": True}
        with httpx.stream("POST", url, json=body, timeout=60) as r:
            for _ in r.iter_bytes():
                pass

    def status() -> dict[str, Any]:
        argv = ["status", "--json", "--runtime-dir", str(llmd.runtime_dir)]
        out = run_llmd(*argv)
        assert out.returncode == 0, out.stderr
        result: dict[str, Any] = json.loads(out.stdout)
        return result

    threads = [threading.Thread(target=stream) for _ in range(4)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 20
    while True:  # until the four are decoding and the engine's gauge has been read since
        time.sleep(0.5)
        snapshot = status()
        decoding = [s for s in snapshot["sequences"] if s["phase"] == "decode"]
        if len(decoding) == 4 and snapshot["engine"]["running"] == 4:
            break
        assert time.monotonic() < deadline, snapshot
    for thread in threads:
        thread.join()
    assert all(s["output_tokens"] > 0 and s["ttft_s"] is not None for s in decoding)
    assert snapshot["throughput"]["engine_generation_tokens_per_s"] > 0
