"""The pooling endpoints of a pooling model: /v1/embeddings, /v2/embed, /pooling, /classify
(vLLM 0.32's entrypoints/pooling/{embed,pooling,classify}/serving.py).

An unknown `model` is a 404 of its own (pooling_requests.py); answers name the served model
(or the adapter asked for). Ids are `embd-`, `pooling-`, `classify-` and the request's id
(pooled.py). `encoding_format` bytes and bytes_only answer the raw vectors.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from starlette.responses import Response

from llmd.engine.sim import vectors
from llmd.engine.sim.asgi import Answer, Routes, SimRequest
from llmd.engine.sim.cohere import CohereJob, cohere_body, read_cohere_embed
from llmd.engine.sim.front import Front
from llmd.engine.sim.pooled import serve_pooled, usage
from llmd.engine.sim.pooling_requests import (
    PoolingJob,
    PromptContext,
    read_classify,
    read_embeddings,
    read_pooling,
)
from llmd.engine.sim.responses import dumps, json_response

Vector = list[float]
Writer = Callable[[PoolingJob, str], Awaitable[Answer]]


class PoolingRoutes:
    """The routes vLLM registers for the model's pooling task (pooling/factories.py
    `register_pooling_api_routers`), answered over `server`'s engine."""

    def __init__(self, server: Front) -> None:
        self.server = server

    def add_to(self, router: Routes) -> None:
        router.add_post("/pooling", self.pooling)
        if self.server.tasks.pooling_task == "embed":
            router.add_post("/v1/embeddings", self.embeddings)
            router.add_post("/v2/embed", self.cohere_embed)
        if self.server.tasks.pooling_task == "classify":
            router.add_post("/classify", self.classify)

    async def embeddings(self, request: SimRequest) -> Answer:
        """EmbeddingResponse: `data[i].embedding` per input, `usage` its prompt tokens."""
        return await self._serve(request, read_embeddings, self._vectors("embd", "embedding"))

    async def pooling(self, request: SimRequest) -> Answer:
        """PoolingResponse: `data[i].data`, the embedding or the class probabilities."""
        return await self._serve(request, read_pooling, self._vectors("pooling", "pooling"))

    async def classify(self, request: SimRequest) -> Answer:
        """ClassificationResponse: `label` (the likeliest's), `probs`, `num_classes`."""
        return await self._serve(request, read_classify, self._classes)

    async def cohere_embed(self, request: SimRequest) -> Answer:
        """CohereEmbedResponse (llmd/engine/sim/cohere.py)."""
        ctx = self.server.prompt_context

        async def write(parsed: CohereJob, request_id: str) -> Answer:
            outputs = self._outputs(parsed.job)
            return json_response(dumps(cohere_body(parsed, outputs, f"embd-{request_id}")))

        return await serve_pooled(
            self.server, request, lambda body: read_cohere_embed(body, ctx), _job_of, write
        )

    async def _serve(
        self,
        request: SimRequest,
        read: Callable[[dict[str, Any], PromptContext], PoolingJob],
        write: Writer,
    ) -> Answer:
        ctx = self.server.prompt_context
        return await serve_pooled(
            self.server, request, lambda body: read(body, ctx), lambda job: job, write
        )

    def _outputs(self, job: PoolingJob) -> list[Vector]:
        """Each prompt's pooled output: its embedding, or its class probabilities."""
        tasks = self.server.tasks
        embedded = [vectors.embed(ids, tasks.hidden_size) for ids in job.prompts]
        if job.task == "embed":
            return embedded
        return [vectors.class_probs(vector, tasks.num_labels) for vector in embedded]

    def _vectors(self, prefix: str, kind: str) -> Writer:
        """The writer of /v1/embeddings (`kind` embedding) or /pooling (`kind` pooling)."""
        field = "embedding" if kind == "embedding" else "data"

        async def write(job: PoolingJob, request_id: str) -> Answer:
            outputs = self._outputs(job)
            head = self._head(f"{prefix}-{request_id}", job.model)
            if job.encoding.format in ("bytes", "bytes_only"):
                return bytes_response(head, outputs, job)
            data = [
                {"index": i, "object": kind, field: vectors.encoded(vector, job.encoding)}
                for i, vector in enumerate(outputs)
            ]
            return json_response(dumps({**head, "data": data, "usage": usage(job.prompt_tokens)}))

        return write

    async def _classes(self, job: PoolingJob, request_id: str) -> Answer:
        labels = self.server.tasks.id2label
        data = [
            {
                "index": i,
                "label": labels[max(range(len(probs)), key=probs.__getitem__)],
                "probs": probs,
                "num_classes": len(probs),
            }
            for i, probs in enumerate(self._outputs(job))
        ]
        head = self._head(f"classify-{request_id}", job.model)
        return json_response(dumps({**head, "data": data, "usage": usage(job.prompt_tokens)}))

    def _head(self, response_id: str, model: str) -> dict[str, Any]:
        return {"id": response_id, "object": "list", "created": int(time.time()), "model": model}


def _job_of(parsed: CohereJob) -> PoolingJob:
    return parsed.job


def bytes_response(head: dict[str, Any], outputs: Sequence[Vector], job: PoolingJob) -> Response:
    """`encoding_format` bytes or bytes_only: the vectors' bytes back to back, and for bytes a
    `metadata` header of JSON saying where each lies (pooling/utils.py
    `build_pooling_bytes_streaming_response`)."""
    chunks = [vectors.vector_bytes(v, job.encoding) for v in outputs]
    headers = {}
    if job.encoding.format == "bytes":
        items, offset = [], 0
        for index, (chunk, vector) in enumerate(zip(chunks, outputs, strict=True)):
            items.append(
                {
                    "index": index,
                    "embed_dtype": job.encoding.dtype,
                    "endianness": job.encoding.endianness,
                    "start": offset,
                    "end": offset + len(chunk),
                    "shape": [len(vector)],
                }
            )
            offset += len(chunk)
        metadata = {
            **{key: head[key] for key in ("id", "created", "model")},
            "data": items,
            "usage": {"prompt_tokens": job.prompt_tokens, "total_tokens": job.prompt_tokens},
        }
        headers["metadata"] = json.dumps(metadata)
    return Response(b"".join(chunks), headers=headers, media_type="application/octet-stream")
