"""An Anthropic Messages body checked and turned into the chat completion vLLM 0.32 runs for it
(vllm/entrypoints/anthropic/protocol.py and serving.py: `AnthropicMessagesRequest`,
`to_chat_completion_request`).

Checks answer as FastAPI answers a pydantic error (400, vLLM's validation shape, see errors.py).
The conversion: the system prompt's text blocks joined (a block opening with Claude Code's
`x-anthropic-billing-header` dropped), each message's text blocks as text parts, `tool_use` as a
tool call, a user's `tool_result` as a `tool` message before it, `thinking` as reasoning;
`tools` as OpenAI function tools, `stop_sequences` as `stop`. Inline system messages stay where
they are unless the chat template refuses a system turn after the first (vLLM then merges them
into the leading system prompt).
"""

from __future__ import annotations

from typing import Any

from llmd.engine.sim.errors import SimHTTPError, union_validation_error, validation_error

BILLING_HEADER = "x-anthropic-billing-header"
ROLES = ("user", "assistant", "system")
BLOCK_TYPES = (
    "text",
    "image",
    "tool_use",
    "tool_result",
    "tool_reference",
    "thinking",
    "redacted_thinking",
    "tool_addition",
    "tool_removal",
)
TOOL_CHOICES = ("auto", "any", "tool", "none")
THINKING = ("enabled", "disabled", "adaptive")
# `thinking.budget_tokens` has `Field(ge=1024)` (protocol.py).
MIN_THINKING_BUDGET = 1024
_CHAT_FIELDS = ("temperature", "top_p", "top_k")


def check_messages(body: dict[str, Any], *, count_only: bool = False) -> None:
    """Refuse `body` where pydantic refuses an `AnthropicMessagesRequest` (or, `count_only`, an
    `AnthropicCountTokensRequest`: no `max_tokens`). Raises `SimHTTPError` 400."""
    _check_model(body)
    messages = _required(body, "messages")
    if not isinstance(messages, list):
        raise validation_error(
            "list_type", "body.messages", "Input should be a valid list", messages
        )
    for index, message in enumerate(messages):
        _check_message(message, f"body.messages.{index}")
    if not count_only:
        max_tokens = _required(body, "max_tokens")
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool):
            raise validation_error(
                "int_parsing",
                "body.max_tokens",
                "Input should be a valid integer, unable to parse string as an integer",
                max_tokens,
            )
        if max_tokens <= 0:
            raise _value_error("body.max_tokens", "max_tokens must be positive", max_tokens)
    system = body.get("system")
    if system is not None and not isinstance(system, str):
        _check_blocks(system, "body.system")
    _check_tools(body.get("tools"))
    _check_tool_choice(body.get("tool_choice"))
    _check_thinking(body, count_only)


def to_chat(body: dict[str, Any], *, merge_inline_system: bool = False) -> dict[str, Any]:
    """The chat completion body vLLM 0.32 builds from a checked Messages `body`: `messages`,
    `tools` (OpenAI function tools), and for generation `max_tokens`, `max_completion_tokens`,
    `stop`, `stream` and the sampling fields."""
    messages: list[dict[str, Any]] = []
    system = _system_text(body.get("system"))
    if merge_inline_system:
        system += "".join(
            _system_text(m["content"]) for m in body["messages"] if m["role"] == "system"
        )
    if system:
        messages.append({"role": "system", "content": system})
    for message in body["messages"]:
        if message["role"] == "system":
            text = "" if merge_inline_system else _system_text(message["content"])
            if text:
                messages.append({"role": "system", "content": text})
            continue
        messages.extend(_convert(message))
    chat: dict[str, Any] = {"model": body["model"], "messages": messages}
    if body.get("tools") is not None:
        chat["tools"] = [_function_tool(tool) for tool in body["tools"]]
    if "max_tokens" in body:  # a generation, not a count
        chat |= {"max_tokens": body["max_tokens"], "max_completion_tokens": body["max_tokens"]}
        chat |= {k: body[k] for k in _CHAT_FIELDS if body.get(k) is not None}
        if body.get("stop_sequences"):
            chat["stop"] = body["stop_sequences"]
        chat["stream"] = bool(body.get("stream"))
    return chat


def _convert(message: dict[str, Any]) -> list[dict[str, Any]]:
    """One user or assistant message as chat messages (a user's tool results come first, as
    `tool` messages, then the message itself if it holds anything else)."""
    role, content = message["role"], message["content"]
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    before: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    reasoning: list[str] = []
    for block in content:
        kind = block["type"]
        if kind == "text" and block.get("text"):
            parts.append({"type": "text", "text": block["text"]})
        elif kind == "thinking" and block.get("thinking") is not None:
            reasoning.append(block["thinking"])
        elif kind == "tool_use":
            # vLLM sends json.dumps(input) and parses it back into a dict for the template
            # (renderers/chat_utils.py `_postprocess_messages`): the dict is what renders.
            function = {"name": block.get("name") or "", "arguments": block.get("input") or {}}
            calls.append({"id": block.get("id") or "", "type": "function", "function": function})
        elif kind == "tool_result" and role == "user":
            before.append(
                {
                    "role": "tool",
                    "tool_call_id": block.get("tool_use_id") or "",
                    "content": _tool_result_text(block.get("content")),
                }
            )
        elif kind == "tool_result":
            text = str(block["content"]) if block.get("content") else ""
            parts.append({"type": "text", "text": f"Tool result: {text}"})
    chat: dict[str, Any] = {"role": role}
    if reasoning:
        chat["reasoning"] = "".join(reasoning)
    if calls:
        chat["tool_calls"] = calls
    if parts:
        chat["content"] = parts[0]["text"] if len(parts) == 1 else parts
    if role == "user" and "content" not in chat:
        return before
    return [*before, chat]


