"""Fault injection in the simulator: per request (x-sim-fault, sim_fault) and by flag."""

from __future__ import annotations

import asyncio
import json
import re

import httpx
import pytest

from llmd.endpoints.events import EventStream
from tests.engine.sim.conftest import RunningSim, SimFactory

CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 8}


async def test_error_fault_answers_that_status(sim: RunningSim) -> None:
    """`error:503` answers 503 in vLLM's error shape."""
    response = await sim.client.post(
        "/v1/chat/completions", json=CHAT, headers={"x-sim-fault": "error:503"}
    )
    assert response.status_code == 503 and response.json()["error"]["code"] == 503


async def test_body_field_arms_a_fault_too(sim: RunningSim) -> None:
    """The `sim_fault` body field works like the header (it survives proxies)."""
    response = await sim.client.post(
        "/v1/chat/completions", json={**CHAT, "sim_fault": "error:500"}
    )
    assert response.status_code == 500


async def test_bad_fault_spec_is_a_400(sim: RunningSim) -> None:
    """A spec that does not parse is the client's error."""
    response = await sim.client.post(
        "/v1/chat/completions", json=CHAT, headers={"x-sim-fault": "explode"}
    )
    assert response.status_code == 400


async def test_die_after_drops_the_stream_after_k_tokens(sim: RunningSim) -> None:
    """`die-after:2` sends the role and two tokens, then drops the connection (no [DONE])."""
    received = b""
    with pytest.raises(httpx.RemoteProtocolError):
        async with sim.client.stream(
            "POST",
            "/v1/chat/completions",
            json={**CHAT, "stream": True},
            headers={"x-sim-fault": "die-after:2"},
        ) as response:
            async for chunk in response.aiter_bytes():
                received += chunk
    assert received.count(b"data: ") == 3 and b"[DONE]" not in received
    assert sim.server.engine.num_running == 0


async def test_hang_sends_nothing_until_the_client_leaves(sim: RunningSim) -> None:
    """`hang` accepts the request and never answers."""
    with pytest.raises(httpx.ReadTimeout):
        await sim.client.post(
            "/v1/chat/completions", json=CHAT, headers={"x-sim-fault": "hang"}, timeout=0.3
        )


async def test_dead_engine_keeps_http_up(sim: RunningSim) -> None:
    """`dead`: /health turns 503 and generation answers 500 EngineDeadError, HTTP still up."""
    response = await sim.client.post(
        "/v1/chat/completions", json=CHAT, headers={"x-sim-fault": "dead"}
    )
    assert response.status_code == 500
    assert response.json()["error"]["type"] == "InternalServerError"
    assert "EngineCore encountered an issue" in response.json()["error"]["message"]
    assert (await sim.client.get("/health")).status_code == 503
    assert (await sim.client.post("/v1/chat/completions", json=CHAT)).status_code == 500
    assert (await sim.client.get("/v1/models")).status_code == 200


async def test_engine_death_mid_stream_is_an_in_band_error(make_sim: SimFactory) -> None:
    """A stream in flight when the engine dies ends with an error event and [DONE]."""
    sim: RunningSim = await make_sim("--step-base-ms", "5")
    body = {**CHAT, "max_tokens": 500, "stream": True}
    async with sim.client.stream("POST", "/v1/chat/completions", json=body) as response:
        chunks = response.aiter_bytes()
        await chunks.__anext__()
        await sim.client.post(
            "/v1/completions", json={"prompt": "x"}, headers={"x-sim-fault": "dead"}
        )
        rest = b"".join([chunk async for chunk in chunks])
    assert rest.endswith(b"data: [DONE]\n\n")
    assert b'"type":"InternalServerError"' in rest.replace(b" ", b"")


async def test_crash_after_n_requests(make_sim: SimFactory) -> None:
    """--fault-crash-after 2: two requests served, the process exits non-zero on the third."""
    sim: RunningSim = await make_sim("--fault-crash-after", "2", "--fault-crash-code", "3")
    for _ in range(2):
        assert (await sim.client.post("/v1/chat/completions", json=CHAT)).status_code == 200
    assert sim.exits == []
    await sim.client.post("/v1/chat/completions", json=CHAT)
    assert sim.exits[0] == 3


async def test_exit_zero_after_engine_death(make_sim: SimFactory) -> None:
    """--fault-dead-after 0 --fault-exit-on-death S: the engine dies on the first request and
    the process exits with status 0 S seconds later (vllm#48966)."""
    sim: RunningSim = await make_sim("--fault-dead-after", "0", "--fault-exit-on-death", "0.05")
    assert (await sim.client.post("/v1/chat/completions", json=CHAT)).status_code == 500
    await asyncio.sleep(0.2)
    assert sim.exits == [0]


async def test_error_rate_one_fails_every_request(make_sim: SimFactory) -> None:
    """--fault-error-rate 1 --fault-error-status 502 answers every generation with 502."""
    sim: RunningSim = await make_sim("--fault-error-rate", "1", "--fault-error-status", "502")
    statuses = {
        (await sim.client.post("/v1/completions", json={"prompt": "x"})).status_code
        for _ in range(5)
    }
    assert statuses == {502}


