"""The simulator's HTTP surface over a real Unix socket: shapes, limits, errors, streaming."""

from __future__ import annotations

import contextlib
import json
import signal
import socket
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.engine.sim.conftest import RunningSim, SimFactory
from tests.support.sim_process import SimProcess, health_status

CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "Hello world"}]}


def events(text: str) -> list[str]:
    """The `data:` payloads of an SSE body, in order."""
    assert text.endswith("\n\n")
    return [block.removeprefix("data: ") for block in text.strip().split("\n\n")]


async def test_health_and_models(sim: RunningSim) -> None:
    """/health is 200 with an empty body; /v1/models lists the served name and max_model_len."""
    health = await sim.client.get("/health")
    assert health.status_code == 200 and health.content == b""
    models = (await sim.client.get("/v1/models")).json()
    assert models["data"][0]["id"] == "tiny" and models["data"][0]["max_model_len"] == 1024


async def test_tokenize_counts_the_chat_template(sim: RunningSim) -> None:
    """/tokenize renders the chat template (generation prompt included) and counts it; the
    count is the prompt_tokens a completion then reports."""
    tokens = (await sim.client.post("/tokenize", json=CHAT)).json()
    assert tokens["tokens"] == [1, 311, 508, 312, 202, 876, 415, 2, 202, 311, 634, 312, 202]
    reply = (await sim.client.post("/v1/chat/completions", json={**CHAT, "max_tokens": 3})).json()
    assert reply["usage"]["prompt_tokens"] == tokens["count"] == 13


async def test_generation_is_deterministic_per_prompt(sim: RunningSim) -> None:
    """The same prompt gives the same text; another seed gives another."""
    body = {"model": "tiny", "prompt": "Once upon a time", "max_tokens": 12}
    first = (await sim.client.post("/v1/completions", json=body)).json()
    again = (await sim.client.post("/v1/completions", json=body)).json()
    other = (await sim.client.post("/v1/completions", json={**body, "seed": 7})).json()
    assert first["choices"][0]["text"] == again["choices"][0]["text"]
    assert first["choices"][0]["text"] != other["choices"][0]["text"]
    assert first["usage"]["completion_tokens"] == 12
    assert first["choices"][0]["finish_reason"] == "length"


async def test_completion_defaults_to_16_tokens_and_chat_to_the_room_left(sim: RunningSim) -> None:
    """max_tokens omitted: completions produce 16 tokens, chat fills the context."""
    completion = (await sim.client.post("/v1/completions", json={"prompt": "hi"})).json()
    assert completion["usage"]["completion_tokens"] == 16
    chat = (await sim.client.post("/v1/chat/completions", json=CHAT)).json()
    assert chat["usage"]["total_tokens"] == 1024


async def test_stream_chat_with_usage(sim: RunningSim) -> None:
    """A chat stream opens with the role, carries one token per chunk, ends with the finish
    reason, the usage chunk and [DONE]."""
    body = {**CHAT, "max_tokens": 4, "stream": True, "stream_options": {"include_usage": True}}
    response = await sim.client.post("/v1/chat/completions", json=body)
    assert response.headers["content-type"].startswith("text/event-stream")
    payloads = events(response.text)
    assert payloads[-1] == "[DONE]"
    chunks = [json.loads(p) for p in payloads[:-1]]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 4
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)


async def test_stop_string_ends_with_reason_stop(sim: RunningSim) -> None:
    """A stop string found in the output ends it with finish_reason stop, the string cut."""
    body = {"prompt": "Once upon a time", "max_tokens": 200}
    text = (await sim.client.post("/v1/completions", json=body)).json()["choices"][0]["text"]
    stop = text[40:43]
    reply = (await sim.client.post("/v1/completions", json={**body, "stop": [stop]})).json()
    choice = reply["choices"][0]
    assert choice["finish_reason"] == "stop" and choice["stop_reason"] == stop
    assert stop not in choice["text"] and text.startswith(choice["text"])


