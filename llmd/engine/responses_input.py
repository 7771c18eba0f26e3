"""A Responses request's `input`, `instructions` and `tools` as vLLM 0.32 hands them to the chat
template: the chat messages and chat tools its renderer builds (vLLM 0.32
`entrypoints/openai/responses/utils.py` `construct_input_messages`,
`_construct_message_from_response_item`, `construct_tool_dicts`; `protocol.py`
`ResponsesRequest.build_chat_params`, `input_item_parsing`; the non-Harmony path).

Pure functions over the request's JSON, shared by llmd's reader (which counts the prompt) and
the simulator (which serves it). An input vLLM refuses raises `InputError` with vLLM's sentence
where it has one; a few inputs that make vLLM 0.32 fail with a 500 (an assistant message with
no content part) are refused here too.
"""

from __future__ import annotations

import json
from typing import Any

# Item types vLLM 0.32 turns into chat messages; any other is "Unsupported input item type".
ITEM_TYPES = (
    "message", "function_call", "function_call_output", "custom_tool_call",
    "custom_tool_call_output", "reasoning",
)  # fmt: skip
ROLES = ("user", "system", "developer", "assistant")
# An item whose status says it is unfinished, last in the input: the model continues it
# (`should_continue_final_message`).
UNFINISHED = ("in_progress", "incomplete")
# vLLM's namespace separator (tool_parsers/utils.py `flat_namespace_tool_name`) and the one
# parameter of a custom tool's function shim (`custom_tool_parameters`, `CUSTOM_TOOL_INPUT_KEY`).
NAMESPACE_SEPARATOR = "__"
CUSTOM_INPUT = "input"
CUSTOM_PARAMETERS = {
    "type": "object",
    "properties": {
        CUSTOM_INPUT: {"type": "string", "description": "The freeform text payload for this tool."}
    },
    "required": [CUSTOM_INPUT],
    "additionalProperties": False,
}


class InputError(ValueError):
    """An input vLLM 0.32 refuses: `message`, and the request field `param` it is in."""

    def __init__(self, message: str, param: str = "input") -> None:
        super().__init__(message)
        self.message = message
        self.param = param


def input_items(value: object) -> list[dict[str, Any]]:
    """`input` as a list of items: a string is one user message (vLLM appends
    `{"role": "user", "content": text}` for it, the same message the item renders to).
    Raises InputError for another type, or an item that is not an object."""
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if not isinstance(value, list):
        raise InputError("'input' must be a string or an array of input items")
    for index, item in enumerate(value):
        if not isinstance(item, dict):
            raise InputError(f"input[{index}] must be an object (an input item)")
    return value


def item_type(item: dict[str, Any]) -> str | None:
    """An item's type: its `type`, else `message` for one with a `role` (EasyInputMessage)."""
    kind = item.get("type")
    if kind is None and "role" in item:
        return "message"
    return kind if isinstance(kind, str) else None


