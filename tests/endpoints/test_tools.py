"""A chat request's `tools` and `tool_choice` are checked by llmd, as vLLM 0.32 checks them."""

from __future__ import annotations

from typing import Any

import pytest

from llmd.endpoints.openai import read_chat
from llmd.endpoints.tools import check_tools
from llmd.errors import InvalidRequest
from llmd.validation.fields import ChatPrompt

USER = [{"role": "user", "content": "hi"}]
TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}


@pytest.mark.parametrize(
    ("extra", "param", "words"),
    [
        ({"tools": "x"}, "tools", "'tools' must be an array of tool objects, got string"),
        ({"tools": []}, "tools", "must not be an empty array"),
        ({"tools": [1]}, "tools", "tools[0] must be an object, got number"),
        ({"tools": [{"type": "function"}]}, "tools", "tools[0].function must be an object"),
        ({"tools": [{"type": "x", "function": {"name": "f"}}]}, "tools", "must be 'function'"),
        ({"tools": [{"function": {}}]}, "tools", "tools[0].function.name is required"),
        (
            {"tools": [TOOL, {"function": {"name": 5}}]},
            "tools",
            "tools[1].function.name must be a string, got number",
        ),
        (
            {"tools": [{"function": {"name": "f", "parameters": "{}"}}]},
            "tools",
            "tools[0].function.parameters must be an object, got string",
        ),
        ({"tool_choice": "auto"}, "tool_choice", "'tools' must be set"),
        ({"tools": [TOOL], "tool_choice": "bogus"}, "tool_choice", "'none', 'auto', 'required'"),
        ({"tools": [TOOL], "tool_choice": {"function": 5}}, "tool_choice", "a named tool is"),
        (
            {"tools": [TOOL], "tool_choice": {"type": "function", "function": {"name": "g"}}},
            "tool_choice",
            "names the tool 'g', which is not in 'tools'",
        ),
    ],
)
def test_a_bad_tools_field_is_a_400_naming_it(
    extra: dict[str, Any], param: str, words: str
) -> None:
    """Each wrong shape of `tools` / `tool_choice` is a 400 with that param and a sentence
    naming the item, before anything is counted."""
    with pytest.raises(InvalidRequest) as caught:
        read_chat({"messages": USER, **extra})
    assert caught.value.param == param
    assert words in caught.value.message


@pytest.mark.parametrize(
    "extra",
    [
        {"tools": [TOOL]},
        {"tools": [TOOL], "tool_choice": "required"},
        {"tools": [TOOL], "tool_choice": {"type": "function", "function": {"name": "f"}}},
        {"tools": None, "tool_choice": "none"},
        {"tool_choice": None},
        {"tools": [{"function": {"name": "f", "description": None, "strict": True}}]},
    ],
)
def test_what_vllm_accepts_passes(extra: dict[str, Any]) -> None:
    """The shapes vLLM 0.32's ChatCompletionRequest takes are not refused."""
    check_tools({"messages": USER, **extra})
    assert isinstance(read_chat({"messages": USER, **extra}).prompt, ChatPrompt)
