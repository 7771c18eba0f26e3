"""/score, /v1/score and the rerank paths (/rerank, /v1/rerank, /v2/rerank) of a scoring model,
as vLLM 0.32 serves them (entrypoints/pooling/scoring/{protocol,serving,io_processor,utils}.py).

Pairs: one first input against every second (1:N), or each with its own (1:1, N:N); any other
count is a 400 "Input lengths must be either 1:1, 1:N or N:N". An embedding model scores a pair
by the cosine of the two inputs' embeddings, each input tokenized and run once (bi-encoder:
`usage` counts every query and document once); a one-label classifier scores the pair's joint
prompt (`<s>query<s>document` with the tiny tokenizer's pair template; cross-encoder: `usage`
counts each pair). Rerank answers every document (`return_documents` is not vLLM's: ignored),
best first, cut to `top_n` when that is smaller.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from llmd.engine.sim import prompts, vectors
from llmd.engine.sim.asgi import Answer, Routes, SimRequest
from llmd.engine.sim.errors import SimHTTPError, bad_request, validation_error
from llmd.engine.sim.front import Front
from llmd.engine.sim.pooled import serve_pooled, usage
from llmd.engine.sim.pooling_fields import check_truncation, tokenizing, typed, union_missing
from llmd.engine.sim.pooling_requests import PoolingJob, PromptContext, pooling_job
from llmd.engine.sim.responses import dumps, json_response

# ScoreRequest's members in vLLM 0.32's order, each with its two fields.
SCORE_SHAPES = (
    ("ScoreQueriesDocumentsRequest", "queries", "documents"),
    ("ScoreQueriesItemsRequest", "queries", "items"),
    ("ScoreDataRequest", "data_1", "data_2"),
    ("ScoreTextRequest", "text_1", "text_2"),
)


@dataclasses.dataclass(frozen=True)
class ScoreJob:
    """Checked pairs: the engine prompts (`job`), for each pair the prompts it scores (one
    joint prompt, or a first and a second), the documents, and rerank's `top_n`."""

    job: PoolingJob
    pairs: tuple[tuple[int, ...], ...]
    documents: tuple[Any, ...]
    top_n: int = 0


class ScoringRoutes:
    """The scoring routes (pooling/scoring/api_router.py), over `server`'s engine."""

    def __init__(self, server: Front) -> None:
        self.server = server

    def add_to(self, router: Routes) -> None:
        for path in ("/score", "/v1/score"):
            router.add_post(path, self.score)
        for path in ("/rerank", "/v1/rerank", "/v2/rerank"):
            router.add_post(path, self.rerank)

    async def score(self, request: SimRequest) -> Answer:
        """ScoreResponse: `data[i].score` per pair, in pair order."""
        return await self._serve(request, rerank=False)

    async def rerank(self, request: SimRequest) -> Answer:
        """RerankResponse: `results` sorted by `relevance_score`, each with its `document`."""
        return await self._serve(request, rerank=True)

    async def _serve(self, request: SimRequest, *, rerank: bool) -> Answer:
        def read(body: dict[str, Any]) -> ScoreJob:
            first, second = _rerank_inputs(body) if rerank else _score_inputs(body)
            return self._job(body, first, second)

        async def write(job: ScoreJob, request_id: str) -> Answer:
            scores = self._scores(job)
            tokens = job.job.prompt_tokens
            model = job.job.model
            if not rerank:
                data = [{"index": i, "object": "score", "score": s} for i, s in enumerate(scores)]
                return json_response(
                    dumps(
                        {
                            "id": f"score-{request_id}",
                            "object": "list",
                            "created": int(time.time()),
                            "model": model,
                            "data": data,
                            "usage": usage(tokens),
                        }
                    )
                )
            top_n = min(job.top_n or len(scores), len(scores))
            ranked = sorted(range(len(scores)), key=lambda i: -scores[i])[:top_n]
            results = [
                {"index": i, "document": _document(job.documents[i]), "relevance_score": scores[i]}
                for i in ranked
            ]
            return json_response(
                dumps(
                    {
                        "id": f"score-{request_id}",
                        "model": model,
                        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
                        "results": results,
                    }
                )
            )

        return await serve_pooled(self.server, request, read, lambda job: job.job, write)

    def _job(self, body: dict[str, Any], first: list[Any], second: list[Any]) -> ScoreJob:
        """Pairs checked and tokenized as the model's scorer does. Raises `SimHTTPError`."""
        ctx = self.server.prompt_context
        how = tokenizing(body, ctx.max_model_len, chat=False)
        typed(body, "priority", int, "int_parsing", "Input should be a valid integer")
        ctx.check_model(body.get("model"))
        check_truncation(how)
        for item in (*first, *second):
            if not isinstance(item, str):
                raise bad_request(f"MultiModalParam is not supported for {ctx.tasks.architecture}")
        if len(first) > 1 and len(first) != len(second):
            raise bad_request("Input lengths must be either 1:1, 1:N or N:N")
        if not first:
            raise bad_request("At least one text element must be given")
        if not second:
            raise bad_request("At least one text_pair element must be given")
        first, second = _limited(body, ctx, first, second)
        lefts = [first[0]] * len(second) if len(first) == 1 else first
        if ctx.tasks.score_type == "cross-encoder":
            ids = [
                prompts.pair_ids(ctx.tokenizer, q, d, how, template=ctx.tasks.use_sep_token)
                for q, d in zip(lefts, second, strict=True)
            ]
            pairs: tuple[tuple[int, ...], ...] = tuple((i,) for i in range(len(ids)))
        else:
            ids = [prompts.text_ids(ctx.tokenizer, text, how) for text in (*first, *second)]
            pairs = tuple((0 if len(first) == 1 else i, len(first) + i) for i in range(len(second)))
        top_n = body.get("top_n")
        return ScoreJob(
            job=pooling_job(body, ctx, ids),
            pairs=pairs,
            documents=tuple(second),
            top_n=top_n if isinstance(top_n, int) else 0,
        )

    def _scores(self, job: ScoreJob) -> list[float]:
        size = self.server.tasks.hidden_size
        embedded = [vectors.embed(ids, size) for ids in job.job.prompts]
        if all(len(pair) == 1 for pair in job.pairs):  # cross-encoder: one label's probability
            return [vectors.class_probs(embedded[p[0]], 1)[0] for p in job.pairs]
        return [vectors.cosine(embedded[a], embedded[b]) for a, b in job.pairs]


