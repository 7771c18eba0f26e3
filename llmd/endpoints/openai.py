"""Readers of OpenAI-style bodies (and vLLM's pooling, scoring and tokenizer ones): each checks
the fields llmd reads, once, and returns them as one `Fields` record.

Only these fields are checked; every other field passes through to the engine untouched.
Wrong types and empty or missing prompts raise `InvalidRequest` naming the field in `param`.
Accepted shapes follow vLLM 0.32's request models: `entrypoints/openai/*/protocol.py`,
`entrypoints/pooling/{embed,pooling,classify,scoring}/protocol.py`,
`entrypoints/serve/tokenize/protocol.py`.
"""

from __future__ import annotations

from typing import Any

from llmd.endpoints.tools import check_tools, template_tool
from llmd.engine.args import COMPLETIONS_DEFAULT_MAX_TOKENS
from llmd.errors import InvalidRequest
from llmd.validation.fields import (
    NO_OUTPUT,
    TEXT_PARTS,
    ChatPrompt,
    Fields,
    OutputRequest,
    PairPrompt,
    TextPrompt,
)

# Chat fields that change the rendered prompt in ways llmd does not render itself: a request
# using one is counted by the engine's /tokenize (exact, one round trip).
ENGINE_RENDERED_FIELDS = ("tools", "chat_template", "documents", "reasoning_effort")
# Every content part type vLLM 0.32 parses (renderers/chat_utils.py MM_PARSER_MAP); it refuses
# the others, and its /tokenize says so in a pydantic dump.
PART_TYPES = (
    *TEXT_PARTS,
    *("thinking", "image_url", "input_image", "image_pil", "image_embeds", "input_audio"),
    *("audio_url", "audio_embeds", "video_url", "video_embeds", "prompt_embeds", "tool_reference"),
)
# The field pairs vLLM 0.32's ScoreRequest takes (scoring/protocol.py), first match wins.
SCORE_FIELDS = (
    ("queries", "documents"),
    ("queries", "items"),
    ("data_1", "data_2"),
    ("text_1", "text_2"),
)


def read_chat(body: dict[str, Any]) -> Fields:
    """`POST /v1/chat/completions`. Raises InvalidRequest (with param)."""
    return Fields(
        model=_model(body),
        prompt=_chat_prompt(body, generation=True),
        output=_output(body, chat=True),
        truncate_prompt_tokens=_optional_int(body, "truncate_prompt_tokens", minimum=-1),
        stream=_stream(body),
    )


def read_completions(body: dict[str, Any]) -> Fields:
    """`POST /v1/completions`. Raises InvalidRequest (with param)."""
    return Fields(
        model=_model(body),
        prompt=_text_prompt(body, "prompt"),
        output=_output(body, chat=False),
        truncate_prompt_tokens=_optional_int(body, "truncate_prompt_tokens", minimum=-1),
        stream=_stream(body),
    )


def read_embeddings(body: dict[str, Any]) -> Fields:
    """`POST /v1/embeddings`, `/pooling`, `/classify`: `input` (a string, strings, token ids or
    lists of them) or a chat conversation in `messages` (or in `input`, as vLLM 0.32 also
    takes it). No output: the prompt alone must fit. Raises InvalidRequest (with param)."""
    messages = body.get("messages")
    if messages is None and _is_conversation(body.get("input")):
        messages = body["input"]
    if messages is not None:
        if messages and all(_is_conversation(item) for item in messages):
            raise InvalidRequest(  # batched conversations: the engine renders those
                "llmd takes one conversation per pooling request; send several requests",
                param="messages",
            )
        prompt: ChatPrompt | TextPrompt = _chat_prompt(
            {**body, "messages": messages}, generation=False
        )
    else:
        prompt = _text_prompt(body, "input")
    return Fields(
        model=_model(body),
        prompt=prompt,
        output=NO_OUTPUT,
        truncate_prompt_tokens=_optional_int(body, "truncate_prompt_tokens", minimum=-1),
        usage_counts_input=body.get("encoding_format") in _JSON_USAGE_FORMATS,
    )


# `encoding_format`s whose answer is JSON with `usage.prompt_tokens` (vLLM 0.32: `bytes` puts the
# usage in a header, `bytes_only` gives none); None: the field omitted (floats).
_JSON_USAGE_FORMATS = (None, "float", "base64")


