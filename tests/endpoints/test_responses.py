"""The Responses readers: text-only conversations rendered here, the rest counted by the
engine's /tokenize with the chat messages and tools vLLM builds; the output budget clamped;
fields of the wrong type refused naming them; a stored turn continued."""

from __future__ import annotations

from typing import Any

import pytest

from llmd.config import ValidationConfig
from llmd.endpoints.responses import (
    continued_input,
    input_tokens_answer,
    read_input_tokens,
    read_responses,
)
from llmd.errors import InvalidRequest
from llmd.validation.context import check_context
from llmd.validation.fields import ChatPrompt, EnginePrompt

FUNCTION = {"type": "function", "name": "f", "parameters": {"type": "object"}}


def test_a_text_conversation_is_rendered_here() -> None:
    """Instructions, input text and text parts: a ChatPrompt llmd renders, with the
    generation prompt; the output budget is max_output_tokens, clamped past the window."""
    fields = read_responses(
        {
            "model": "tiny",
            "instructions": "Be brief.",
            "input": [
                {"role": "user", "content": [{"type": "input_text", "text": "Hi"}]},
                {"type": "message", "role": "assistant", "content": "Yo"},
            ],
            "max_output_tokens": 5,
            "stream": True,
        }
    )
    prompt = fields.prompt
    assert isinstance(prompt, ChatPrompt) and prompt.local and prompt.param == "input"
    assert prompt.messages[0] == {"role": "system", "content": "Be brief."}
    assert prompt.add_generation_prompt and not prompt.continue_final_message
    assert fields.output.max_tokens == 5 and fields.output.field == "max_output_tokens"
    assert fields.clamp and fields.stream and fields.model == "tiny"


def test_an_omitted_output_limit_takes_the_rest_of_the_context() -> None:
    """A Responses request without max_output_tokens (Codex CLI sends none) gets what OpenAI
    and vLLM 0.32 give, the rest of the context: validation.default_max_tokens, written for
    chat, does not cut a coding agent's answer at 2,048 tokens."""
    fields = read_responses({"model": "tiny", "input": "Write the whole file."})
    decision = check_context(
        [10], fields.output, 32768, ValidationConfig(), "reject", prompt_param="input"
    )
    assert decision.max_tokens is None and fields.output.rest_of_context


@pytest.mark.parametrize(
    "extra",
    [
        {"tools": [FUNCTION]},
        {"reasoning": {"effort": "low"}},
        {"input": [{"role": "user", "content": "q"}, {"type": "reasoning", "summary": []}]},
        {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "u"}]}]},
        {"chat_template_kwargs": {"chat_template": "{{ x }}"}},
    ],
)
def test_anything_else_is_counted_by_the_engine(extra: dict[str, Any]) -> None:
    """Tools, a reasoning effort, reasoning items, images, a template of the request's own:
    the engine's /tokenize counts the chat messages and tools vLLM 0.32 builds."""
    prompt = read_input_tokens({"model": "tiny", "input": "hi", **extra}).prompt
    assert isinstance(prompt, EnginePrompt)
    assert prompt.path == "/tokenize" and prompt.count_field == "count"
    assert prompt.param == "input" and prompt.body["add_special_tokens"] is True
    assert prompt.body["messages"][-1]["role"] in ("user", "assistant")


def test_the_engine_gets_the_tools_and_the_effort_as_vllm_renders_them() -> None:
    """A function tool as a chat tool; a reasoning effort as the template's reasoning_effort
    and enable_thinking (unless the request set it)."""
    body = read_input_tokens(
        {"input": "hi", "tools": [FUNCTION], "reasoning": {"effort": "none"}}
    ).prompt
    assert isinstance(body, EnginePrompt)
    assert body.body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "f",
                "description": None,
                "parameters": {"type": "object"},
                "strict": None,
                "defer_loading": None,
            },
        }
    ]
    assert body.body["chat_template_kwargs"] == {
        "reasoning_effort": "none",
        "enable_thinking": False,
    }


def test_an_unfinished_last_message_is_continued() -> None:
    """A last assistant message left incomplete is continued: no generation prompt."""
    unfinished = {"type": "message", "role": "assistant", "content": "Hel", "status": "incomplete"}
    prompt = read_responses({"input": [{"role": "user", "content": "hi"}, unfinished]}).prompt
    assert isinstance(prompt, ChatPrompt)
    assert prompt.continue_final_message and not prompt.add_generation_prompt


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({}, "input"),
        ({"input": []}, "input"),
        ({"input": 5}, "input"),
        ({"input": [{"type": "bogus"}]}, "input"),
        ({"input": "x", "instructions": 3}, "instructions"),
        ({"input": "x", "max_output_tokens": 0}, "max_output_tokens"),
        ({"input": "x", "max_output_tokens": "8"}, "max_output_tokens"),
        ({"input": "x", "max_output_tokens": True}, "max_output_tokens"),
        ({"input": "x", "stream": "yes"}, "stream"),
        ({"input": "x", "store": 1}, "store"),
        ({"input": "x", "background": True}, "background"),
        ({"input": "x", "truncation": "sometimes"}, "truncation"),
        ({"input": "x", "reasoning": "high"}, "reasoning"),
        ({"input": "x", "tools": {"type": "function"}}, "tools"),
        ({"input": "x", "model": 3}, "model"),
        ({"input": "x", "chat_template_kwargs": []}, "chat_template_kwargs"),
        ({"input": "x", "conversation": "conv_1"}, "conversation"),
    ],
)
def test_a_field_of_the_wrong_type_is_refused_naming_it(body: dict[str, Any], param: str) -> None:
    """Wrong types, unknown item kinds, an empty input: 400 naming the field."""
    with pytest.raises(InvalidRequest) as caught:
        read_responses(body)
    assert caught.value.param == param


def test_truncation_auto_cuts_the_prompt_to_the_window() -> None:
    """`truncation: auto` (or null, as vLLM 0.32 reads it) is vLLM's truncate_prompt_tokens
    -1 (the prompt cut to the window); absent or `disabled`, nothing is cut."""
    assert read_responses({"input": "x", "truncation": "auto"}).truncate_prompt_tokens == -1
    assert read_responses({"input": "x", "truncation": None}).truncate_prompt_tokens == -1
    assert read_responses({"input": "x"}).truncate_prompt_tokens is None
    assert read_responses({"input": "x", "truncation": "disabled"}).truncate_prompt_tokens is None


def test_a_stored_turn_is_continued_with_its_input_and_output() -> None:
    """The next turn's input: the stored context, the output items a model reads back (not a
    message without content, nor a built-in tool's call), then its own items."""
    context = [{"role": "user", "content": "one"}]
    output = [
        {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"text": "t"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "A"}]},
        {"type": "message", "role": "assistant", "content": []},
        {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
        {"type": "web_search_call", "id": "ws_1"},
    ]
    items = [{"role": "user", "content": "two"}]
    continued = continued_input(context, {"output": output}, items)
    assert continued == [*context, output[0], output[1], output[3], *items]
    assert continued_input(context, {}, items) == [*context, *items]


def test_the_input_tokens_answer_is_openais() -> None:
    """`{"object": "response.input_tokens", "input_tokens": N}` (OpenAI InputTokenCountResponse)."""
    assert input_tokens_answer(12) == {"object": "response.input_tokens", "input_tokens": 12}