def _score_inputs(body: dict[str, Any]) -> tuple[list[Any], list[Any]]:
    """The two inputs of the first ScoreRequest shape the body fills. Raises `SimHTTPError`
    (a pydantic union error naming each shape's missing fields when none fits)."""
    for _, first, second in SCORE_SHAPES:
        if body.get(first) is not None and body.get(second) is not None:
            return _input_list(body, first), _input_list(body, second)
    missing = tuple(name for _, *names in SCORE_SHAPES for name in names if body.get(name) is None)
    raise union_missing(body, missing)


def _rerank_inputs(body: dict[str, Any]) -> tuple[list[Any], list[Any]]:
    """RerankRequest's `query` (one input) and `documents`; `top_n` an integer >= 0."""
    for name in ("query", "documents"):
        if body.get(name) is None:
            _raise(validation_error("missing", f"body.{name}", "Field required", body))
    query = body["query"]
    if not isinstance(query, str | dict):
        _raise(
            validation_error("string_type", "body.query", "Input should be a valid string", query)
        )
    top_n = typed(body, "top_n", int, "int_parsing", "Input should be a valid integer")
    if top_n is not None and top_n < 0:
        _raise(
            validation_error(
                "greater_than_equal",
                "body.top_n",
                "Input should be greater than or equal to 0",
                top_n,
            )
        )
    return [query], _input_list(body, "documents")


def _input_list(body: dict[str, Any], name: str) -> list[Any]:
    """`ScoreInput | list[ScoreInput]` as a list: strings, or `{"content": [...]}` objects."""
    value = body[name]
    items = value if isinstance(value, list) else [value]
    for index, item in enumerate(items):
        if not isinstance(item, str) and not (isinstance(item, dict) and "content" in item):
            where = f"body.{name}.{index}" if isinstance(value, list) else f"body.{name}"
            _raise(validation_error("string_type", where, "Input should be a valid string", item))
    return items


def _limited(
    body: dict[str, Any], ctx: PromptContext, first: list[str], second: list[str]
) -> tuple[list[str], list[str]]:
    """`max_tokens_per_query`/`max_tokens_per_doc` applied (io_processor.py
    `_get_token_limits`, `_truncate_scoring_data`). Raises `SimHTTPError` 400."""
    limited = []
    for name, texts in (("max_tokens_per_query", first), ("max_tokens_per_doc", second)):
        limit = typed(body, name, int, "int_parsing", "Input should be a valid integer") or 0
        if limit < 0:
            raise bad_request(f"{name} must be a non-negative integer")
        if limit >= ctx.max_model_len:
            raise bad_request(
                f"{name} ({limit}) must be less than max_model_len ({ctx.max_model_len})."
            )
        limited.append([ctx.tokenizer.truncate_text(t, limit) for t in texts] if limit else texts)
    return limited[0], limited[1]


def _document(document: Any) -> dict[str, Any]:
    if isinstance(document, str):
        return {"text": document, "multi_modal": None}
    return {"text": None, "multi_modal": document.get("content", [])}


def _raise(error: SimHTTPError) -> Any:
    raise error
