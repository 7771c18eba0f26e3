"""Supervision end to end: the vLLM API server SIGKILLed under load, then llmd stopped.

Its own daemon (module scope): these tests kill things. They run in file order.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from llmd.supervisor.group import group_members
from tests.support.configs import demo_config
from tests.support.llmd_process import LlmdProcess, short_tmpdir
from tests.support.model import ensure_tiny_model
from tests.support.waiting import wait_for

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def llmd() -> Iterator[LlmdProcess]:
    # A drain deadline well past what 64 long streams need, even on a loaded machine.
    config = demo_config(ensure_tiny_model(), server={"drain_timeout_s": 120.0})
    process = LlmdProcess.start(config)
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


class StreamReader(threading.Thread):
    """One long streamed completion read in the background: `lines`, and `first` set at its
    first event."""

    def __init__(self, url: str) -> None:
        super().__init__()
        self.url = url
        self.lines: list[str] = []
        self.first = threading.Event()

    def run(self) -> None:
        with httpx.stream("POST", self.url, json=stream_body(1000), timeout=60) as response:
            for line in response.iter_lines():
                if line:
                    self.lines.append(line)
                    self.first.set()


def start_streams(url: str, count: int) -> list[StreamReader]:
    """`count` streams, returned once each has its first event."""
    readers = [StreamReader(url) for _ in range(count)]
    for reader in readers:
        reader.start()
    assert all(reader.first.wait(30) for reader in readers)
    return readers


ENGINE_PGIDS: list[int] = []


def test_sigkill_of_the_api_server_under_load_restarts_it(llmd: LlmdProcess) -> None:
    """API server SIGKILLed mid-stream: in-band error, 503 + Retry-After, then serving again."""
    pid = engine_status(llmd)["pid"]
    assert isinstance(pid, int)
    ENGINE_PGIDS.append(pid)
    assert len(group_members(pid)) >= 2  # API server plus engine core (and workers)
    # 64 sequences of 1,000 tokens keep the tiny engine busy for seconds (one alone is done in
    # about one): the kill lands mid-stream.
    streams = start_streams(llmd.base_url + "/v1/completions", 64)
    os.kill(pid, signal.SIGKILL)
    for reader in streams:
        reader.join(60)
    ends = [json.loads(reader.lines[-2][6:]) for reader in streams]
    assert all(reader.lines[-1] == "data: [DONE]" for reader in streams)
    cut = [end["error"]["code"] for end in ends if "error" in end]
    assert cut and set(cut) <= {"engine_error", "engine_unavailable"}, cut

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
    """SIGTERM with 64 streams in flight: they finish, new requests get 503 draining, llmd
    exits 0 and no process of any engine group it ran is left."""
    pgid = engine_status(llmd)["pid"]
    assert isinstance(pgid, int)
    url = llmd.base_url + "/v1/completions"
    # 64 sequences of 1,000 tokens keep the tiny engine busy for seconds (one alone: ~1 s).
    streams = start_streams(url, 64)
    llmd.process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 5
    while httpx.get(llmd.base_url + "/ready").status_code == 200 and time.monotonic() < deadline:
        time.sleep(0.01)
    refused = httpx.post(url, json={"model": "tiny", "prompt": "x"})
    for reader in streams:
        reader.join(60)
    assert refused.status_code == 503 and refused.json()["error"]["code"] == "draining"
    assert "retry-after" in refused.headers
    for reader in streams:
        assert reader.lines[-1] == "data: [DONE]"
        assert "error" not in json.loads(reader.lines[-2][6:])
    assert llmd.process.wait(timeout=60) == 0
    for group in {pgid, *ENGINE_PGIDS}:
        assert not group_members(group), f"engine process group {group} survived llmd"


def test_kill_9_of_llmd_takes_the_vllm_engine_along() -> None:
    """SIGKILL to `llmd serve` with a real vLLM: the kernel sends its API server SIGTERM, which
    stops its engine core; no process of the group is left within a minute, and the next llmd
    on the same runtime directory serves."""
    workdir = short_tmpdir("llmd-e2e-kill9-")
    config = demo_config(ensure_tiny_model())
    first = LlmdProcess.start(config, workdir=workdir)
    pgid = 0
    try:
        first.wait_ready()
        pgid = first.admin_status()["engine"]["pid"]
        assert len(group_members(pgid)) >= 2  # API server plus engine core (and workers)
        first.process.kill()
        first.process.wait(10)
        assert wait_for(lambda: not group_members(pgid), timeout_s=60), group_members(pgid)
    finally:
        first.stop()
        if pgid and group_members(pgid):  # a failed check must not leave vLLM running
            os.killpg(pgid, signal.SIGKILL)
    second = LlmdProcess.start(config, workdir=workdir)
    try:
        second.wait_ready()
        assert second.admin_status()["engine"]["state"] == "serving"
    finally:
        assert second.stop() == 0
