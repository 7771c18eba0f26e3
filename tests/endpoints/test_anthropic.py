"""The Anthropic Messages readers: the fields llmd reads, the conversation as vLLM 0.32 hands
it to the chat template, and what only the engine can count."""

from __future__ import annotations

from typing import Any

import pytest

from llmd.endpoints.anthropic import COUNT_PATH, read_count_tokens, read_messages
from llmd.errors import InvalidRequest
from llmd.validation.fields import ChatPrompt, EnginePrompt

USER = [{"role": "user", "content": "Hello"}]


def test_a_text_conversation_is_rendered_as_vllm_converts_it() -> None:
    """The system prompt (a string, or text blocks less Claude Code's billing line) becomes
    the first message; one text block becomes a string, several stay parts, empty ones
    go; an assistant left empty stays, a user left empty goes (vLLM 0.32
    `to_chat_completion_request`)."""
    body: dict[str, Any] = {
        "model": "tiny",
        "max_tokens": 50,
        "system": [
            {"type": "text", "text": "x-anthropic-billing-header: cc_version=1; cch=abc;"},
            {"type": "text", "text": "You are terse. "},
            {"type": "text", "text": "Answer briefly."},
        ],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Hi"}]},
            {"role": "assistant", "content": [{"type": "text", "text": ""}]},
            {
                "role": "user",
                "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
            },
            {"role": "user", "content": []},
        ],
    }
    fields = read_messages(body)
    assert isinstance(fields.prompt, ChatPrompt) and fields.prompt.add_generation_prompt
    assert fields.prompt.messages == [
        {"role": "system", "content": "You are terse. Answer briefly."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant"},
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
    ]
    assert fields.output.max_tokens == 50 and fields.clamp and not fields.stream


@pytest.mark.parametrize(
    "extra",
    [
        {"tools": [{"name": "read", "input_schema": {"type": "object"}}]},
        {"thinking": {"type": "enabled", "budget_tokens": 2048}},
        {"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]},
        {"messages": [{"role": "system", "content": "inline"}, *USER]},
        {
            "messages": [
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "R"}]},
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": "t",
                            "content": [{"type": "image", "source": {}}],
                        }
                    ],
                },
            ]
        },
    ],
)
def test_what_llmd_does_not_render_is_counted_by_the_engine(extra: dict[str, Any]) -> None:
    """Tools, thinking, images, inline system messages, tool results with images: the request
    goes to the engine's own count_tokens (less max_tokens and stream), counted there exactly."""
    fields = read_count_tokens({"model": "tiny", "messages": USER, **extra})
    assert isinstance(fields.prompt, EnginePrompt)
    assert fields.prompt.path == COUNT_PATH and fields.prompt.count_field == "input_tokens"
    assert "max_tokens" not in fields.prompt.body and not fields.output.generates


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"messages": USER}, "max_tokens"),
        ({"messages": USER, "max_tokens": 0}, "max_tokens"),
        ({"messages": USER, "max_tokens": "5"}, "max_tokens"),
        ({"messages": [], "max_tokens": 5}, "messages"),
        ({"messages": [{"role": "tool", "content": "x"}], "max_tokens": 5}, "messages"),
        ({"messages": [{"role": "user", "content": 5}], "max_tokens": 5}, "messages"),
        (
            {"messages": [{"role": "user", "content": [{"type": "video"}]}], "max_tokens": 5},
            "messages",
        ),
        (
            {"messages": [{"role": "user", "content": [{"type": "text"}]}], "max_tokens": 5},
            "messages",
        ),
        (
            {"messages": [{"role": "user", "content": [{"type": "tool_result"}]}], "max_tokens": 5},
            "messages",
        ),
        ({"messages": USER, "max_tokens": 5, "system": 5}, "system"),
        ({"messages": USER, "max_tokens": 5, "system": [{"type": "image"}]}, "system"),
        ({"messages": USER, "max_tokens": 5, "tools": [{"input_schema": {}}]}, "tools"),
        ({"messages": USER, "max_tokens": 5, "stream": "yes"}, "stream"),
        ({"messages": USER, "max_tokens": 5, "model": 3}, "model"),
    ],
)
def test_bad_messages_bodies_name_the_field(body: dict[str, Any], param: str) -> None:
    """Wrong types, an unknown role or block, a missing max_tokens, a tool_result without its
    tool_use id: 400 naming the field."""
    with pytest.raises(InvalidRequest) as caught:
        read_messages(body)
    assert caught.value.param == param


def test_a_tool_result_answers_a_tool_use_of_the_message_before() -> None:
    """A tool_result whose tool_use_id no tool_use of the previous message has is a 400 in
    Anthropic's words; one that answers the call before it is read."""
    use = {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {}}
    result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "x"}
    answered = [
        {"role": "user", "content": "read"},
        {"role": "assistant", "content": [use]},
        {"role": "user", "content": [result]},
    ]
    read_messages({"max_tokens": 8, "messages": answered})
    for orphan in (
        [{"role": "user", "content": [result]}],
        [answered[0], {"role": "assistant", "content": "no call"}, answered[2]],
        [
            *answered,
            {"role": "assistant", "content": "done"},
            {"role": "user", "content": [result]},
        ],
    ):
        with pytest.raises(InvalidRequest, match="unexpected `tool_use_id`"):
            read_messages({"max_tokens": 8, "messages": orphan})
