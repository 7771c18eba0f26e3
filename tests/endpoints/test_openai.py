"""The OpenAI readers: the fields llmd reads of each endpoint's body (types, empty or missing
prompts, what is counted locally, pairs, outputs) into one Fields record."""

from __future__ import annotations

from typing import Any

import pytest

from llmd.endpoints.openai import read_chat, read_completions
from llmd.errors import InvalidRequest
from llmd.validation.fields import ChatPrompt, TextPrompt

USER = [{"role": "user", "content": "hi"}]

BAD_CHAT: list[tuple[dict[str, Any], str]] = [
    ({}, "messages"),
    ({"messages": None}, "messages"),
    ({"messages": "hi"}, "messages"),
    ({"messages": []}, "messages"),
    ({"messages": ["hi"]}, "messages"),
    ({"messages": [{"content": "hi"}]}, "messages"),
    ({"messages": [{"role": 1, "content": "hi"}]}, "messages"),
    ({"messages": [{"role": "user", "content": 5}]}, "messages"),
    ({"messages": [{"role": "user", "content": None}]}, "messages"),
    ({"messages": [{"role": "user", "content": ["a"]}]}, "messages"),
    ({"messages": [{"role": "user", "content": [{"text": "a"}]}]}, "messages"),
    ({"messages": [{"role": "user", "content": [{"type": "text"}]}]}, "messages"),
    ({"messages": [{"role": "user", "content": [{"type": "text", "text": 1}]}]}, "messages"),
    ({"messages": [{"role": "user", "content": "x", "name": 5}]}, "messages"),
    ({"messages": USER, "model": 5}, "model"),
    ({"messages": USER, "max_tokens": "10"}, "max_tokens"),
    ({"messages": USER, "max_tokens": 1.5}, "max_tokens"),
    ({"messages": USER, "max_tokens": True}, "max_tokens"),
    ({"messages": USER, "max_tokens": 0}, "max_tokens"),
    ({"messages": USER, "max_tokens": -3}, "max_tokens"),
    ({"messages": USER, "max_completion_tokens": 0}, "max_completion_tokens"),
    ({"messages": USER, "n": 0}, "n"),
    ({"messages": USER, "n": "2"}, "n"),
    ({"messages": USER, "add_generation_prompt": "yes"}, "add_generation_prompt"),
    ({"messages": USER, "continue_final_message": True}, "continue_final_message"),
    ({"messages": USER, "chat_template_kwargs": []}, "chat_template_kwargs"),
    ({"messages": USER, "truncate_prompt_tokens": -2}, "truncate_prompt_tokens"),
]

BAD_COMPLETIONS: list[tuple[dict[str, Any], str]] = [
    ({}, "prompt"),
    ({"prompt": ""}, "prompt"),
    ({"prompt": []}, "prompt"),
    ({"prompt": 5}, "prompt"),
    ({"prompt": {"text": "a"}}, "prompt"),
    ({"prompt": [[]]}, "prompt"),
    ({"prompt": [1, -1]}, "prompt"),
    ({"prompt": [1, True]}, "prompt"),
    ({"prompt": [[1], "a"]}, "prompt"),
    ({"prompt": ["a", None]}, "prompt"),
    ({"prompt": "a", "max_tokens": 0}, "max_tokens"),
    ({"prompt": "a", "echo": "true"}, "echo"),
    ({"prompt": "a", "add_special_tokens": 1}, "add_special_tokens"),
]


@pytest.mark.parametrize(("body", "param"), BAD_CHAT)
def test_bad_chat_fields_are_400_with_param(body: dict[str, Any], param: str) -> None:
    """A chat body with a wrong type or an empty or missing field is refused, naming it."""
    with pytest.raises(InvalidRequest) as caught:
        read_chat(body)
    assert caught.value.param == param
    assert caught.value.status == 400


@pytest.mark.parametrize(("body", "param"), BAD_COMPLETIONS)
def test_bad_completions_fields_are_400_with_param(body: dict[str, Any], param: str) -> None:
    """A completions body with a wrong type or an empty or missing prompt is refused."""
    with pytest.raises(InvalidRequest) as caught:
        read_completions(body)
    assert caught.value.param == param