def chat_messages(instructions: str | None, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The chat messages for `instructions` (a system message first, when not empty) and
    `items`, merged as vLLM 0.32 merges them: a function call, custom tool call or reasoning
    item joins the assistant message before it (tool calls appended; reasoning or content
    only where that message has none yet), outputs become `tool` messages, an assistant
    message keeps its first part's text, and any other message goes as it is. The items are
    not changed. Raises InputError (naming `input[i]`)."""
    messages: list[dict[str, Any]] = []
    if instructions:
        messages.append({"role": "system", "content": instructions})
    for index, item in enumerate(items):
        message = _message(index, item, messages[-1] if messages else None)
        if message is not None:
            messages.append(message)
    return messages


def tokenize_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`messages` as vLLM 0.32's /tokenize takes them (its `ChatCompletionMessageParam`
    refuses the Responses part types its renderer reads): `input_text` and `output_text`
    parts as `text` parts, an `input_image` with an `image_url` as an `image_url` part. The
    chat template sees the same (vLLM's `chat_utils` parses both forms alike). The messages
    are not changed."""
    return [
        {**message, "content": [_tokenize_part(part) for part in message["content"]]}
        if isinstance(message.get("content"), list)
        else message
        for message in messages
    ]


def _tokenize_part(part: Any) -> Any:
    kind = part.get("type") if isinstance(part, dict) else None
    if kind in ("input_text", "output_text") and isinstance(part.get("text"), str):
        return {"type": "text", "text": part["text"]}
    if kind == "input_image" and isinstance(part.get("image_url"), str):
        detail = {"detail": part["detail"]} if isinstance(part.get("detail"), str) else {}
        return {"type": "image_url", "image_url": {"url": part["image_url"], **detail}}
    return part


def continues_final(items: list[dict[str, Any]]) -> bool:
    """Whether the model continues the last item (a message or reasoning left `in_progress`
    or `incomplete`) rather than answering after it: then the template gets
    `continue_final_message` and no generation prompt."""
    if not items:
        return False
    last = items[-1]
    return item_type(last) in ("message", "reasoning") and last.get("status") in UNFINISHED


def chat_tools(tools: object) -> list[dict[str, Any]] | None:
    """The chat tools the template is shown (`construct_tool_dicts`): function tools, each
    function of a namespace tool as `NAMESPACE__NAME`, a custom tool as a function taking one
    string `input`; other tool types are not shown. None without tools. Raises InputError
    (param `tools`) for a tool that is not an object with a string `type` and `name`."""
    if tools is None or tools == []:
        return None
    if not isinstance(tools, list):
        raise InputError("'tools' must be an array of tools", "tools")
    shown: list[dict[str, Any]] = []
    for index, tool in enumerate(tools):
        where = f"tools[{index}]"
        if not isinstance(tool, dict) or not isinstance(tool.get("type"), str):
            raise InputError(f"{where} must be an object with a string 'type'", "tools")
        kind = tool["type"]
        if kind == "function":
            shown.append(_function(where, tool, tool.get("name")))
        elif kind == "custom":
            custom = {**tool, "parameters": CUSTOM_PARAMETERS}
            shown.append(_function(where, custom, tool.get("name"), keys=_CUSTOM_KEYS))
        elif kind == "namespace":
            inner = tool.get("tools")
            if not isinstance(tool.get("name"), str) or not isinstance(inner, list):
                raise InputError(f"{where} needs a string 'name' and an array 'tools'", "tools")
            for inner_index, function in enumerate(inner):
                at = f"{where}.tools[{inner_index}]"
                if not isinstance(function, dict):
                    raise InputError(f"{at} must be an object", "tools")
                if function.get("type") == "function":
                    name = function.get("name")
                    flat = f"{tool['name']}{NAMESPACE_SEPARATOR}{name}"
                    shown.append(_function(at, function, flat if isinstance(name, str) else None))
    return shown


# The fields of a function definition the chat template may see, as vLLM 0.32 passes a
# Responses function tool on (FunctionTool's, less `type`; FunctionDefinition drops the rest
# when it is dumped).
_FUNCTION_KEYS = ("name", "description", "parameters", "strict", "defer_loading")
_CUSTOM_KEYS = ("name", "description", "parameters")


def _function(
    where: str, tool: dict[str, Any], name: object, keys: tuple[str, ...] = _FUNCTION_KEYS
) -> dict[str, Any]:
    if not isinstance(name, str):
        raise InputError(f"{where}.name is required (a string)", "tools")
    function = {key: tool.get(key) for key in keys}
    function["name"] = name
    return {"type": "function", "function": function}


def _message(
    index: int, item: dict[str, Any], previous: dict[str, Any] | None
) -> dict[str, Any] | None:
    """The message item `index` adds, or None when it joined `previous` (changed in place:
    it is a message built here, never the client's item)."""
    where = f"input[{index}]"
    kind = item_type(item)
    assistant = previous if previous is not None and previous.get("role") == "assistant" else None
    if kind in ("function_call", "custom_tool_call"):
        call = _tool_call(where, item, kind)
        if assistant is not None:
            assistant.setdefault("tool_calls", []).append(call)
            return None
        return {"role": "assistant", "tool_calls": [call]}
    if kind == "reasoning":
        text = _reasoning_text(where, item)
        if assistant is not None and assistant.get("reasoning") is None:
            assistant["reasoning"] = text
            return None
        return {"role": "assistant", "reasoning": text}
    if kind in ("function_call_output", "custom_tool_call_output"):
        _string(where, item, "call_id")
        output = item.get("output")
        if not isinstance(output, str | list):
            raise InputError(f"{where}.output must be a string or an array of content parts")
        return {"role": "tool", "content": output, "tool_call_id": item["call_id"]}
    if kind == "message":
        return _chat_message(where, item, assistant)
    raise InputError(f"Unsupported input item type: {kind}")


def _chat_message(
    where: str, item: dict[str, Any], assistant: dict[str, Any] | None
) -> dict[str, Any] | None:
    role, content = item.get("role"), item.get("content")
    if role not in ROLES:
        raise InputError(f"{where}.role must be one of {', '.join(ROLES)}")
    if not isinstance(content, str | list):
        raise InputError(f"{where}.content must be a string or an array of content parts")
    for part_index, part in enumerate(content if isinstance(content, list) else ()):
        if not isinstance(part, dict) or not isinstance(part.get("type"), str):
            raise InputError(f"{where}.content[{part_index}] must be an object with a 'type'")
    if role != "assistant":
        return dict(item)  # as it is, every key (vLLM passes the item's dict on)
    if isinstance(content, list):
        if not content or not isinstance(content[0].get("text"), str):
            raise InputError(f"{where}.content[0] must be an output_text part with its text")
        content = content[0]["text"]  # vLLM keeps the first part's text only
    if assistant is not None and assistant.get("content") is None:
        assistant["content"] = content
        return None
    return {"role": "assistant", "content": content}


def _tool_call(where: str, item: dict[str, Any], kind: str) -> dict[str, Any]:
    _string(where, item, "call_id")
    _string(where, item, "name")
    name = item["name"]
    if kind == "custom_tool_call":
        text = item.get("input")
        if not isinstance(text, str):
            raise InputError(f"{where}.input must be a string")
        arguments = json.dumps({CUSTOM_INPUT: text}, ensure_ascii=False)
    else:
        _string(where, item, "arguments")
        arguments = item["arguments"]
        namespace = item.get("namespace")
        if namespace:
            if not isinstance(namespace, str):
                raise InputError(f"{where}.namespace must be a string")
            name = f"{namespace}{NAMESPACE_SEPARATOR}{name}"
    return {
        "id": item["call_id"],
        "function": {"name": name, "arguments": arguments},
        "type": "function",
    }


def _reasoning_text(where: str, item: dict[str, Any]) -> str:
    """A reasoning item's text: its first content part's, else its first summary's."""
    if item.get("encrypted_content"):
        raise InputError("Encrypted content is not supported.")
    summary, content = item.get("summary"), item.get("content")
    if not isinstance(summary, list):
        raise InputError(f"{where}.summary must be an array (it may be empty)")
    for name, parts in (("content", content), ("summary", summary)):
        if parts:
            if not isinstance(parts, list) or not isinstance(parts[0], dict):
                raise InputError(f"{where}.{name} must be an array of text parts")
            text = parts[0].get("text")
            if not isinstance(text, str):
                raise InputError(f"{where}.{name}[0].text must be a string")
            return text
    return ""


def _string(where: str, item: dict[str, Any], key: str) -> None:
    if not isinstance(item.get(key), str):
        raise InputError(f"{where}.{key} is required (a string)")
