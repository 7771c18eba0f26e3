"""Supervision driven by simulator faults, through a real `llmd serve`: crash → restart,
repeated boot failure → give up (exit 79), engine dead while HTTP is up → restart, exit 0 after
engine death → restart."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from llmd.daemon.daemon import EXIT_ENGINE_GAVE_UP
from tests.support.llmd_process import LlmdProcess
from tests.support.model import ensure_tiny_model
from tests.support.sim_process import sim_config
from tests.support.waiting import wait_for

FAST_RESTARTS = {"backoff_initial_s": 0.1, "backoff_max_s": 0.5}
# The simulator's `--fault-*-after N` count generation requests, and each boot's warm-up
# (llmd/supervisor/warmup.py) is the first: N = 1 + the clients' requests before the fault.
CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}
Start = Callable[..., LlmdProcess]


@pytest.fixture
def start_llmd() -> Iterator[Start]:
    """`start_llmd(args, **sections)`: llmd on the simulator with extra simulator flags."""
    started: list[LlmdProcess] = []

    def start(args: tuple[str, ...] = (), **sections: dict[str, Any]) -> LlmdProcess:
        sections = {"supervisor": FAST_RESTARTS, **sections}
        process = LlmdProcess.start(sim_config(ensure_tiny_model(), args, **sections))
        started.append(process)
        return process

    yield start
    for process in started:
        process.stop()


def engine_status(llmd: LlmdProcess) -> dict[str, Any]:
    engine: dict[str, Any] = llmd.admin_status()["engine"]
    return engine


def test_engine_crash_is_restarted(start_llmd: Start) -> None:
    """An engine that exits non-zero while serving is restarted and serves again; the request
    it died under answers 502 engine_error."""
    llmd = start_llmd(("--fault-crash-after", "2"))
    llmd.wait_ready(timeout_s=30)
    assert httpx.post(llmd.base_url + "/v1/chat/completions", json=CHAT).status_code == 200
    crashed = httpx.post(llmd.base_url + "/v1/chat/completions", json=CHAT)
    assert crashed.status_code == 502 and crashed.json()["error"]["code"] == "engine_error"
    assert wait_for(lambda: engine_status(llmd)["restarts"] >= 1, 15)
    llmd.wait_ready(timeout_s=30)
    assert httpx.post(llmd.base_url + "/v1/chat/completions", json=CHAT).status_code == 200
    assert engine_status(llmd)["last_exit_reason"] == "exit_code"


def test_repeated_boot_failure_gives_up_with_exit_79(start_llmd: Start) -> None:
    """An engine that never boots is retried max_failed_boots times, then llmd exits 79."""
    llmd = start_llmd(
        ("--fault-boot-exit", "3"), supervisor={**FAST_RESTARTS, "max_failed_boots": 2}
    )
    assert llmd.process.wait(timeout=30) == EXIT_ENGINE_GAVE_UP
    assert "engine_gave_up" in llmd.log_tail()


def test_engine_dead_with_http_up_is_restarted(start_llmd: Start) -> None:
    """/health 503 while the HTTP server stays up: llmd stops that engine and starts another."""
    llmd = start_llmd(("--fault-dead-after", "1"), engine={"health_interval_s": 0.2})
    llmd.wait_ready(timeout_s=30)
    failed = httpx.post(llmd.base_url + "/v1/chat/completions", json=CHAT)
    assert failed.status_code == 502 and failed.json()["error"]["code"] == "engine_error"
    assert wait_for(lambda: engine_status(llmd)["last_exit_reason"] == "engine_dead", 15)
    assert wait_for(lambda: engine_status(llmd)["state"] == "serving", 15)


def test_exit_zero_after_engine_death_is_a_failure(start_llmd: Start) -> None:
    """The engine dies and its server exits 0 (vllm#48966): llmd treats it as a failure and
    restarts it."""
    llmd = start_llmd(("--fault-dead-after", "1", "--fault-exit-on-death", "0.1"))
    llmd.wait_ready(timeout_s=30)
    httpx.post(llmd.base_url + "/v1/chat/completions", json=CHAT)
    assert wait_for(lambda: engine_status(llmd)["last_exit_reason"] == "exit_0_while_serving", 15)
    assert wait_for(lambda: engine_status(llmd)["state"] == "serving", 15)