def test_completion_prompt_shapes() -> None:
    """A string, strings, token ids and lists of token ids each give one prompt per sequence."""
    shapes = {
        "a": ["a"],
        '["a", ""]': ["a", ""],
        "[1, 2]": [[1, 2]],
        "[[1], [2, 3]]": [[1], [2, 3]],
    }
    bodies = {"a": "a", '["a", ""]': ["a", ""], "[1, 2]": [1, 2], "[[1], [2, 3]]": [[1], [2, 3]]}
    for key, prompt in bodies.items():
        fields = read_completions({"prompt": prompt})
        assert isinstance(fields.prompt, TextPrompt)
        assert fields.prompt.prompts == shapes[key]
        assert fields.prompt.add_special_tokens is True


def test_max_completion_tokens_wins_over_max_tokens() -> None:
    """As in vLLM 0.32, max_completion_tokens is the budget when both are given."""
    fields = read_chat({"messages": USER, "max_tokens": 50, "max_completion_tokens": 7})
    assert (fields.output.max_tokens, fields.output.field) == (7, "max_completion_tokens")


def test_null_max_tokens_and_n_mean_omitted() -> None:
    """`null` max_tokens is the same as omitting it; `null` n is 1."""
    fields = read_chat({"messages": USER, "max_tokens": None, "n": None})
    assert (fields.output.max_tokens, fields.output.n) == (None, 1)


def test_echo_allows_zero_max_tokens_for_completions() -> None:
    """vLLM accepts max_tokens=0 for completions that echo the prompt, so llmd does too."""
    fields = read_completions({"prompt": "a", "echo": True, "max_tokens": 0})
    assert fields.output.max_tokens == 0


def test_missing_content_and_assistant_null_content_are_accepted() -> None:
    """A message without content, and an assistant message with null content, are valid."""
    body = {"messages": [{"role": "user"}, {"role": "assistant", "content": None}]}
    assert isinstance(read_chat(body).prompt, ChatPrompt)


@pytest.mark.parametrize(
    "body",
    [
        {"messages": USER, "tools": [{"type": "function", "function": {"name": "f"}}]},
        {"messages": USER, "chat_template": "{{ messages }}"},
        {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]},
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "a", "x": 1}]}]},
        {"messages": [{"role": "assistant", "content": None, "tool_calls": []}]},
        {"messages": USER, "chat_template_kwargs": {"tools": []}},
    ],
)
def test_what_llmd_does_not_render_is_counted_by_the_engine(body: dict[str, Any]) -> None:
    """Tools, request templates, non-text parts and tool calls are not rendered locally."""
    prompt = read_chat(body).prompt
    assert isinstance(prompt, ChatPrompt)
    assert not prompt.local


def test_an_unknown_content_part_type_is_one_sentence_listing_the_types() -> None:
    """A content part of a type vLLM 0.32 does not parse is a 400 naming the part and the types
    it takes (the engine's /tokenize answered an 8-error pydantic dump)."""
    part = {"type": "nope", "x": 1}
    with pytest.raises(InvalidRequest) as caught:
        read_chat({"messages": [{"role": "user", "content": ["a", part]}]})
    message = caught.value.message
    assert caught.value.param == "messages"
    assert message.startswith("messages[0].content[0] must be an object")  # "a": not a part
    with pytest.raises(InvalidRequest) as caught:
        read_chat({"messages": [{"role": "user", "content": [part]}]})
    message = caught.value.message
    assert message.startswith("messages[0].content[0].type must be one of text, input_text,")
    assert "image_url" in message and message.endswith("; got 'nope'")


def test_unknown_fields_are_ignored() -> None:
    """Fields llmd does not read are not checked (they pass through to the engine)."""
    fields = read_chat({"messages": USER, "temperature": "hot", "x": [1]})
    assert isinstance(fields.prompt, ChatPrompt) and fields.prompt.local
