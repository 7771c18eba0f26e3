"""Readers of Responses API bodies (`POST /v1/responses`, `/v1/responses/input_tokens`): the
fields llmd reads, checked once into one `Fields` record, with the conversation as vLLM 0.32
renders it (llmd/engine/responses_input.py), and how a stored turn continues
(`previous_response_id`, expanded by llmd: the engine is never asked for its own store).

    local   text-only conversations (messages of text parts, no tools, no reasoning effort)
            are rendered and counted by llmd's own tokenizer
    engine  anything else is counted by the engine's /tokenize, sent the chat messages and
            tools vLLM 0.32 builds from the request: the same render, so the same count
"""

from __future__ import annotations

from typing import Any

from llmd.engine.responses_input import (
    InputError,
    chat_messages,
    chat_tools,
    continues_final,
    input_items,
    item_type,
    tokenize_messages,
)
from llmd.errors import InvalidRequest
from llmd.validation.fields import (
    NO_OUTPUT,
    TEXT_PARTS,
    ChatPrompt,
    EnginePrompt,
    Fields,
    OutputRequest,
)

INPUT_TOKENS_OBJECT = "response.input_tokens"
# vLLM 0.32 tokenizes a Responses prompt, rendered by the chat template, with the tokenizer's
# special tokens added (`ResponsesRequest.build_tok_params` leaves TokenizeParams'
# add_special_tokens at True; chat's sets its own field, False by default): a tokenizer that
# adds a BOS counts one token more than the same conversation as chat.
ADD_SPECIAL_TOKENS = True
# chat_template_kwargs vLLM refuses or renders with its own rules: the engine counts those.
_ENGINE_KWARGS = frozenset({"chat_template", "tokenize", "tools", "documents"})
# Output items a next turn carries as input (vLLM 0.32 reads them back as assistant
# messages, tool calls and reasoning); the rest (built-in tool calls) it does not take.
CARRIED = ("message", "reasoning", "function_call", "custom_tool_call")


def read_responses(body: dict[str, Any]) -> Fields:
    """`POST /v1/responses`: `model`, `input` (with `instructions`, `tools`, `reasoning`),
    `max_output_tokens` (>= 1; past the window it is clamped, as vLLM 0.32 clamps it),
    `stream`, `truncation` (`auto` or null: the prompt is cut to the window, as vLLM's
    truncate_prompt_tokens -1; absent: `disabled`). `background` is refused: llmd keeps no
    responses running apart from their client. Raises InvalidRequest (with param)."""
    max_output = body.get("max_output_tokens")
    if max_output is not None and (
        not isinstance(max_output, int) or isinstance(max_output, bool) or max_output < 1
    ):
        raise InvalidRequest(
            "'max_output_tokens' must be an integer >= 1", param="max_output_tokens"
        )
    for name in ("stream", "store", "background"):
        if not isinstance(body.get(name), bool | None):
            raise InvalidRequest(f"'{name}' must be a boolean", param=name)
    if body.get("background"):
        raise InvalidRequest(
            "llmd does not run responses in the background: send 'background': false and "
            "keep the connection (stream to see the answer as it comes)",
            param="background",
        )
    truncation = body.get("truncation")
    if truncation not in (None, "auto", "disabled"):
        raise InvalidRequest("'truncation' must be 'auto' or 'disabled'", param="truncation")
    return Fields(
        model=_model(body),
        prompt=conversation(body),
        output=OutputRequest(
            max_tokens=max_output, field="max_output_tokens", n=1, configured_default=False
        ),
        # vLLM 0.32: -1 unless "disabled", its default when the field is absent (null: -1)
        truncate_prompt_tokens=None if truncation == "disabled" or "truncation" not in body else -1,
        stream=bool(body.get("stream")),
        clamp=True,
    )


def read_input_tokens(body: dict[str, Any]) -> Fields:
    """`POST /v1/responses/input_tokens`: the same conversation, no output. Raises
    InvalidRequest (with param)."""
    return Fields(model=_model(body), prompt=conversation(body), output=NO_OUTPUT)


def input_tokens_answer(count: int) -> dict[str, Any]:
    """The input_tokens answer (OpenAI `InputTokenCountResponse`)."""
    return {"object": INPUT_TOKENS_OBJECT, "input_tokens": count}


