"""Supervision end to end: the vLLM API server SIGKILLed under load, then llmd stopped.

Its own daemon (module scope): these tests kill things. They run in file order.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import httpx
import pytest

from llmd.supervisor.process import group_members
from tests.support.configs import demo_config
from tests.support.llmd_process import LlmdProcess
from tests.support.model import ensure_tiny_model

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def llmd() -> Iterator[LlmdProcess]:
    process = LlmdProcess.start(demo_config(ensure_tiny_model()))
    try:
        process.wait_ready()
        yield process
    finally:
        process.stop()


def engine_status(llmd: LlmdProcess) -> dict[str, object]:
    engine: dict[str, object] = llmd.admin_status()["engine"]
    return engine


def stream_body(max_tokens: int) -> dict[str, object]:
    return {
        "model": "tiny",
        "prompt": "Tell me",
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "stream": True,
    }


ENGINE_PGIDS: list[int] = []


def test_sigkill_of_the_api_server_under_load_restarts_it(llmd: LlmdProcess) -> None:
    """API server SIGKILLed mid-stream: in-band error, 503 + Retry-After, then serving again."""
    pid = engine_status(llmd)["pid"]
    assert isinstance(pid, int)
    ENGINE_PGIDS.append(pid)
    assert len(group_members(pid)) >= 2  # API server plus engine core (and workers)
    with httpx.stream(
        "POST", llmd.base_url + "/v1/completions", json=stream_body(900), timeout=60
    ) as response:
        lines = response.iter_lines()
        assert next(lines).startswith("data: ")
        os.kill(pid, signal.SIGKILL)
        rest = [line for line in lines if line]
    assert rest[-1] == "data: [DONE]"
    assert '"code": "engine_error"' in rest[-2] or '"code": "engine_unavailable"' in rest[-2]

    saw_503 = False
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        response = httpx.post(
            llmd.base_url + "/v1/completions",
            json={"model": "tiny", "prompt": "x", "max_tokens": 2},
            timeout=30,
        )
        if response.status_code == 200:
            break
        assert response.status_code == 503, response.text
        assert int(response.headers["retry-after"]) >= 1
        assert response.json()["error"]["code"] == "engine_unavailable"
        saw_503 = True
        time.sleep(1)
    assert saw_503 and response.status_code == 200
    assert not group_members(pid), "the killed API server's engine-core outlived it"
    status = engine_status(llmd)
    assert status["restarts"] == 1 and status["last_exit_reason"] == "killed"
    assert isinstance(status["pid"], int) and status["pid"] != pid
    ENGINE_PGIDS.append(status["pid"])


def test_stop_ends_streams_and_leaves_no_engine_process(llmd: LlmdProcess) -> None:
    """SIGTERM with a stream in flight: the stream finishes, llmd exits 0, the group is gone."""
    pgid = engine_status(llmd)["pid"]
    assert isinstance(pgid, int)
    with httpx.stream(
        "POST", llmd.base_url + "/v1/completions", json=stream_body(200), timeout=60
    ) as response:
        lines = response.iter_lines()
        assert next(lines).startswith("data: ")
        llmd.process.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        refused = httpx.post(
            llmd.base_url + "/v1/completions", json={"model": "tiny", "prompt": "x"}
        )
        rest = [line for line in lines if line]
    assert refused.status_code == 503 and refused.json()["error"]["code"] == "draining"
    assert "retry-after" in refused.headers
    assert rest[-1] == "data: [DONE]" and "error" not in rest[-2]
    assert llmd.process.wait(timeout=60) == 0
    for group in {pgid, *ENGINE_PGIDS}:
        assert not group_members(group), f"engine process group {group} survived llmd"
