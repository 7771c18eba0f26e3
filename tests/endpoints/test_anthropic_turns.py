"""Anthropic turns with tool_use and tool_result blocks as vLLM 0.32 converts them to chat
messages (entrypoints/anthropic/serving.py `_convert_messages`), and the tool calls as its
chat parsing hands them to the template."""

from __future__ import annotations

from llmd.endpoints.anthropic_turns import chat_turns, renders
from llmd.validation.conversation import build_conversation


def call(ident: str, arguments: object) -> dict[str, object]:
    return {"type": "tool_use", "id": ident, "name": "Read", "input": arguments}


def test_tool_use_becomes_tool_calls_beside_the_text() -> None:
    """Texts (one: a string; more: text parts) and each tool_use in order as a function call,
    arguments written by json.dumps with its defaults (", ", ": ", ASCII escapes); no input
    is {}."""
    turn = {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Reading."},
            call("t1", {"path": "é", "n": 1.5}),
            {"type": "text", "text": ""},
            call("t2", None),
        ],
    }
    assert chat_turns(turn) == [
        {
            "role": "assistant",
            "tool_calls": [
                {"id": "t1", "type": "function",
                 "function": {"name": "Read", "arguments": '{"path": "\\u00e9", "n": 1.5}'}},
                {"id": "t2", "type": "function", "function": {"name": "Read", "arguments": "{}"}},
            ],
            "content": "Reading.",
        }
    ]  # fmt: skip
    only_calls = chat_turns({"role": "assistant", "content": [call("t1", {})]})
    assert "content" not in only_calls[0] and len(only_calls[0]["tool_calls"]) == 1


def test_tool_results_come_before_the_user_text_they_sit_beside() -> None:
    """Each tool_result is a tool message (text items joined with newlines, none: "",
    is_error not shown), ahead of the user message with the texts, wherever the texts stand;
    a user message of results only leaves no user message."""
    turn = {
        "role": "user",
        "content": [
            {"type": "text", "text": "before"},
            {"type": "tool_result", "tool_use_id": "t1", "content": "gone", "is_error": True},
            {"type": "tool_result", "tool_use_id": "t2",
             "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
            {"type": "tool_result", "tool_use_id": "t3"},
        ],
    }  # fmt: skip
    assert chat_turns(turn) == [
        {"role": "tool", "tool_call_id": "t1", "content": "gone"},
        {"role": "tool", "tool_call_id": "t2", "content": "a\nb"},
        {"role": "tool", "tool_call_id": "t3", "content": ""},
        {"role": "user", "content": "before"},
    ]
    results_only = {"role": "user", "content": [turn["content"][1]]}
    assert [t["role"] for t in chat_turns(results_only)] == ["tool"]


def test_renders_only_what_it_converts_exactly() -> None:
    """An assistant's tool_use with an id, a user's result of text; not a call without an id
    (vLLM makes one from the clock), a user's call, an assistant's result, images."""
    result = {
        "type": "tool_result",
        "tool_use_id": "t1",
        "content": [{"type": "text", "text": "a"}],
    }
    assert renders({"role": "assistant", "content": [call("t1", {"a": 1})]})
    assert renders({"role": "user", "content": [result]})
    assert not renders({"role": "assistant", "content": [call("", {})]})
    assert not renders({"role": "assistant", "content": [call("t1", [1])]})
    assert not renders({"role": "user", "content": [call("t1", {})]})
    assert not renders({"role": "assistant", "content": [result]})
    image = {**result, "content": [{"type": "image", "source": {}}]}
    assert not renders({"role": "user", "content": [image]})


def test_the_template_gets_arguments_as_an_object_in_vllms_key_order() -> None:
    """vLLM 0.32 validates a call into (id, function (arguments, name), type) and parses its
    arguments back to an object ({} for a string that is not a JSON object)."""
    made = chat_turns({"role": "assistant", "content": [call("t1", {"b": 1, "a": [2]})]})
    made[0]["tool_calls"].append(
        {"id": "t2", "type": "function", "function": {"name": "X", "arguments": "[1]"}}
    )
    conversation = build_conversation(made, "string", "")
    assert conversation == [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "t1", "function": {"arguments": {"b": 1, "a": [2]}, "name": "Read"},
                 "type": "function"},
                {"id": "t2", "function": {"arguments": {}, "name": "X"}, "type": "function"},
            ],
        }
    ]  # fmt: skip
    assert list(conversation[0]["tool_calls"][0]) == ["id", "function", "type"]
    assert list(conversation[0]["tool_calls"][0]["function"]) == ["arguments", "name"]