def conversation(body: dict[str, Any]) -> ChatPrompt | EnginePrompt:
    """The request's conversation as the chat template sees it when llmd can render it (text
    only), else the chat messages and tools for the engine's /tokenize. Raises
    InvalidRequest."""
    if body.get("conversation") is not None:
        raise InvalidRequest(
            "llmd keeps no conversations (OpenAI's Conversations API): send the input, or "
            "continue a stored response with 'previous_response_id'",
            param="conversation",
        )
    if body.get("input") is None:
        raise InvalidRequest("'input' is required", param="input")
    instructions = body.get("instructions")
    if not isinstance(instructions, str | None):
        raise InvalidRequest("'instructions' must be a string", param="instructions")
    kwargs = body.get("chat_template_kwargs")
    kwargs = {} if kwargs is None else kwargs
    if not isinstance(kwargs, dict):
        raise InvalidRequest(
            "'chat_template_kwargs' must be an object", param="chat_template_kwargs"
        )
    reasoning = body.get("reasoning")
    if not isinstance(reasoning, dict | None):
        raise InvalidRequest("'reasoning' must be an object", param="reasoning")
    try:
        items = input_items(body["input"])
        messages = chat_messages(instructions, items)
        tools = chat_tools(body.get("tools"))
    except InputError as exc:
        raise InvalidRequest(exc.message, param=exc.param) from None
    if not messages:
        raise InvalidRequest("'input' must not be empty", param="input")
    continued = continues_final(items)
    effort = (reasoning or {}).get("effort")
    rendered_here = tools is None and effort is None and not (_ENGINE_KWARGS & kwargs.keys())
    if rendered_here and all(_text_only(message) for message in messages):
        return ChatPrompt(
            messages=messages,
            add_generation_prompt=not continued,
            continue_final_message=continued,
            add_special_tokens=ADD_SPECIAL_TOKENS,
            template_kwargs=kwargs,
            local=True,
            param="input",
        )
    if effort is not None:  # vLLM 0.32 `build_chat_params`: the effort, and thinking unless set
        kwargs = {"reasoning_effort": effort, **kwargs}
        kwargs.setdefault("enable_thinking", effort != "none")
    tokenize = {
        "messages": tokenize_messages(messages),
        "add_generation_prompt": not continued,
        "continue_final_message": continued,
        "add_special_tokens": ADD_SPECIAL_TOKENS,
        "tools": tools,
        "chat_template_kwargs": kwargs or None,
    }
    return EnginePrompt("/tokenize", tokenize, "count", param="input")


def continued_input(
    context: list[dict[str, Any]], response: dict[str, Any], items: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The input of a turn that continues a stored response: the input it answered
    (`context`), its output items a model reads back (`CARRIED`; a message without content
    is left out: vLLM 0.32 fails on one), then this turn's `items`. Instructions are not
    carried (OpenAI: each request's own apply)."""
    output = response.get("output")
    carried = [
        item
        for item in (output if isinstance(output, list) else ())
        if isinstance(item, dict)
        and item_type(item) in CARRIED
        and not (item_type(item) == "message" and not item.get("content"))
    ]
    return [*context, *carried, *items]


def _text_only(message: dict[str, Any]) -> bool:
    """A message llmd's tokenizer renders as vLLM does: a role the template takes as it is,
    no tool calls or reasoning, content a string or text parts (`type` and `text` only)."""
    if message["role"] not in ("user", "system", "developer", "assistant"):
        return False
    if "tool_calls" in message or "reasoning" in message:
        return False
    content = message.get("content")
    if isinstance(content, str):
        return True
    return isinstance(content, list) and all(
        isinstance(part, dict)
        and part.get("type") in TEXT_PARTS
        and part.keys() == {"type", TEXT_PARTS[part["type"]]}
        and isinstance(part.get(TEXT_PARTS[part["type"]]), str)
        for part in content
    )


def _model(body: dict[str, Any]) -> str | None:
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise InvalidRequest("'model' must be a string", param="model")
    return model or None


def as_items(value: object) -> list[dict[str, Any]]:
    """`input` as a list of items (a string: one user message). Raises InvalidRequest."""
    try:
        return input_items(value)
    except InputError as exc:
        raise InvalidRequest(exc.message, param=exc.param) from None


# OpenAI's `GET /v1/responses/{id}/input_items`: `limit` 1..100, 20 by default; newest first.
INPUT_ITEMS_LIMIT = (1, 100, 20)


def input_items_page(
    context: list[dict[str, Any]], response_id: str, query: dict[str, str]
) -> dict[str, Any]:
    """OpenAI's list of a stored response's input items (`context`: what it answered, the
    turns it continued included) as `GET /v1/responses/{id}/input_items` answers: `object`
    "list", `data`, `first_id`, `last_id`, `has_more`; `query` gives `order` (`asc` or
    `desc`, the default), `limit` (`INPUT_ITEMS_LIMIT`) and `after` (an item id). An item
    without an id gets `{response_id}_input_{n}` (n its place in the input; stable from one
    call to the next), a message its `type` and its string content as one `input_text`
    part. Raises InvalidRequest (400, `param` the field) for a bad query value."""
    order = query.get("order", "desc")
    if order not in ("asc", "desc"):
        raise InvalidRequest("order must be 'asc' or 'desc'", param="order")
    low, high, default = INPUT_ITEMS_LIMIT
    limit_text = query.get("limit", str(default))
    if not limit_text.isdigit() or not low <= int(limit_text) <= high:
        raise InvalidRequest(f"limit must be a whole number in {low}..{high}", param="limit")
    items = [_listed(item, f"{response_id}_input_{n}") for n, item in enumerate(context)]
    if order == "desc":
        items.reverse()
    after = query.get("after")
    if after is not None:
        at = next((n for n, item in enumerate(items) if item["id"] == after), None)
        if at is None:
            raise InvalidRequest(f"no input item {after} in response {response_id}", param="after")
        items = items[at + 1 :]
    page = items[: int(limit_text)]
    return {
        "object": "list",
        "data": page,
        "first_id": page[0]["id"] if page else None,
        "last_id": page[-1]["id"] if page else None,
        "has_more": len(items) > len(page),
    }


def _listed(item: dict[str, Any], fallback_id: str) -> dict[str, Any]:
    """`item` as the input items list shows it (see `input_items_page`)."""
    listed = {"id": fallback_id, **item} if "id" not in item else dict(item)
    if "role" in listed and "type" not in listed:
        listed["type"] = "message"
    if isinstance(listed.get("content"), str):
        part = "output_text" if listed.get("role") == "assistant" else "input_text"
        listed["content"] = [{"type": part, "text": listed["content"]}]
    return listed