def read_cohere_embed(body: dict[str, Any]) -> Fields:
    """`POST /v2/embed` (Cohere's shape): `texts` (or `images`/`inputs`, which the engine
    counts). Raises InvalidRequest (with param)."""
    texts = body.get("texts")
    given = [name for name in ("texts", "images", "inputs") if body.get(name) is not None]
    if len(given) != 1:
        raise InvalidRequest(
            "exactly one of 'texts', 'images' or 'inputs' must be given", param="texts"
        )
    if given != ["texts"]:
        prompt = TextPrompt([], add_special_tokens=True, param=given[0], local=False)
    elif not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
        raise InvalidRequest("'texts' must be a non-empty array of strings", param="texts")
    else:
        prompt = TextPrompt(list(texts), add_special_tokens=True, param="texts")
    return Fields(model=_model(body), prompt=prompt, output=NO_OUTPUT)


def read_score(body: dict[str, Any]) -> Fields:
    """`POST /score`, `/v1/score`: `queries`/`documents` (or `items`, `data_1`/`data_2`,
    `text_1`/`text_2`), each a string or a list, paired 1:1, 1:N or N:N. Raises
    InvalidRequest (with param)."""
    for first, second in SCORE_FIELDS:
        if first in body or second in body:
            left = _score_inputs(body, first)
            right = _score_inputs(body, second)
            return _pairs(body, left, right, first, second)
    raise InvalidRequest("'queries' and 'documents' are required", param="queries")


def read_rerank(body: dict[str, Any]) -> Fields:
    """`POST /rerank`, `/v1/rerank`, `/v2/rerank` (Jina and Cohere's shape): one `query`
    against `documents` (strings, or objects the engine renders). Raises InvalidRequest."""
    query = body.get("query")
    if not isinstance(query, str | dict):
        raise InvalidRequest("'query' must be a string", param="query")
    top_n = _optional_int(body, "top_n", minimum=0)
    del top_n  # checked only: the engine applies it
    return _pairs(body, [query], _score_inputs(body, "documents"), "query", "documents")


def read_tokenize(body: dict[str, Any]) -> Fields:
    """`POST /tokenize`: a `prompt` string, or `messages` rendered by the chat template (no
    generation prompt unless asked, as vLLM 0.32). Raises InvalidRequest (with param)."""
    if "messages" in body:
        prompt: ChatPrompt | TextPrompt = _chat_prompt(body, generation=True)
    else:
        text = body.get("prompt")
        if not isinstance(text, str):
            raise InvalidRequest("'prompt' must be a string", param="prompt")
        prompt = TextPrompt([text], _flag(body, "add_special_tokens", default=True))
    strs = _flag(body, "return_token_strs", default=False)
    return Fields(model=_model(body), prompt=prompt, output=NO_OUTPUT, token_strs=strs)


def read_detokenize(body: dict[str, Any]) -> Fields:
    """`POST /detokenize`: `tokens`, a list of token ids. Raises InvalidRequest."""
    tokens = body.get("tokens")
    if not isinstance(tokens, list) or not all(_is_token(t) for t in tokens):
        raise InvalidRequest(
            "'tokens' must be an array of token ids (integers >= 0)", param="tokens"
        )
    return Fields(
        model=_model(body),
        prompt=TextPrompt([list(tokens)], add_special_tokens=False, param="tokens"),
        output=NO_OUTPUT,
    )


# -- the parts -----------------------------------------------------------------------------


def _model(body: dict[str, Any]) -> str | None:
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise InvalidRequest("'model' must be a string", param="model")
    return model or None


def _stream(body: dict[str, Any]) -> bool:
    return _flag(body, "stream", default=False)


def _output(body: dict[str, Any], *, chat: bool) -> OutputRequest:
    echo = _flag(body, "echo", default=False)
    # vLLM accepts max_tokens=0 only for completions that echo the prompt.
    minimum = 0 if not chat and echo else 1
    max_tokens = _optional_int(body, "max_tokens", minimum=minimum)
    field = "max_tokens"
    if chat:
        completion = _optional_int(body, "max_completion_tokens", minimum=1)
        if completion is not None:
            max_tokens, field = completion, "max_completion_tokens"
    n = _optional_int(body, "n", minimum=1)
    omitted = field not in body
    return OutputRequest(
        max_tokens=max_tokens,
        field=field,
        n=1 if n is None else n,
        omitted=omitted,
        # vLLM 0.32: completions that omit max_tokens get 16; chat, or a null, the rest.
        engine_default=COMPLETIONS_DEFAULT_MAX_TOKENS if not chat and omitted else None,
    )


