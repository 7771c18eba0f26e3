"""Anthropic Messages turns as vLLM 0.32 converts them to chat messages for the template
(entrypoints/anthropic/serving.py `_convert_messages`): text, `tool_use` and `tool_result`
blocks; `renders` says which turns this conversion covers exactly."""

from __future__ import annotations

import json
from typing import Any


def renders(message: dict[str, Any]) -> bool:
    """Whether `message` (role checked: user or assistant) holds only what `chat_turns`
    converts as vLLM 0.32 does: text blocks, `tool_use` blocks of an assistant with a string
    `id` and `name` and an object `input` (vLLM invents an id from the clock when it has
    none), and `tool_result` blocks of a user whose content is absent, a string or a list of
    text items (vLLM renders an assistant's result, images and tool references otherwise)."""
    if message["role"] == "system":
        return False
    content = message["content"]
    if isinstance(content, str):
        return True
    for block in content:
        kind = block["type"]
        if kind == "tool_use":
            if message["role"] != "assistant" or not _renders_call(block):
                return False
        elif kind == "tool_result":
            if message["role"] != "user" or not _renders_result(block.get("content")):
                return False
        elif kind != "text":
            return False
    return True


def chat_turns(message: dict[str, Any]) -> list[dict[str, Any]]:
    """The chat messages vLLM 0.32 makes of one Anthropic message `renders` accepts, in its
    order: a `tool` message per `tool_result` (`tool_call_id`, its text items joined with
    newlines), then the message itself with its non-empty texts (one text as a string, more
    as text parts) and its `tool_use` blocks as `tool_calls` (arguments `json.dumps(input)`,
    Python's default separators and ASCII escapes). A user message left with no text is
    dropped; an assistant's is kept with no content."""
    role, content = message["role"], message["content"]
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    turns: list[dict[str, Any]] = []
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for block in content:
        if block["type"] == "text" and block["text"]:
            texts.append(block["text"])
        elif block["type"] == "tool_use":
            arguments = json.dumps(block.get("input") or {})
            function = {"name": block["name"], "arguments": arguments}
            calls.append({"id": block["id"], "type": "function", "function": function})
        elif block["type"] == "tool_result":
            turns.append(
                {"role": "tool", "tool_call_id": block["tool_use_id"], "content": _text(block)}
            )
    turn: dict[str, Any] = {"role": role}
    if calls:
        turn["tool_calls"] = calls
    if len(texts) == 1:
        turn["content"] = texts[0]
    elif texts:
        turn["content"] = [{"type": "text", "text": text} for text in texts]
    if role == "assistant" or "content" in turn:
        turns.append(turn)
    return turns


def _renders_call(block: dict[str, Any]) -> bool:
    return (
        isinstance(block.get("id"), str)
        and bool(block["id"])
        and isinstance(block.get("name"), str)
        and isinstance(block.get("input"), dict | None)
    )


def _renders_result(content: object) -> bool:
    if content is None or isinstance(content, str):
        return True
    return isinstance(content, list) and all(
        isinstance(item, dict) and item.get("type") == "text" and isinstance(item.get("text"), str)
        for item in content
    )


def _text(block: dict[str, Any]) -> str:
    """A tool_result's content as vLLM 0.32 `_convert_user_tool_result` writes it."""
    content = block.get("content")
    if isinstance(content, list):
        return "\n".join(item["text"] for item in content)
    return content or ""
