"""`POST /v2/embed`, Cohere's embed shape, as vLLM 0.32 serves it on an embedding model
(entrypoints/pooling/embed/protocol.py `CohereEmbedRequest`, io_processor.py, serving.py).

Exactly one of `texts`, `images`, `inputs`, non-empty. `truncate` END (the default) or START
cuts a long text to `max_tokens` (else the context) silently, from the end or the start; NONE
refuses it as /v1/embeddings does, and with `max_tokens` refuses any text longer than that.
`input_type` needs task instructions the tiny model lacks (400). The answer holds each
requested `embedding_types` (default float), `texts` echoed, and `meta.billed_units`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from llmd.engine.sim import prompts, vectors
from llmd.engine.sim.errors import bad_request, validation_error
from llmd.engine.sim.pooling_fields import typed
from llmd.engine.sim.pooling_requests import (
    PoolingJob,
    PromptContext,
    check_dimensions,
    pooling_job,
)
from llmd.engine.sim.prompts import Tokenizing

EMBEDDING_TYPES = ("float", "binary", "ubinary", "base64")


@dataclasses.dataclass(frozen=True)
class CohereJob:
    """A checked /v2/embed request: its engine prompts and what the answer carries."""

    job: PoolingJob
    embedding_types: tuple[str, ...]
    texts: list[str] | None
    max_tokens_none: int | None  # truncate NONE with max_tokens: the longest prompt allowed


def read_cohere_embed(body: dict[str, Any], ctx: PromptContext) -> CohereJob:
    """Check a /v2/embed body and tokenize its inputs. Raises `SimHTTPError` 400."""
    given = [body.get(name) for name in ("texts", "images", "inputs")]
    provided = [value for value in given if value is not None]
    if len(provided) != 1 or not provided[0]:
        raise _value_error(
            "Exactly one of texts, images, or inputs must be provided, and it must be non-empty",
            body,
        )
    truncate = body.get("truncate", "END")
    if truncate not in ("NONE", "START", "END"):
        raise validation_error(
            "literal_error", "body.truncate", "Input should be 'NONE', 'START' or 'END'", truncate
        )
    max_tokens = typed(body, "max_tokens", int, "int_parsing", "Input should be a valid integer")
    types = body.get("embedding_types") or ["float"]
    if not isinstance(types, list) or any(t not in EMBEDDING_TYPES for t in types):
        raise validation_error(
            "literal_error",
            "body.embedding_types",
            "Input should be 'float', 'binary', 'ubinary' or 'base64'",
            types,
        )
    dimensions = typed(
        body, "output_dimension", int, "int_parsing", "Input should be a valid integer"
    )
    items = _items(body)
    ctx.check_model(body.get("model"))
    input_type = body.get("input_type")
    if input_type is not None:
        raise bad_request(  # io_processor.py `_validate_input_type`: no task instructions
            f"Unsupported input_type {input_type!r}. This model does not define any "
            "input_type task instructions."
        )
    how = Tokenizing(
        max_input_tokens=ctx.max_model_len,
        truncate=None if truncate == "NONE" else (-1 if max_tokens is None else max_tokens),
        side="left" if truncate == "START" else None,
    )
    texts = body.get("texts")
    ids = [_prompt(ctx, item, how) for item in items]
    check_dimensions(dimensions, ctx)
    return CohereJob(
        job=pooling_job(body, ctx, ids),
        embedding_types=tuple(types),
        texts=texts if isinstance(texts, list) else None,
        max_tokens_none=max_tokens if truncate == "NONE" else None,
    )


def cohere_body(
    request: CohereJob, vectors_out: list[list[float]], request_id: str
) -> dict[str, Any]:
    """The answer (CohereEmbedResponse dumped without None fields). Raises `SimHTTPError` 400
    when a truncate=NONE input exceeds `max_tokens` (io_processor.py
    `_check_cohere_max_tokens`, checked once the engine is done)."""
    limit = request.max_tokens_none
    for ids in request.job.prompts:
        if limit is not None and len(ids) > limit:
            raise bad_request(
                f"Input of {len(ids)} tokens exceeds max_tokens={limit} with truncate=NONE. "
                "Set truncate to END or START to allow truncation."
            )
    embeddings: dict[str, Any] = {}
    for kind in request.embedding_types:
        if kind == "float":
            embeddings["float"] = vectors_out
        elif kind == "base64":
            embeddings["base64"] = [vectors.float32_base64(v) for v in vectors_out]
        else:
            embeddings[kind] = vectors.packed_bits(vectors_out, signed=kind == "binary")
    body: dict[str, Any] = {"id": request_id, "embeddings": embeddings}
    if request.texts is not None:
        body["texts"] = request.texts
    body["meta"] = {
        "api_version": {"version": "2"},
        "billed_units": {"input_tokens": request.job.prompt_tokens, "image_tokens": 0},
    }
    body["response_type"] = "embeddings_by_type"
    return body


def _items(body: dict[str, Any]) -> list[Any]:
    """Each input as a text or a list of content parts."""
    if body.get("texts") is not None:
        texts = body["texts"]
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            raise validation_error("list_type", "body.texts", "Input should be a valid list", texts)
        return list(texts)
    if body.get("images") is not None:
        raise bad_request("the simulated model takes no image inputs", "images")
    inputs = body["inputs"]
    if not isinstance(inputs, list) or not all(
        isinstance(i, dict) and isinstance(i.get("content"), list) for i in inputs
    ):
        raise validation_error("list_type", "body.inputs", "Input should be a valid list", inputs)
    for item in inputs:
        if any(not isinstance(p, dict) or p.get("type") != "text" for p in item["content"]):
            raise bad_request("the simulated model takes no image inputs", "inputs")
    return [item["content"] for item in inputs]


def _prompt(ctx: PromptContext, item: Any, how: Tokenizing) -> list[int]:
    if isinstance(item, str):
        return prompts.text_ids(ctx.tokenizer, item, how)
    # Mixed inputs go through the chat template as one user message (`_batch_render_chat`).
    messages = [
        {"role": "user", "content": [{"type": "text", "text": p.get("text") or ""} for p in item]}
    ]
    return prompts.chat_ids(
        ctx.tokenizer, {}, messages, dataclasses.replace(how, add_special_tokens=False)
    )


def _value_error(message: str, body: dict[str, Any]) -> Any:
    """A pydantic model validator's ValueError, as FastAPI answers it."""
    error = validation_error("value_error", "body", f"Value error, {message}", body)
    error.message = error.message[:-1] + f", 'ctx': {{'error': ValueError({message!r})}}}}"
    return error
