"""The path every pooling request takes (embeddings, pooling, classify, v2 embed, score,
rerank): a JSON body checked into a `PoolingJob`, its faults, one engine request per prompt,
then the answer. As vLLM 0.32 (entrypoints/pooling/base/serving.py).

Each prompt is its own engine request (prefill only), so a batch of N inputs takes N seats and
is counted N times in `vllm:prompt_tokens_total` and `vllm:request_success_total{finished_reason=
"stop"}`; the request is aborted in the engine when its client leaves. Ids are a prefix, then
the x-request-id header, else the body's `request_id`, else 16 random hex digits.
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from llmd.engine.sim.asgi import Answer, SimRequest
from llmd.engine.sim.errors import SimHTTPError
from llmd.engine.sim.faults import RequestFault
from llmd.engine.sim.front import Front
from llmd.engine.sim.pooling_requests import PoolingJob
from llmd.engine.sim.requests import GenerationRequest, parse_json_object
from llmd.engine.sim.responses import drop_connection

T = TypeVar("T")
Read = Callable[[dict[str, Any]], T]
Write = Callable[[T, str], Awaitable[Answer]]


async def serve_pooled(
    server: Front,
    request: SimRequest,
    read: Read[T],
    job_of: Callable[[T], PoolingJob],
    write: Write[T],
) -> Answer:
    """Answer one pooling request: `read` checks the body (raising `SimHTTPError`), `job_of`
    names its engine prompts, `write(parsed, request_id)` answers once they are done."""
    try:
        check_json_request(request)
        body = parse_json_object(await request.body())
        parsed = read(body)
    except SimHTTPError as error:
        return error.response()
    job = job_of(parsed)
    fault = await server.admit(request, job.sim_fault)
    if not isinstance(fault, RequestFault):
        return fault
    request_id = request_id_of(request, body)
    try:
        await run_prompts(server, job.prompts, job.priority, fault, request_id)
        if fault.die_after is not None:
            return drop_connection(request)
        return await write(parsed, request_id)
    except SimHTTPError as error:
        return error.response()


async def run_prompts(
    server: Front,
    prompts: Sequence[Sequence[int]],
    priority: int,
    fault: RequestFault,
    request_id: str,
) -> None:
    """Run each prompt as its own engine request (prefill only) until all are done; on the
    way out (a client that left included) any still in the engine are aborted. Raises
    `SimHTTPError` when the engine is or goes dead."""
    states = []
    try:
        for index, ids in enumerate(prompts):
            engine_request = GenerationRequest(
                kind="pooling", model=None, prompt_ids=tuple(ids), max_tokens=1, priority=priority
            )
            states.append(server.engine.submit(engine_request, fault, f"{request_id}-{index}"))
        for state in states:
            async for _ in state.updates():
                pass
    finally:
        for state in states:
            server.engine.abort(state)


def check_json_request(request: SimRequest) -> None:
    """vLLM 0.32's `validate_json_request` (serve/utils/api_utils.py): a body that is not
    `application/json` is a 400 before it is read."""
    if request.mime_type != "application/json":
        raise SimHTTPError(
            400,
            "1 validation error:\n  Unsupported Media Type: Only 'application/json' is allowed",
            type="Bad Request",
        )


def request_id_of(request: SimRequest, body: dict[str, Any]) -> str:
    """The id vLLM 0.32 gives a request (serve/engine/serving.py `_base_request_id`)."""
    given = request.headers.get("x-request-id") or body.get("request_id")
    return given if isinstance(given, str) and given else secrets.token_hex(8)


def usage(prompt_tokens: int) -> dict[str, Any]:
    """A pooling answer's `usage` (UsageInfo dumped: prompt tokens only)."""
    return {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens,
        "completion_tokens": 0,
        "prompt_tokens_details": None,
        "completion_tokens_details": None,
    }