def _chat_prompt(body: dict[str, Any], *, generation: bool) -> ChatPrompt:
    """The conversation in `messages`; `generation` False for pooling and tokenize, whose
    add_generation_prompt defaults to False in vLLM 0.32."""
    messages = body.get("messages")
    if messages is None:
        raise InvalidRequest("'messages' is required", param="messages")
    if not isinstance(messages, list):
        raise InvalidRequest("'messages' must be an array of message objects", param="messages")
    if not messages:
        raise InvalidRequest("'messages' must not be empty", param="messages")
    check_tools(body)
    tools = body.get("tools")
    # `tools` aside, the fields llmd does not render: with tools alone, llmd renders the prompt
    # as the engine does, to bound it (the engine counts it).
    local = all(body.get(name) is None for name in ENGINE_RENDERED_FIELDS if name != "tools")
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
    add_generation_prompt = _flag(body, "add_generation_prompt", default=generation)
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
        local=local and tools is None,
        engine_extras={k: body[k] for k in ("tools", "chat_template") if body.get(k) is not None},
        tools=[template_tool(tool) for tool in tools] if local and tools else None,
        rendered_here=local and tools is not None,
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


def _text_prompt(body: dict[str, Any], field: str) -> TextPrompt:
    """`body[field]`: a non-empty string, strings, token ids, or lists of token ids."""
    prompt = body.get(field)
    add_special_tokens = _flag(body, "add_special_tokens", default=True)
    if prompt is None:
        raise InvalidRequest(f"'{field}' is required", param=field)
    if isinstance(prompt, str):
        if not prompt:
            raise InvalidRequest(f"'{field}' must not be empty", param=field)
        return TextPrompt([prompt], add_special_tokens, field)
    if not isinstance(prompt, list) or not prompt:
        raise InvalidRequest(
            f"'{field}' must be a non-empty string, array of strings, array of token ids, "
            "or array of token-id arrays",
            param=field,
        )
    if all(_is_token(t) for t in prompt):
        return TextPrompt([prompt], add_special_tokens, field)
    prompts: list[str | list[int]] = []
    for item in prompt:
        if isinstance(item, str) or (
            isinstance(item, list) and item and all(_is_token(t) for t in item)
        ):
            prompts.append(item)
        else:
            raise InvalidRequest(
                f"each item of '{field}' must be a string or a non-empty array of token ids "
                "(integers >= 0), all of one kind",
                param=field,
            )
    if len({type(p) for p in prompts}) > 1:
        raise InvalidRequest(f"'{field}' must not mix strings and token-id arrays", param=field)
    return TextPrompt(prompts, add_special_tokens, field)


def _score_inputs(body: dict[str, Any], field: str) -> list[Any]:
    """`body[field]` as a list of inputs: strings, or objects (multimodal: the engine's)."""
    value = body.get(field)
    if value is None:
        raise InvalidRequest(f"'{field}' is required", param=field)
    items = value if isinstance(value, list) else [value]
    if not items:
        raise InvalidRequest(f"'{field}' must not be empty", param=field)
    for index, item in enumerate(items):
        if not isinstance(item, str | dict):
            raise InvalidRequest(
                f"{field}[{index}] must be a string or a content object", param=field
            )
    return items


def _pairs(
    body: dict[str, Any], left: list[Any], right: list[Any], first: str, second: str
) -> Fields:
    """The pairs vLLM 0.32 scores (scoring/utils.py `_validate_score_input_lens`): one left
    against every right (1:N), or each with its own (N:N)."""
    if len(left) > 1 and len(left) != len(right):
        raise InvalidRequest(
            f"'{first}' and '{second}' must pair 1:1, 1:N or N:N; got {len(left)} and {len(right)}",
            param=second,
        )
    texts: list[str | list[int]] = []
    local = all(isinstance(item, str) for item in (*left, *right))
    if local:
        texts = [*left, *right]
    pairs = [(0 if len(left) == 1 else i, len(left) + i) for i in range(len(right))]
    return Fields(
        model=_model(body),
        prompt=PairPrompt(texts, pairs, add_special_tokens=True, param=second, local=local),
        output=NO_OUTPUT,
        truncate_prompt_tokens=_optional_int(body, "truncate_prompt_tokens", minimum=-1),
    )


def _is_conversation(value: object) -> bool:
    """A list of message objects (vLLM 0.32 embed/protocol.py `_is_chat_messages`)."""
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(item, dict) and isinstance(item.get("role"), str) for item in value)
    )


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
