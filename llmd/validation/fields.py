"""The fields llmd reads from a chat or completions body, type-checked once.

Only these fields are checked; every other field passes through to the engine untouched.
Wrong types and empty or missing prompts raise `InvalidRequest` naming the field in `param`.
Accepted shapes follow vLLM 0.32's request models (`entrypoints/openai/*/protocol.py`).
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

from llmd.errors import InvalidRequest
from llmd.validation.tools import check_tools


class Endpoint(enum.StrEnum):
    """Which generation API a body was sent to."""

    CHAT = "chat"
    COMPLETIONS = "completions"


# Chat fields that change the rendered prompt in ways llmd does not render itself: a request
# using one is counted by the engine's /tokenize (exact, one round trip).
ENGINE_RENDERED_FIELDS = ("tools", "chat_template", "documents", "reasoning_effort")
# Text content part types and the key that holds their text (vLLM 0.32 chat_utils MM_PARSER_MAP).
TEXT_PARTS = {"text": "text", "input_text": "text", "output_text": "text", "refusal": "refusal"}
# Every content part type vLLM 0.32 parses (renderers/chat_utils.py MM_PARSER_MAP); it refuses
# the others, and its /tokenize says so in a pydantic dump.
PART_TYPES = (
    *TEXT_PARTS,
    *("thinking", "image_url", "input_image", "image_pil", "image_embeds", "input_audio"),
    *("audio_url", "audio_embeds", "video_url", "video_embeds", "prompt_embeds", "tool_reference"),
)


@dataclasses.dataclass(frozen=True)
class OutputRequest:
    """The output a request asks for: `max_tokens` (None: omitted or null), under `field`
    (`max_completion_tokens` wins over `max_tokens` when both are set, as in vLLM 0.32).
    `omitted` tells an absent field from an explicit null: vLLM 0.32 completions default an
    absent max_tokens to 16 but treat null as "the rest of the context".
    """

    max_tokens: int | None
    field: str
    n: int
    omitted: bool = False


@dataclasses.dataclass(frozen=True)
class ChatPrompt:
    """A chat prompt as the template will see it.

    `local` is False when the request uses something llmd does not render (tools, a request
    chat template, non-text content, tool calls): then the engine counts it, and
    `engine_extras` holds the fields its /tokenize needs for that (tools, chat_template).
    """

    messages: list[dict[str, Any]]
    add_generation_prompt: bool
    continue_final_message: bool
    add_special_tokens: bool
    template_kwargs: dict[str, Any]
    local: bool
    engine_extras: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class CompletionPrompt:
    """One or more completion prompts: each is a string or a list of token ids."""

    prompts: list[str | list[int]]
    add_special_tokens: bool


Prompt = ChatPrompt | CompletionPrompt


@dataclasses.dataclass(frozen=True)
class RequestFields:
    """What llmd needs to know about one generation request."""

    endpoint: Endpoint
    model: str | None
    prompt: Prompt
    output: OutputRequest
    truncate_prompt_tokens: int | None


def read_fields(endpoint: Endpoint, body: dict[str, Any]) -> RequestFields:
    """Check and extract the fields llmd reads from `body`. Raises InvalidRequest (with param)."""
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise InvalidRequest("'model' must be a string", param="model")
    prompt: Prompt = _chat_prompt(body) if endpoint is Endpoint.CHAT else _completion_prompt(body)
    return RequestFields(
        endpoint=endpoint,
        model=model or None,
        prompt=prompt,
        output=_output(endpoint, body),
        truncate_prompt_tokens=_optional_int(body, "truncate_prompt_tokens", minimum=-1),
    )


def _output(endpoint: Endpoint, body: dict[str, Any]) -> OutputRequest:
    echo = _flag(body, "echo", default=False)
    # vLLM accepts max_tokens=0 only for completions that echo the prompt.
    minimum = 0 if endpoint is Endpoint.COMPLETIONS and echo else 1
    max_tokens = _optional_int(body, "max_tokens", minimum=minimum)
    field = "max_tokens"
    if endpoint is Endpoint.CHAT:
        completion = _optional_int(body, "max_completion_tokens", minimum=1)
        if completion is not None:
            max_tokens, field = completion, "max_completion_tokens"
    n = _optional_int(body, "n", minimum=1)
    omitted = field not in body
    return OutputRequest(
        max_tokens=max_tokens, field=field, n=1 if n is None else n, omitted=omitted
    )


def _chat_prompt(body: dict[str, Any]) -> ChatPrompt:
    messages = body.get("messages")
    if messages is None:
        raise InvalidRequest("'messages' is required", param="messages")
    if not isinstance(messages, list):
        raise InvalidRequest("'messages' must be an array of message objects", param="messages")
    if not messages:
        raise InvalidRequest("'messages' must not be empty", param="messages")
    check_tools(body)
    local = all(body.get(name) is None for name in ENGINE_RENDERED_FIELDS)
    for index, message in enumerate(messages):
        local = _check_message(index, message) and local
    kwargs = body.get("chat_template_kwargs")
    if kwargs is not None and not isinstance(kwargs, dict):
        raise InvalidRequest(
            "'chat_template_kwargs' must be an object", param="chat_template_kwargs"
        )
    kwargs = kwargs or {}
    if {"chat_template", "tokenize", "tools", "documents"} & kwargs.keys():
        local = False  # vLLM refuses some of these itself; the engine renders the rest
    add_generation_prompt = _flag(body, "add_generation_prompt", default=True)
    continue_final_message = _flag(body, "continue_final_message", default=False)
    if add_generation_prompt and continue_final_message:
        raise InvalidRequest(  # vLLM 0.32 ChatCompletionRequest.check_generation_prompt
            "Cannot set both `continue_final_message` and `add_generation_prompt` to True.",
            param="continue_final_message",
        )
    return ChatPrompt(
        messages=messages,
        add_generation_prompt=add_generation_prompt,
        continue_final_message=continue_final_message,
        add_special_tokens=_flag(body, "add_special_tokens", default=False),
        template_kwargs=kwargs,
        local=local,
        engine_extras={k: body[k] for k in ("tools", "chat_template") if body.get(k) is not None},
    )


def _check_message(index: int, message: object) -> bool:
    """Check one message's shape; True when llmd can render it locally."""
    where = f"messages[{index}]"
    if not isinstance(message, dict):
        raise InvalidRequest(f"{where} must be an object", param="messages")
    if not isinstance(message.get("role"), str):
        raise InvalidRequest(f"{where}.role must be a string", param="messages")
    if "name" in message and not isinstance(message["name"], str):
        raise InvalidRequest(f"{where}.name must be a string", param="messages")
    content = message.get("content")
    local = message.get("tool_calls") is None and message.get("reasoning") is None
    # vLLM 0.32 accepts a missing content for any role, null only for an assistant's.
    if isinstance(content, str) or "content" not in message:
        return local
    if content is None and message["role"] == "assistant":
        return local
    if not isinstance(content, list):
        raise InvalidRequest(
            f"{where}.content must be a string or an array of content parts"
            + (" (null only for an assistant message)" if content is None else ""),
            param="messages",
        )
    for part_index, part in enumerate(content):
        part_where = f"{where}.content[{part_index}]"
        if not isinstance(part, dict) or not isinstance(part.get("type"), str):
            raise InvalidRequest(
                f"{part_where} must be an object with a string 'type'", param="messages"
            )
        if part["type"] not in PART_TYPES:
            raise InvalidRequest(
                f"{part_where}.type must be one of {', '.join(PART_TYPES)}; got {part['type']!r}",
                param="messages",
            )
        key = TEXT_PARTS.get(part["type"])
        if key is None:
            local = False  # images, audio, tool references: the engine renders those
        elif not isinstance(part.get(key), str):
            raise InvalidRequest(f"{part_where}.{key} must be a string", param="messages")
        elif part.keys() - {"type", key}:
            local = False  # extra keys reach the template in vLLM's 'openai' content format
    return local