def _tool_result_text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(item.get("text", ""))
            for item in content
            if isinstance(item, dict) and item.get("type") == "text"
        )
    return ""


def _system_text(system: object) -> str:
    """The text of a system prompt (a string or text blocks, joined with nothing between), the
    attribution block left out."""
    if isinstance(system, str):
        return "" if system.startswith(BILLING_HEADER) else system
    if not isinstance(system, list):
        return ""
    texts = [
        b["text"]
        for b in system
        if b.get("type") == "text" and b.get("text") and not b["text"].startswith(BILLING_HEADER)
    ]
    return "".join(texts)


def _function_tool(tool: dict[str, Any]) -> dict[str, Any]:
    """An Anthropic tool as the OpenAI function tool vLLM builds (`input_schema` gains `type:
    object` when it has no type)."""
    schema = dict(tool["input_schema"])
    schema.setdefault("type", "object")
    function = {"name": tool["name"], "description": tool.get("description"), "parameters": schema}
    if tool.get("strict") is not None:
        function["strict"] = tool["strict"]
    return {"type": "function", "function": function}


def _check_model(body: dict[str, Any]) -> None:
    model = _required(body, "model")
    if not isinstance(model, str):
        raise validation_error("string_type", "body.model", "Input should be a valid string", model)
    if not model:
        raise _value_error("body.model", "Model is required", model)


def _check_object(value: object, loc: str) -> dict[str, Any]:
    """`value` if it is a JSON object. Raises `SimHTTPError` 400."""
    if not isinstance(value, dict):
        raise validation_error(
            "model_attributes_type",
            loc,
            "Input should be a valid dictionary or object to extract fields from",
            value,
        )
    return value


def _check_message(message: object, loc: str) -> None:
    message = _check_object(message, loc)
    role = _required(message, "role", loc)
    if role not in ROLES:
        raise validation_error(
            "literal_error", f"{loc}.role", "Input should be 'user', 'assistant' or 'system'", role
        )
    content = _required(message, "content", loc)
    if not isinstance(content, str):
        try:
            _check_blocks(content, f"{loc}.content")
        except SimHTTPError as error:
            if not isinstance(content, list) or not error.message.startswith("1 validation"):
                raise
            raise union_validation_error(f"{loc}.content", content, error) from None


def _check_blocks(blocks: object, loc: str) -> None:
    if not isinstance(blocks, list):
        raise validation_error("string_type", loc, "Input should be a valid string", blocks)
    for index, block in enumerate(blocks):
        where = f"{loc}.{index}"
        block = _check_object(block, where)
        kind = _required(block, "type", where)
        if kind not in BLOCK_TYPES:
            names = ", ".join(f"'{name}'" for name in BLOCK_TYPES[:-1])
            raise validation_error(
                "literal_error",
                f"{where}.type",
                f"Input should be {names} or '{BLOCK_TYPES[-1]}'",
                kind,
            )


def _check_tools(tools: object) -> None:
    if tools is None:
        return
    if not isinstance(tools, list):
        raise validation_error("list_type", "body.tools", "Input should be a valid list", tools)
    for index, tool in enumerate(tools):
        loc = f"body.tools.{index}"
        tool = _check_object(tool, loc)
        name = _required(tool, "name", loc)
        if not isinstance(name, str):
            raise validation_error(
                "string_type", f"{loc}.name", "Input should be a valid string", name
            )
        schema = _required(tool, "input_schema", loc)
        if not isinstance(schema, dict):
            raise validation_error(
                "dict_type", f"{loc}.input_schema", "Input should be a valid dictionary", schema
            )


def _check_tool_choice(choice: object) -> None:
    if choice is None:
        return
    choice = _check_object(choice, "body.tool_choice")
    kind = _required(choice, "type", "body.tool_choice")
    if kind not in TOOL_CHOICES:
        raise validation_error(
            "literal_error",
            "body.tool_choice.type",
            "Input should be 'auto', 'any', 'tool' or 'none'",
            kind,
        )
    if kind == "tool" and not choice.get("name"):
        raise _value_error(
            "body.tool_choice", "tool_choice.name is required when type is 'tool'", choice
        )


def _check_thinking(body: dict[str, Any], count_only: bool) -> None:
    thinking = body.get("thinking")
    if thinking is None:
        return
    if not isinstance(thinking, dict) or thinking.get("type") not in THINKING:
        raise validation_error(
            "union_tag_invalid",
            "body.thinking",
            "Input tag does not match any of the expected tags: 'enabled', 'disabled', 'adaptive'",
            thinking,
        )
    if thinking["type"] != "enabled":
        return
    budget = _required(thinking, "budget_tokens", "body.thinking.enabled")
    if not isinstance(budget, int) or budget < MIN_THINKING_BUDGET:
        raise validation_error(
            "greater_than_equal",
            "body.thinking.enabled.budget_tokens",
            f"Input should be greater than or equal to {MIN_THINKING_BUDGET}",
            budget,
        )
    if not count_only and budget >= body["max_tokens"]:
        raise _value_error(
            "body", "thinking.budget_tokens must be less than max_tokens", "<the request>"
        )


def _required(body: dict[str, Any], name: str, loc: str = "body") -> Any:
    if name not in body:
        raise validation_error("missing", f"{loc}.{name}", "Field required", body)
    return body[name]


def _value_error(loc: str, message: str, value: object) -> SimHTTPError:
    """A validator's ValueError, as pydantic words it."""
    return validation_error("value_error", loc, f"Value error, {message}", value)
