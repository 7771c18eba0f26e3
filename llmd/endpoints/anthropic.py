"""Readers of Anthropic Messages bodies (`/v1/messages`, `/v1/messages/count_tokens`): the fields
llmd reads, checked once into one `Fields` record, with the conversation as vLLM 0.32 hands it
to the chat template (entrypoints/anthropic/serving.py `to_chat_completion_request`).

    local   conversations of text, an assistant's `tool_use` and a user's `tool_result` (text)
            blocks are rendered and counted by llmd's own tokenizer (`anthropic_turns`); with
            tools (and tool choice auto) too when the engine was started with auto tool
            choice (without it vLLM refuses them: then the engine answers)
    engine  anything else (thinking, images, tool results with images or tool references,
            inline system messages, other tool choices) is counted by the engine's own
            `/v1/messages/count_tokens`: exact by construction
"""

from __future__ import annotations

from typing import Any

from llmd.endpoints.anthropic_turns import chat_turns, renders
from llmd.errors import InvalidRequest
from llmd.validation.fields import NO_OUTPUT, ChatPrompt, EnginePrompt, Fields, OutputRequest

COUNT_PATH = "/v1/messages/count_tokens"
ROLES = ("user", "assistant", "system")
# Content block types vLLM 0.32 reads (AnthropicContentBlock.type).
BLOCK_TYPES = (
    "text", "image", "tool_use", "tool_result", "tool_reference", "thinking",
    "redacted_thinking", "tool_addition", "tool_removal",
)  # fmt: skip
# Claude Code's per-request attribution line, which vLLM drops from the system prompt.
BILLING_HEADER = "x-anthropic-billing-header"
# vLLM 0.32 gives a conversation with tools tool choice `auto` (`_convert_tools`), which it
# refuses unless started with this flag (and a tool-call parser).
AUTO_TOOLS = ("--enable-auto-tool-choice",)


def read_messages(body: dict[str, Any]) -> Fields:
    """`POST /v1/messages`: `model`, `messages`, `max_tokens` (required, >= 1), `system`,
    `stream`, `tools`; an output budget past the window is clamped, never refused (as vLLM
    0.32 does for the chat it converts to). Raises InvalidRequest (with param)."""
    max_tokens = body.get("max_tokens")
    if max_tokens is None:
        raise InvalidRequest("max_tokens: Field required", param="max_tokens")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise InvalidRequest("max_tokens: must be an integer >= 1", param="max_tokens")
    stream = body.get("stream")
    if not isinstance(stream, bool | None):
        raise InvalidRequest("stream: must be a boolean", param="stream")
    return Fields(
        model=_model(body),
        prompt=conversation(body),
        output=OutputRequest(max_tokens=max_tokens, field="max_tokens", n=1),
        stream=bool(stream),
        clamp=True,
    )


def read_count_tokens(body: dict[str, Any]) -> Fields:
    """`POST /v1/messages/count_tokens`: the same conversation, no output. Raises
    InvalidRequest (with param)."""
    return Fields(model=_model(body), prompt=conversation(body), output=NO_OUTPUT)


def count_answer(count: int) -> dict[str, Any]:
    """The count_tokens answer (vLLM 0.32 `AnthropicCountTokensResponse`)."""
    return {"input_tokens": count, "context_management": {"original_input_tokens": count}}