async def test_empty_answers_carry_no_text_and_end_at_once(make_sim: SimFactory) -> None:
    """`empty` (header) answers with no text, finish_reason stop and 1 completion token,
    streamed or not; --fault-empty-rate 1 does it to every generation request."""
    sim: RunningSim = await make_sim()
    whole = await sim.client.post(
        "/v1/chat/completions", json=CHAT, headers={"x-sim-fault": "empty"}
    )
    choice = whole.json()["choices"][0]
    assert (choice["message"]["content"], choice["finish_reason"]) == ("", "stop")
    assert whole.json()["usage"]["completion_tokens"] == 1
    every: RunningSim = await make_sim("--fault-empty-rate", "1")
    received = b""
    async with every.client.stream(
        "POST", "/v1/chat/completions", json={**CHAT, "stream": True}
    ) as response:
        async for chunk in response.aiter_bytes():
            received += chunk
    assert b'"content":""' in received and b'"finish_reason":"stop"' in received
    assert not re.search(rb'"content":"[^"]', received)  # no delta carries text
    assert received.endswith(b"data: [DONE]\n\n")
    texts = [
        (await every.client.post("/v1/completions", json={"prompt": "x"})).json()["choices"][0]
        for _ in range(3)
    ]
    assert {t["text"] for t in texts} == {""}


async def test_stall_stops_tokens_while_health_and_metrics_answer(make_sim: SimFactory) -> None:
    """--fault-stall-after-s S: S seconds after boot no stream gets another token, while
    /health stays 200 and /metrics answers with the running gauge and counters frozen (as
    vLLM's API server with its EngineCore stopped)."""
    sim: RunningSim = await make_sim("--step-base-ms", "20", "--fault-stall-after-s", "0.3")
    engine = sim.server.engine
    body = {**CHAT, "max_tokens": 1000, "stream": True}  # 1,000 steps of 20 ms: 20 s
    async with sim.client.stream("POST", "/v1/chat/completions", json=body) as response:
        assert response.status_code == 200
        received = bytearray()

        async def read() -> None:
            async for chunk in response.aiter_bytes():
                received.extend(chunk)

        reader = asyncio.create_task(read())
        while not engine.stalled:  # the stall comes 0.3 s after boot
            await asyncio.wait({reader}, timeout=0.05)
        metrics = (await sim.client.get("/metrics")).text
        pattern = r"^vllm:generation_tokens_total\{[^}]*\} (\S+)$"
        made = sum(float(v) for v in re.findall(pattern, metrics, re.M))
        deadline = asyncio.get_running_loop().time() + 10
        # The tokens made before the stall may still be on their way: wait for the last.
        while received.count(b'"delta":{"content"') < made:
            assert asyncio.get_running_loop().time() < deadline, (made, bytes(received[-300:]))
            await asyncio.wait({reader}, timeout=0.05)
        before = len(received)
        _, pending = await asyncio.wait({reader}, timeout=1.0)  # the stream never ends
        assert pending and len(received) == before and b"[DONE]" not in received
        assert (await sim.client.get("/health")).status_code == 200
        running = re.search(r"^vllm:num_requests_running\{[^}]*\} (\S+)$", metrics, re.M)
        assert running is not None and float(running.group(1)) == 1.0
        again = (await sim.client.get("/metrics")).text
        assert re.findall(pattern, metrics, re.M) == re.findall(pattern, again, re.M)
        reader.cancel()


async def test_sse_layout_writes_another_valid_layout(make_sim: SimFactory) -> None:
    """--fault-sse-layout: CRLF, comments, id: and event: fields, `data:` unspaced, data over
    two lines; read by the spec the events are the ones vLLM's layout carries."""
    plain: RunningSim = await make_sim()
    other: RunningSim = await make_sim("--fault-sse-layout")
    body = {**CHAT, "stream": True, "stream_options": {"include_usage": True}}
    streams = []
    for sim in (plain, other):
        async with sim.client.stream("POST", "/v1/chat/completions", json=body) as response:
            streams.append(b"".join([chunk async for chunk in response.aiter_bytes()]))
    assert b"\r\n" in streams[1] and b"data:{" in streams[1] and b": sim" in streams[1]
    events = []
    for stream in streams:
        reader = EventStream()
        events.append([json.loads(d) if d != b"[DONE]" else d for _, d in reader.feed(stream)])
        assert reader.done and reader.between_events
    strip = ("id", "created")
    plain_events, other_events = (
        [{k: v for k, v in e.items() if k not in strip} if isinstance(e, dict) else e for e in es]
        for es in events
    )
    assert plain_events == other_events


async def test_a_stall_fault_stalls_the_core_from_that_request_on(make_sim: SimFactory) -> None:
    """`stall` (header or body): the core stalls as the request arrives; the request never
    gets a token while /health stays 200."""
    sim: RunningSim = await make_sim("--step-base-ms", "5")
    assert (await sim.client.post("/v1/completions", json={"prompt": "x"})).status_code == 200
    assert not sim.server.engine.stalled
    with pytest.raises(httpx.ReadTimeout):
        await sim.client.post(
            "/v1/completions", json={"prompt": "x", "sim_fault": "stall"}, timeout=1.0
        )
    assert sim.server.engine.stalled
    assert (await sim.client.get("/health")).status_code == 200