def _completion_prompt(body: dict[str, Any]) -> CompletionPrompt:
    prompt = body.get("prompt")
    add_special_tokens = _flag(body, "add_special_tokens", default=True)
    if prompt is None:
        raise InvalidRequest("'prompt' is required", param="prompt")
    if isinstance(prompt, str):
        if not prompt:
            raise InvalidRequest("'prompt' must not be empty", param="prompt")
        return CompletionPrompt([prompt], add_special_tokens)
    if not isinstance(prompt, list) or not prompt:
        raise InvalidRequest(
            "'prompt' must be a non-empty string, array of strings, array of token ids, "
            "or array of token-id arrays",
            param="prompt",
        )
    if all(_is_token(t) for t in prompt):
        return CompletionPrompt([prompt], add_special_tokens)
    prompts: list[str | list[int]] = []
    for item in prompt:
        if isinstance(item, str) or (
            isinstance(item, list) and item and all(_is_token(t) for t in item)
        ):
            prompts.append(item)
        else:
            raise InvalidRequest(
                "each item of 'prompt' must be a string or a non-empty array of token ids "
                "(integers >= 0), all of one kind",
                param="prompt",
            )
    if len({type(p) for p in prompts}) > 1:
        raise InvalidRequest("'prompt' must not mix strings and token-id arrays", param="prompt")
    return CompletionPrompt(prompts, add_special_tokens)


def _is_token(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _flag(body: dict[str, Any], name: str, *, default: bool) -> bool:
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise InvalidRequest(f"'{name}' must be a boolean", param=name)
    return value


def _optional_int(body: dict[str, Any], name: str, *, minimum: int) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidRequest(f"'{name}' must be an integer", param=name)
    if value < minimum:
        raise InvalidRequest(f"'{name}' must be at least {minimum}, got {value}", param=name)
    return value
