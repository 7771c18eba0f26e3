"""The stall watchdog on a real vLLM (CPU build): its `VLLM::EngineCore` process stopped with
SIGSTOP under streams while the API server keeps /health at 200 (ENGINE.md). Its own daemon:
this test stops and kills things."""

from __future__ import annotations

import contextlib
import json
import signal
import time
from collections.abc import Iterator

import httpx
import psutil
import pytest

from llmd.supervisor.group import group_members
from tests.e2e.test_lifecycle import start_streams
from tests.support.configs import demo_config
from tests.support.fault_soak import engine_core
from tests.support.llmd_process import LlmdProcess
from tests.support.model import ensure_tiny_model
from tests.support.waiting import wait_for

pytestmark = pytest.mark.e2e

STALL_TIMEOUT_S = 5.0


@pytest.fixture(scope="module")
def llmd() -> Iterator[LlmdProcess]:
    config = demo_config(
        ensure_tiny_model(),
        engine={"stall_timeout_s": STALL_TIMEOUT_S},
        supervisor={"backoff_initial_s": 0.5},
    )
    with LlmdProcess.running(config, timeout_s=400.0) as process:
        yield process


def test_a_stopped_engine_core_ends_every_stream_and_is_restarted(llmd: LlmdProcess) -> None:
    """EngineCore SIGSTOPped under 64 streams: /health stays 200 and nothing in vLLM ends them;
    llmd ends each within stall_timeout_s + 5 s (in-band engine_stalled and [DONE]), kills
    the group (exit `stalled`), boots a new engine that serves the next request, and leaves
    nothing of the old group."""
    status = llmd.admin_status()["engine"]
    pgid = status["pid"]
    core = engine_core(pgid)
    streams = start_streams(llmd.base_url + "/v1/completions", 64)
    stopped_at = time.monotonic()
    core.send_signal(signal.SIGSTOP)
    try:
        for reader in streams:
            reader.join(STALL_TIMEOUT_S + 30)
        ended_at = time.monotonic()
        assert not any(reader.is_alive() for reader in streams)
        assert all(reader.lines[-1] == "data: [DONE]" for reader in streams)
        ends = [json.loads(reader.lines[-2].removeprefix("data: ")) for reader in streams]
        cut = [end["error"]["code"] for end in ends if "error" in end]
        assert cut and set(cut) == {"engine_stalled"}, cut
        took = ended_at - stopped_at
        print(f"{len(cut)} of 64 streams cut; all ended {took:.1f} s after the SIGSTOP")
        assert ended_at - stopped_at <= STALL_TIMEOUT_S + 5.0
        assert wait_for(lambda: not group_members(pgid), 30), "the stalled group survived"
        assert wait_for(lambda: llmd.admin_status()["engine"]["state"] == "serving", 300)
        served = httpx.post(
            llmd.base_url + "/v1/completions",
            json={"model": "tiny", "prompt": "x", "max_tokens": 2},
            timeout=60,
        )
        assert served.status_code == 200, served.text
        engine = llmd.admin_status()["engine"]
        assert engine["last_exit_reason"] == "stalled" and engine["pid"] != pgid
        assert engine["exits_by_reason"] == {"stalled": 1}
    finally:
        with contextlib.suppress(psutil.Error):
            core.send_signal(signal.SIGCONT)
            core.kill()
