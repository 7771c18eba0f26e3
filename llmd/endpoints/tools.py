"""The shape of a chat request's `tools` and `tool_choice`, checked before its prompt is counted
(the engine's /tokenize would answer a bad one with errors about fields the client never sent)."""

from __future__ import annotations

from typing import Any

from llmd.errors import InvalidRequest
from llmd.quoting import json_type

TOOL_CHOICES = ("none", "auto", "required")
_NAMED = 'a named tool is {"type": "function", "function": {"name": "..."}}'


def check_tools(body: dict[str, Any]) -> None:
    """Check `tools` and `tool_choice` as vLLM 0.32's ChatCompletionRequest does (`tools:
    list[ChatCompletionToolsParam] | None`, FunctionDefinition, `check_tool_usage`).

    Raises InvalidRequest with param "tools" or "tool_choice" and one sentence naming the item.
    """
    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            raise _bad_tools(f"'tools' must be an array of tool objects, got {json_type(tools)}")
        if not tools:
            raise _bad_tools("'tools' must not be an empty array: give one tool or leave it out")
        for index, tool in enumerate(tools):
            _check_tool(f"tools[{index}]", tool)
    _check_choice(body.get("tool_choice"), tools)


def template_tool(tool: dict[str, Any]) -> dict[str, Any]:
    """A tool `check_tools` accepted as vLLM 0.32 gives it to the chat template
    (`ChatCompletionToolsParam.model_dump()`): `type`, then `function` with `name`,
    `description` and `parameters` (null when absent), `strict` and `defer_loading` when not
    null (a tool's own `defer_loading` goes down to its function's when that has none), then
    the tool's `defer_loading` when not null; other keys dropped."""
    given = tool["function"]
    function = {
        "name": given["name"],
        "description": given.get("description"),
        "parameters": given.get("parameters"),
    }
    deferred = given.get("defer_loading")
    if deferred is None:
        deferred = tool.get("defer_loading")
    for key, value in (("strict", given.get("strict")), ("defer_loading", deferred)):
        if value is not None:
            function[key] = value
    shaped: dict[str, Any] = {"type": "function", "function": function}
    if tool.get("defer_loading") is not None:
        shaped["defer_loading"] = tool["defer_loading"]
    return shaped


def _check_tool(where: str, tool: object) -> None:
    if not isinstance(tool, dict):
        raise _bad_tools(f"{where} must be an object, got {json_type(tool)}")
    if tool.get("type", "function") != "function":
        raise _bad_tools(f"{where}.type must be 'function'")
    function = tool.get("function")
    if not isinstance(function, dict):
        raise _bad_tools(f"{where}.function must be an object with a 'name'")
    expected = {"name": (str,), "description": (str,), "parameters": (dict,), "strict": (bool,)}
    for key, types in expected.items():
        value = function.get(key)
        if key == "name" and value is None:
            raise _bad_tools(f"{where}.function.name is required")
        if value is not None and not isinstance(value, types):
            want = {str: "a string", dict: "an object", bool: "a boolean"}[types[0]]
            raise _bad_tools(f"{where}.function.{key} must be {want}, got {json_type(value)}")


def _check_choice(choice: object, tools: list[Any] | None) -> None:
    if choice is None or choice == "none":
        return
    if not tools:
        raise _bad_choice("When using 'tool_choice', 'tools' must be set")
    if isinstance(choice, str) and choice in TOOL_CHOICES:
        return
    if not isinstance(choice, dict):
        raise _bad_choice(f"'tool_choice' must be 'none', 'auto', 'required' or {_NAMED}")
    function = choice.get("function")
    name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(name, str) or not name:
        raise _bad_choice(f"'tool_choice' must be 'none', 'auto', 'required' or {_NAMED}")
    if all(tool["function"]["name"] != name for tool in tools):
        raise _bad_choice(f"'tool_choice' names the tool {name!r}, which is not in 'tools'")


def _bad_tools(message: str) -> InvalidRequest:
    return InvalidRequest(message, param="tools")


def _bad_choice(message: str) -> InvalidRequest:
    return InvalidRequest(message, param="tool_choice")