def conversation(body: dict[str, Any]) -> ChatPrompt | EnginePrompt:
    """The request's conversation as the chat template sees it when llmd can render it (no
    tools, blocks `_local` accepts), else the request itself for the engine's count_tokens
    (with llmd's rendering of it when llmd renders its tools). Raises InvalidRequest."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest("messages: must be a non-empty list of messages", param="messages")
    for index, message in enumerate(messages):
        _check_message(index, message)
    _check_tool_results(messages)
    system = body.get("system")
    if not isinstance(system, str | list | None):
        raise InvalidRequest("system: must be a string or a list of text blocks", param="system")
    tools = body.get("tools")
    if tools is not None:
        _check_tools(tools)
    rendered = _rendered(body) if _local(body) else None
    if tools is None and rendered is not None:
        return rendered
    count = {k: v for k, v in body.items() if k not in ("max_tokens", "stream")}
    requires = AUTO_TOOLS if tools is not None else ()
    return EnginePrompt(
        COUNT_PATH, count, "input_tokens", param="messages", rendered=rendered, requires=requires
    )


def _rendered(body: dict[str, Any]) -> ChatPrompt:
    """The conversation of a body `_local` accepts, as vLLM 0.32 hands it to the template.
    Raises InvalidRequest."""
    chat: list[dict[str, Any]] = []
    system_text = _system_text(body.get("system"))
    if system_text:
        chat.append({"role": "system", "content": system_text})
    for message in body["messages"]:
        chat.extend(chat_turns(message))
    kwargs = body.get("chat_template_kwargs") or {}
    if not isinstance(kwargs, dict):
        raise InvalidRequest(
            "chat_template_kwargs: must be an object", param="chat_template_kwargs"
        )
    tools = body.get("tools")
    return ChatPrompt(
        messages=chat,
        add_generation_prompt=True,
        continue_final_message=False,
        add_special_tokens=False,
        template_kwargs=kwargs,
        local=True,
        tools=None if tools is None else [template_tool(tool) for tool in tools],
    )


def template_tool(tool: dict[str, Any]) -> dict[str, Any]:
    """An Anthropic tool as vLLM 0.32 gives it to the chat template (`_convert_tools`, then
    `ChatCompletionToolsParam.model_dump()`): a function tool with `name`, `description`
    (null when absent) and `parameters` (`input_schema`, with `type: object` added at its end
    when it has no type, as `AnthropicTool` validates it), then `strict` and `defer_loading`
    when not null, in that order (the template may write the whole object)."""
    schema = tool.get("input_schema")
    parameters = dict(schema) if isinstance(schema, dict) else {}
    parameters.setdefault("type", "object")
    function = {
        "name": tool["name"],
        "description": tool.get("description"),
        "parameters": parameters,
    }
    for key in ("strict", "defer_loading"):
        if tool.get(key) is not None:
            function[key] = tool[key]
    return {"type": "function", "function": function}


def _local(body: dict[str, Any]) -> bool:
    """Whether llmd renders this conversation exactly as vLLM 0.32 would: blocks that
    `anthropic_turns.renders` covers, no inline system message (vLLM then probes the
    template), no thinking or output config, no tool choice but `auto` with tools (each
    changes what the template is given)."""
    if any(body.get(k) is not None for k in ("thinking", "output_config")):
        return False
    choice = body.get("tool_choice")
    if choice is not None and (body.get("tools") is None or choice != {"type": "auto"}):
        return False
    return all(renders(message) for message in body["messages"])


def _system_text(system: str | list[Any] | None) -> str:
    """The top-level system prompt as one text, Claude Code's billing line left out (vLLM
    0.32 `_convert_system_message`). Raises InvalidRequest for a block that is not text."""
    if system is None or isinstance(system, str):
        return system or ""
    parts = []
    for index, block in enumerate(system):
        if not isinstance(block, dict) or block.get("type") != "text":
            raise InvalidRequest(f"system.{index}: must be a text block", param="system")
        text = block.get("text")
        if not isinstance(text, str):
            raise InvalidRequest(f"system.{index}.text: must be a string", param="system")
        if text and not text.startswith(BILLING_HEADER):
            parts.append(text)
    return "".join(parts)


def _check_message(index: int, message: object) -> None:
    where = f"messages.{index}"
    if not isinstance(message, dict):
        raise InvalidRequest(f"{where}: must be an object", param="messages")
    if message.get("role") not in ROLES:
        raise InvalidRequest(f"{where}.role: must be one of {', '.join(ROLES)}", param="messages")
    content = message.get("content")
    if isinstance(content, str):
        return
    if not isinstance(content, list):
        raise InvalidRequest(
            f"{where}.content: must be a string or a list of content blocks", param="messages"
        )
    for block_index, block in enumerate(content):
        at = f"{where}.content.{block_index}"
        if not isinstance(block, dict) or block.get("type") not in BLOCK_TYPES:
            raise InvalidRequest(
                f"{at}.type: must be one of {', '.join(BLOCK_TYPES)}", param="messages"
            )
        if block["type"] == "text" and not isinstance(block.get("text"), str):
            raise InvalidRequest(f"{at}.text: must be a string", param="messages")
        if block["type"] == "tool_result" and not isinstance(block.get("tool_use_id"), str):
            raise InvalidRequest(f"{at}.tool_use_id: Field required", param="messages")


def _check_tool_results(messages: list[dict[str, Any]]) -> None:
    """Each `tool_result` block answers a `tool_use` block of the message before it (as
    Anthropic's API requires; vLLM 0.32 would render an orphan result as a tool message with
    no call). Raises InvalidRequest in Anthropic's words."""
    called: set[object] = set()
    for index, message in enumerate(messages):
        content = message["content"]
        blocks = content if isinstance(content, list) else []
        for block_index, block in enumerate(blocks):
            if block["type"] == "tool_result" and block["tool_use_id"] not in called:
                raise InvalidRequest(
                    f"messages.{index}.content.{block_index}: unexpected `tool_use_id` found in "
                    f"`tool_result` blocks: {block['tool_use_id']}. Each `tool_result` block "
                    "must have a corresponding `tool_use` block in the previous message.",
                    param="messages",
                )
        called = {block.get("id") for block in blocks if block["type"] == "tool_use"}


def _check_tools(tools: object) -> None:
    if not isinstance(tools, list):
        raise InvalidRequest("tools: must be a list of tools", param="tools")
    for index, tool in enumerate(tools):
        if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
            raise InvalidRequest(f"tools.{index}.name: Field required", param="tools")
        schema = tool.get("input_schema")
        if schema is not None and not isinstance(schema, dict):
            raise InvalidRequest(f"tools.{index}.input_schema: must be an object", param="tools")


def _model(body: dict[str, Any]) -> str | None:
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise InvalidRequest("model: must be a string", param="model")
    return model or None