async def test_context_overflow_follows_vllm_0_32(sim: RunningSim) -> None:
    """Prompt + max_tokens over the context is clamped silently; a prompt alone over it, or
    max_tokens over max_model_len, is a 400 in vLLM's error shape."""
    prompt = " a" * 1000
    count = (await sim.client.post("/tokenize", json={"prompt": prompt})).json()["count"]
    clamped = await sim.client.post("/v1/completions", json={"prompt": prompt, "max_tokens": 500})
    assert clamped.status_code == 200
    assert clamped.json()["usage"]["completion_tokens"] == 1024 - count
    too_long = await sim.client.post("/v1/completions", json={"prompt": " a" * 1100})
    error: dict[str, Any] = too_long.json()["error"]
    assert too_long.status_code == 400 and error["param"] == "input_tokens"
    assert error["code"] == 400 and error["type"] == "BadRequestError"
    assert "maximum context length is 1024 tokens" in error["message"]
    over = await sim.client.post("/v1/completions", json={"prompt": "x", "max_tokens": 1025})
    assert over.status_code == 400 and over.json()["error"]["param"] == "max_tokens"


async def test_bad_input_and_unknown_model(sim: RunningSim) -> None:
    """Malformed JSON and wrong types are 400, an unknown model 404, an unknown route 404."""
    bad = await sim.client.post(
        "/v1/chat/completions", content=b"{", headers={"content-type": "application/json"}
    )
    assert bad.status_code == 400 and set(bad.json()["error"]) == {
        "message",
        "type",
        "param",
        "code",
    }
    wrong = await sim.client.post("/v1/chat/completions", json={"messages": "hi"})
    assert wrong.status_code == 400 and wrong.json()["error"]["param"] == "body.messages"
    unknown = await sim.client.post("/v1/chat/completions", json={**CHAT, "model": "nope"})
    assert unknown.status_code == 404 and unknown.json()["error"]["type"] == "NotFoundError"
    route = await sim.client.get("/nope")
    assert route.status_code == 404 and route.json() == {"detail": "Not Found"}


async def test_disconnect_aborts_and_frees_blocks(make_sim: SimFactory) -> None:
    """A client that leaves mid-stream frees its seat and KV blocks at once; like vLLM 0.32,
    the abort is not counted in request_success_total."""
    sim: RunningSim = await make_sim("--step-base-ms", "5")
    engine = sim.server.engine
    body = {**CHAT, "max_tokens": 500, "stream": True}
    async with (
        sim.client.stream("POST", "/v1/chat/completions", json=body) as response,
        contextlib.aclosing(response.aiter_bytes()) as chunks,  # closed here, not by the GC
    ):
        async for _ in chunks:
            assert engine.num_running == 1 and engine.scheduler.pool.used > 0
            break
    for _ in range(100):
        if engine.num_running == 0:
            break
        await _sleep(0.01)
    assert engine.num_running == 0 and engine.scheduler.pool.used == 0
    metrics = (await sim.client.get("/metrics")).text
    assert (
        'vllm:request_success_total{engine="0",finished_reason="abort",model_name="tiny"} 0.0'
        in metrics
    )


async def test_metrics_count_tokens_and_requests(sim: RunningSim) -> None:
    """Token counters and request_success{finished_reason} move with each request."""
    await sim.client.post("/v1/completions", json={"prompt": "hi", "max_tokens": 5})
    text = (await sim.client.get("/metrics")).text
    assert 'vllm:prompt_tokens_total{engine="0",model_name="tiny"} 2.0' in text
    assert 'vllm:generation_tokens_total{engine="0",model_name="tiny"} 5.0' in text
    assert 'finished_reason="length",model_name="tiny"} 1.0' in text
    assert 'num_gpu_blocks="1024"' in text and 'block_size="128"' in text


