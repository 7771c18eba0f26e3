"""Read pooling request bodies (/v1/embeddings, /pooling, /classify, /v2/embed) into the
engine prompts of one `PoolingJob`, refusing what vLLM 0.32 refuses, in its order.

Shapes and defaults follow vLLM 0.32's models (entrypoints/pooling/{base,embed,pooling,
classify}/protocol.py): `input` is a string, strings, token ids or lists of token ids (a
string or token-id list is one prompt, each element of a list of strings or lists another),
or a conversation in `messages` (or in `input`; a list of conversations is a batch); text
prompts get the tokenizer's special tokens, chats do not. Checks run as vLLM runs them: the
body's types, `truncate_prompt_tokens` against the context, each prompt's length, then the
pooling parameters (`dimensions`), then the engine's own (empty prompt, vocabulary).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

from llmd.engine.sim import prompts
from llmd.engine.sim.errors import bad_request, invalid_value, validation_error
from llmd.engine.sim.prompts import Tokenizing
from llmd.engine.sim.tasks import ModelTasks
from llmd.engine.sim.tokenizer import SimTokenizer
from llmd.engine.sim.vectors import Encoding

ENCODING_FORMATS = ("float", "base64", "bytes", "bytes_only")
EMBED_DTYPES = ("float32", "float16", "bfloat16")  # vLLM's fp8 ones are not simulated
ENDIANNESS = ("native", "big", "little")
POOLING_TASKS = ("embed", "classify", "token_embed", "token_classify", "plugin")


@dataclasses.dataclass(frozen=True)
class PoolingJob:
    """A checked pooling request: one engine prompt per input, the task that pools them."""

    prompts: tuple[tuple[int, ...], ...]
    task: Literal["embed", "classify"]
    encoding: Encoding = dataclasses.field(default_factory=Encoding)
    priority: int = 0
    sim_fault: str = ""

    @property
    def prompt_tokens(self) -> int:
        """`usage.prompt_tokens` of the answer (pooling/utils.py `get_pooling_usage`)."""
        return sum(map(len, self.prompts))


@dataclasses.dataclass(frozen=True)
class PromptContext:
    """What reading a body needs from the server."""

    tokenizer: SimTokenizer
    max_model_len: int
    tasks: ModelTasks
    model_name: str
    vocab_size: int


def read_embeddings(body: dict[str, Any], ctx: PromptContext) -> PoolingJob:
    """`POST /v1/embeddings` (EmbeddingRequest). Raises `SimHTTPError` 400."""
    dimensions = typed(body, "dimensions", int, "int_parsing", "Input should be a valid integer")
    ids = _prompts(body, ctx)
    check_dimensions(dimensions, ctx)
    return pooling_job(body, ctx, ids, "embed")


def read_pooling(body: dict[str, Any], ctx: PromptContext) -> PoolingJob:
    """`POST /pooling` (PoolingRequest): the model's own task unless `task` names another,
    which vLLM refuses (pooling/serving.py `_verify_pooling_task`). Raises `SimHTTPError`."""
    if body.get("dimensions") is not None:
        raise invalid_value("dimensions is currently not supported", "dimensions")
    own = ctx.tasks.pooling_task or "embed"
    task = body.get("task")
    if task is not None and task not in POOLING_TASKS:
        raise validation_error(
            "literal_error",
            "body.task",
            "Input should be " + ", ".join(f"'{t}'" for t in POOLING_TASKS[:-1]) + " or 'plugin'",
            task,
        )
    if task == "plugin":
        raise invalid_value(
            "No IOProcessor plugin installed. Please refer to the documentation and to the "
            "'prithvi_geospatial_mae_io_processor' offline inference example for more details.",
            "task",
        )
    if task is not None and task != own:
        if task in ctx.tasks.supported:
            message = f"Try switching the model's pooling_task via --pooler-config.task {task}."
        else:
            message = f"Unsupported task: {task!r} Supported tasks: {ctx.tasks.supported}"
        raise invalid_value(message, "task")
    return pooling_job(body, ctx, _prompts(body, ctx), own)


def read_classify(body: dict[str, Any], ctx: PromptContext) -> PoolingJob:
    """`POST /classify` (ClassificationRequest). Raises `SimHTTPError` 400."""
    return pooling_job(body, ctx, _prompts(body, ctx), "classify")


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


def tokenizing(body: dict[str, Any], ctx: PromptContext, *, chat: bool) -> Tokenizing:
    """The request's tokenizing rules; raises `SimHTTPError` 400 for a bad
    `truncate_prompt_tokens` (base/serving.py `_validate_request`)."""
    truncate = typed(
        body, "truncate_prompt_tokens", int, "int_parsing", "Input should be a valid integer"
    )
    if truncate is not None and truncate < -1:
        raise validation_error(
            "greater_than_equal",
            "body.truncate_prompt_tokens",
            "Input should be greater than or equal to -1",
            truncate,
        )
    if truncate is not None and truncate > ctx.max_model_len:
        raise bad_request(
            "truncate_prompt_tokens value is greater than max_model_len. Please request a "
            "smaller truncation size."
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
        max_input_tokens=ctx.max_model_len,
        add_special_tokens=(not chat) if special is None else special,
        truncate=truncate,
        side=side,
    )


def engine_checked(job: PoolingJob, ctx: PromptContext) -> PoolingJob:
    """`job` once the engine core would take each prompt. Raises `SimHTTPError` 400."""
    for ids in job.prompts:
        error = prompts.check_for_engine(ids, ctx.vocab_size)
        if error is not None:
            raise error
    return job


def pooling_job(
    body: dict[str, Any],
    ctx: PromptContext,
    ids: list[list[int]],
    task: Literal["embed", "classify"] = "embed",
    *,
    encoded: bool = True,
) -> PoolingJob:
    """The job of checked prompts `ids`, with the body's `priority`, `sim_fault` and (when
    `encoded`) encoding fields, once the engine core would take each prompt. Raises
    `SimHTTPError` 400."""
    fault = body.get("sim_fault")
    job = PoolingJob(
        prompts=tuple(map(tuple, ids)),
        task=task,
        encoding=_encoding(body) if encoded else Encoding(),
        priority=typed(body, "priority", int, "int_parsing", "Input should be a valid integer")
        or 0,
        sim_fault=fault if isinstance(fault, str) else "",
    )
    return engine_checked(job, ctx)


def _prompts(body: dict[str, Any], ctx: PromptContext) -> list[list[int]]:
    """The engine prompts of `input` or `messages`. Raises `SimHTTPError` 400."""
    check_removed(body)
    typed(body, "model", str, "string_type", "Input should be a valid string")
    conversations = _conversations(body)
    how = tokenizing(body, ctx, chat=conversations is not None)
    if conversations is not None:
        return [prompts.chat_ids(ctx.tokenizer, body, c, how) for c in conversations]
    value = body.get("input")
    if "input" not in body:
        raise validation_error("missing", "body.input", "Field required", body)
    if isinstance(value, str):
        return [prompts.text_ids(ctx.tokenizer, value, how)]
    if not isinstance(value, list):
        raise validation_error("list_type", "body.input", "Input should be a valid list", value)
    if not value:
        raise bad_request("You must pass at least one prompt")
    if all(_is_int(t) for t in value):
        return [prompts.token_ids(value, how)]
    if all(isinstance(t, str) for t in value):
        return [prompts.text_ids(ctx.tokenizer, t, how) for t in value]
    if all(isinstance(t, list) and all(_is_int(i) for i in t) for t in value):
        return [prompts.token_ids(t, how) for t in value]
    raise validation_error(
        "list_type", "body.input", "Input should be a valid list of one kind of prompt", value
    )


def _conversations(body: dict[str, Any]) -> list[list[Any]] | None:
    """The conversations of a chat-shaped body (embed/protocol.py's five request shapes):
    `messages` (or `input`) holding one conversation, or a list of them; None otherwise."""
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


def check_dimensions(dimensions: int | None, ctx: PromptContext) -> None:
    """vLLM 0.32's `PoolingParams._set_default_parameters`: the simulated model is not a
    Matryoshka one, so any `dimensions` is refused (400, no param)."""
    if dimensions is not None:
        raise bad_request(
            f"Model {ctx.model_name!r} does not support Matryoshka embeddings; dimensions "
            f"must be unset (received dimensions={dimensions})."
        )


def _encoding(body: dict[str, Any]) -> Encoding:
    fields = (
        ("encoding_format", ENCODING_FORMATS, "float"),
        ("embed_dtype", EMBED_DTYPES, "float32"),
        ("endianness", ENDIANNESS, "native"),
    )
    values = []
    for name, allowed, default in fields:
        value = body.get(name, default)
        if value not in allowed:
            if name == "embed_dtype" and value in ("fp8_e4m3", "fp8_e5m2"):
                raise bad_request(f"the simulator does not encode embed_dtype {value}", name)
            raise validation_error(
                "literal_error",
                f"body.{name}",
                "Input should be "
                + ", ".join(f"'{a}'" for a in allowed[:-1])
                + f" or '{allowed[-1]}'",
                value,
            )
        values.append(value)
    return Encoding(*values)


def typed(body: dict[str, Any], name: str, kind: type, error: str, msg: str) -> Any:
    value = body.get(name)
    if value is None or (isinstance(value, kind) and not (kind is int and isinstance(value, bool))):
        return value
    raise validation_error(error, f"body.{name}", msg, value)


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
