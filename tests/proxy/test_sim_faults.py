"""The proxy's answers when the engine fails, driven by simulator faults through a real
`llmd serve`: a stream cut mid-way ends in-band; an engine that is down answers 503."""

from __future__ import annotations

import json

import httpx

from tests.support.llmd_process import LlmdProcess
from tests.support.model import ensure_tiny_model
from tests.support.sim_process import sim_config
from tests.support.waiting import wait_for

CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 20}


def test_engine_death_mid_stream_is_an_in_band_error() -> None:
    """The engine drops the connection after 3 tokens: the client gets its 200 stream (the
    tokens relayed before the loss: the last one may be lost with it, as aiohttp's reader
    raises the loss before the bytes it still buffers), then an SSE error event
    (engine_error) and [DONE]."""
    llmd = LlmdProcess.start(sim_config(ensure_tiny_model()))
    try:
        llmd.wait_ready(timeout_s=30)
        body = {**CHAT, "stream": True, "sim_fault": "die-after:3"}
        response = httpx.post(llmd.base_url + "/v1/chat/completions", json=body, timeout=30)
        assert response.status_code == 200
        events = response.text.strip().split("\n\n")
        assert events[-1] == "data: [DONE]"
        error = json.loads(events[-2].removeprefix("data: "))["error"]
        assert error["code"] == "engine_error"
        contents = [json.loads(e.removeprefix("data: ")) for e in events[1:-2]]
        assert 1 <= len(contents) <= 3 and all("choices" in c for c in contents)
    finally:
        llmd.stop()


def test_engine_down_answers_503_with_retry_after() -> None:
    """While the engine boots, requests get 503 engine_unavailable with Retry-After."""
    llmd = LlmdProcess.start(sim_config(ensure_tiny_model(), ("--fault-boot-delay", "3")))
    try:

        def listening() -> bool:  # llmd listens before it spawns the engine (3 s to boot)
            try:
                return httpx.get(llmd.base_url + "/health").status_code == 200
            except httpx.TransportError:
                return False

        assert wait_for(listening, 30), llmd.log_tail()
        response = httpx.post(llmd.base_url + "/v1/chat/completions", json=CHAT)
        assert response.status_code == 503, response.text
        assert response.json()["error"]["code"] == "engine_unavailable"
        assert int(response.headers["retry-after"]) >= 1
        llmd.wait_ready(timeout_s=30)
        assert httpx.post(llmd.base_url + "/v1/chat/completions", json=CHAT).status_code == 200
    finally:
        llmd.stop()