async def test_priority_policy_serves_urgent_waiting_first(make_sim: SimFactory) -> None:
    """With one seat and the priority policy, the waiting request with the lower priority
    value runs before an earlier, less urgent one."""
    import asyncio

    sim: RunningSim = await make_sim(
        "--scheduling-policy", "priority", "--max-num-seqs", "1", "--step-base-ms", "2"
    )
    finished: list[str] = []

    async def ask(name: str, priority: int, max_tokens: int = 10) -> None:
        body = {"prompt": name, "max_tokens": max_tokens, "priority": priority}
        await sim.client.post("/v1/completions", json=body)
        finished.append(name)

    first = asyncio.create_task(ask("first", 0, max_tokens=200))  # holds the seat ~0.4 s
    await _sleep(0.02)
    lax = asyncio.create_task(ask("lax", 5))
    await _sleep(0.005)
    urgent = asyncio.create_task(ask("urgent", -5))
    await asyncio.gather(first, lax, urgent)
    assert finished == ["first", "urgent", "lax"]


async def _sleep(seconds: float) -> None:
    import asyncio

    await asyncio.sleep(seconds)


_ = httpx


async def test_an_api_key_guards_the_v1_routes_as_vllms_does(
    make_sim: SimFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--api-key (one or more; VLLM_API_KEY without the flag) guards /v1 routes but OPTIONS:
    401 {"error": "Unauthorized"} without a matching bearer key; /health, /metrics and
    /tokenize stay open (vLLM 0.32 serve/middleware/authenticate.py)."""
    flagged = await make_sim("--api-key", "k1", "k2")
    answer = await flagged.client.post("/v1/completions", json={"prompt": "hi", "max_tokens": 1})
    assert answer.status_code == 401 and answer.json() == {"error": "Unauthorized"}
    for key in ("k1", "k2"):
        ok = await flagged.client.get("/v1/models", headers={"authorization": f"Bearer {key}"})
        assert ok.status_code == 200
    assert (await flagged.client.get("/health")).status_code == 200
    assert (await flagged.client.get("/metrics")).status_code == 200
    assert (await flagged.client.post("/tokenize", json={"prompt": "hi"})).status_code == 200
    monkeypatch.setenv("VLLM_API_KEY", "from-env")
    from_env = await make_sim()
    assert (await from_env.client.get("/v1/models")).status_code == 401
    headers = {"authorization": "Bearer from-env"}
    assert (await from_env.client.get("/v1/models", headers=headers)).status_code == 200


async def test_every_served_name_and_lora_adapter_is_listed_and_served(
    make_sim: SimFactory,
) -> None:
    """--served-model-name a b and --lora-modules x=PATH: /v1/models lists a, b, then x
    (parent a); each is accepted as `model` (the answer names a, or the adapter); others 404."""
    sim = await make_sim(
        "--served-model-name", "a", "b", "--enable-lora", "--lora-modules", "x=/adapters/x"
    )
    cards = (await sim.client.get("/v1/models")).json()["data"]
    assert [(c["id"], c["parent"]) for c in cards] == [("a", None), ("b", None), ("x", "a")]
    for name, answered_as in (("a", "a"), ("b", "a"), ("x", "x")):
        body = {"model": name, "prompt": "hi", "max_tokens": 1}
        reply = await sim.client.post("/v1/completions", json=body)
        assert reply.status_code == 200 and reply.json()["model"] == answered_as
    missing = await sim.client.post("/v1/completions", json={"model": "tiny", "prompt": "hi"})
    assert missing.status_code == 404


def test_a_burst_of_connections_queues_as_on_vllm(tiny_model: Path) -> None:
    """A burst of 600 connects while the simulator accepts none (stopped) is queued by the
    kernel, as uvicorn's backlog of 2048 queues it for vLLM, not refused past a smaller one
    (aiohttp's 128, which the simulator ran on before uvicorn)."""
    sim = SimProcess.start(tiny_model, "--zero-latency")
    sockets: list[socket.socket] = []
    try:
        sim.wait_ready()
        sim.process.send_signal(signal.SIGSTOP)
        refused = 0
        for _ in range(600):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.setblocking(False)
            sockets.append(sock)
            try:
                sock.connect(str(sim.socket))
            except BlockingIOError:  # EAGAIN: the listen queue is full
                refused += 1
        sim.process.send_signal(signal.SIGCONT)
        assert refused == 0
        assert health_status(sim.socket) == 200
    finally:
        for sock in sockets:
            sock.close()
        sim.process.send_signal(signal.SIGCONT)
        sim.stop()
