"""Read pooling request bodies (/v1/embeddings, /pooling, /classify) into the engine prompts of
one `PoolingJob`, refusing what vLLM 0.32 refuses, in its order (entrypoints/pooling/
{base,embed,pooling,classify}/): the body's fields (pooling_fields.py), /pooling's task, the
`model` (404 "does not exist", no param: `_maybe_get_adapters`), `truncate_prompt_tokens`
against the context, each prompt's length, the pooling parameters (`dimensions`), then the
engine's own checks (empty prompt, vocabulary).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Literal

from llmd.engine.sim import prompts
from llmd.engine.sim.errors import SimHTTPError, bad_request, invalid_value, validation_error
from llmd.engine.sim.pooling_fields import (
    CLASSIFY_UNION,
    EMBEDDING_UNION,
    POOLING_UNION,
    PromptFields,
    check_truncation,
    read_fields,
    typed,
)
from llmd.engine.sim.tasks import ModelTasks
from llmd.engine.sim.tokenizer import SimTokenizer
from llmd.engine.sim.vectors import Encoding

POOLING_TASKS = ("embed", "classify", "token_embed", "token_classify", "plugin")


@dataclasses.dataclass(frozen=True)
class PoolingJob:
    """A checked pooling request: one engine prompt per input, the task that pools them."""

    prompts: tuple[tuple[int, ...], ...]
    task: Literal["embed", "classify"]
    encoding: Encoding = dataclasses.field(default_factory=Encoding)
    priority: int = 0
    sim_fault: str = ""
    model: str = ""  # the name the answer gives: the served model's, or the adapter's asked for

    @property
    def prompt_tokens(self) -> int:
        """`usage.prompt_tokens` of the answer (pooling/utils.py `get_pooling_usage`)."""
        return sum(map(len, self.prompts))


@dataclasses.dataclass(frozen=True)
class PromptContext:
    """What reading a body needs from the server; `serves(name)` whether a `model` is served
    (a served name or an adapter's), `adapter(name)` whether it is an adapter's."""

    tokenizer: SimTokenizer
    max_model_len: int
    tasks: ModelTasks
    model_name: str
    vocab_size: int
    serves: Callable[[str], bool] = lambda name: True
    adapter: Callable[[str], bool] = lambda name: False

    def check_model(self, name: object) -> None:
        """The pooling endpoints' model check (serve/engine/serving.py `_maybe_get_adapters`:
        404 NotFoundError, no `param`, no served names). Raises `SimHTTPError`."""
        if name and not self.serves(str(name)):
            raise SimHTTPError(404, f"The model `{name}` does not exist.", type="NotFoundError")


def read_embeddings(body: dict[str, Any], ctx: PromptContext) -> PoolingJob:
    """`POST /v1/embeddings` (EmbeddingRequest). Raises `SimHTTPError`."""
    dimensions = typed(body, "dimensions", int, "int_parsing", "Input should be a valid integer")
    fields = read_fields(body, ctx.max_model_len, EMBEDDING_UNION)
    ctx.check_model(body.get("model"))
    ids = render(body, ctx, fields)
    check_dimensions(dimensions, ctx)
    return pooling_job(body, ctx, ids, "embed", fields.encoding)


def read_pooling(body: dict[str, Any], ctx: PromptContext) -> PoolingJob:
    """`POST /pooling` (PoolingRequest): the model's own task unless `task` names another,
    which vLLM refuses before anything else (pooling/serving.py `_verify_pooling_task`).
    Raises `SimHTTPError`."""
    task = body.get("task")
    if task is not None and task not in POOLING_TASKS:
        quoted = ", ".join(f"'{t}'" for t in POOLING_TASKS[:-1])
        raise validation_error(
            "literal_error", "body.task", f"Input should be {quoted} or 'plugin'", task
        )
    fields = read_fields(body, ctx.max_model_len, POOLING_UNION)
    if body.get("dimensions") is not None:
        raise invalid_value("dimensions is currently not supported", "dimensions")
    own = ctx.tasks.pooling_task or "embed"
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
    ctx.check_model(body.get("model"))
    return pooling_job(body, ctx, render(body, ctx, fields), own, fields.encoding)


def read_classify(body: dict[str, Any], ctx: PromptContext) -> PoolingJob:
    """`POST /classify` (ClassificationRequest). Raises `SimHTTPError`."""
    fields = read_fields(body, ctx.max_model_len, CLASSIFY_UNION)
    ctx.check_model(body.get("model"))
    return pooling_job(body, ctx, render(body, ctx, fields), "classify", fields.encoding)


def render(body: dict[str, Any], ctx: PromptContext, fields: PromptFields) -> list[list[int]]:
    """The engine prompts of checked fields, each within the context. Raises
    `SimHTTPError` 400."""
    how = fields.how
    check_truncation(how)
    if fields.conversations is not None:
        return [prompts.chat_ids(ctx.tokenizer, body, c, how) for c in fields.conversations]
    if not fields.inputs:
        raise bad_request("You must pass at least one prompt")
    return [
        prompts.text_ids(ctx.tokenizer, item, how)
        if isinstance(item, str)
        else prompts.token_ids(item, how)
        for item in fields.inputs
    ]


def check_dimensions(dimensions: int | None, ctx: PromptContext) -> None:
    """vLLM 0.32's `PoolingParams._set_default_parameters`: the simulated model is not a
    Matryoshka one, so any `dimensions` is refused (400, no param)."""
    if dimensions is not None:
        raise bad_request(
            f"Model {ctx.model_name!r} does not support Matryoshka embeddings; dimensions "
            f"must be unset (received dimensions={dimensions})."
        )


def pooling_job(
    body: dict[str, Any],
    ctx: PromptContext,
    ids: list[list[int]],
    task: Literal["embed", "classify"] = "embed",
    encoding: Encoding | None = None,
) -> PoolingJob:
    """The job of checked prompts `ids`, with the body's `priority` and `sim_fault`, once
    the engine core would take each prompt. Raises `SimHTTPError` 400."""
    fault = body.get("sim_fault")
    priority = body.get("priority")
    name = body.get("model")
    job = PoolingJob(
        prompts=tuple(map(tuple, ids)),
        task=task,
        encoding=encoding or Encoding(),
        priority=priority if isinstance(priority, int) else 0,
        sim_fault=fault if isinstance(fault, str) else "",
        model=name if isinstance(name, str) and ctx.adapter(name) else ctx.model_name,
    )
    for prompt in job.prompts:
        error = prompts.check_for_engine(prompt, ctx.vocab_size)
        if error is not None:
            raise error
    return job
