"""Anthropic Messages on the simulator: `POST /v1/messages` (streamed or not, any query string)
and `POST /v1/messages/count_tokens`, as vLLM 0.32 serves them (vllm/entrypoints/anthropic/).

The body is checked (pydantic's errors: vLLM's OpenAI-shaped 400), turned into the chat
completion vLLM runs (anthropic_request.py) and run on the simulated engine. What the handler
refuses after that (unknown model, context length, engine dead, injected faults) is answered
in Anthropic's shape with vLLM's error type: `{"type": "error", "error": {"type":
"BadRequestError", "message": ...}}`. A stream is `event: NAME` / `data: JSON` pairs:
message_start (usage: the prompt, 0 output), content_block_start / content_block_delta (one a
chunk of text) / content_block_stop when there is text, message_delta (stop reason, usage),
message_stop; no ping. Message ids are the chat completion's, `chatcmpl-<x-request-id>`.
"""

from __future__ import annotations

import functools
import secrets
from collections.abc import Callable
from typing import Any, Protocol

from starlette.responses import Response

from llmd.engine.sim.anthropic_request import check_messages, to_chat
from llmd.engine.sim.asgi import Answer, EventStream, SimRequest
from llmd.engine.sim.core import RequestState, SimEngine
from llmd.engine.sim.errors import SimHTTPError
from llmd.engine.sim.faults import RequestFault
from llmd.engine.sim.requests import (
    fit_context,
    parse_generation,
    parse_json_object,
    template_tools,
)
from llmd.engine.sim.responses import drop_connection, dumps, json_response
from llmd.engine.sim.surface import Surface
from llmd.engine.sim.tokenizer import SimTokenizer, TemplateError

SSE_HEADERS = {"content-type": "text/event-stream; charset=utf-8"}
# The probe vLLM renders to learn whether the template takes a system turn after the first
# (AnthropicServingMessages._detect_merge_inline_system).
_INLINE_SYSTEM_PROBE = [
    {"role": "system", "content": "t"},
    {"role": "user", "content": "t"},
    {"role": "system", "content": "t"},
    {"role": "user", "content": "t"},
]


class Host(Protocol):
    """What the Messages routes use of the simulator's server (server.py's `SimServer`)."""

    engine: SimEngine
    tokenizer: SimTokenizer
    max_model_len: int
    surface: Surface

    def check_model(self, name: object) -> None: ...

    async def admit(
        self,
        request: SimRequest,
        body_fault: str,
        *,
        generation: bool = False,
        answer: Callable[[SimHTTPError], Response] = ...,
    ) -> RequestFault | Answer: ...


class MessagesAPI:
    """The two Messages handlers over one `SimServer` (its engine, tokenizer and faults)."""

    def __init__(self, server: Host) -> None:
        self.server = server

    @functools.cached_property
    def merge_inline_system(self) -> bool:
        """Whether a system turn after the first merges into the first (the template refuses
        it), probed at the first Messages request: rendering imports jinja2 and compiles the
        template (about 0.07 s of CPU), which a simulator that never serves one skips."""
        return _refuses_inline_system(self.server)

    async def count_tokens(self, request: SimRequest) -> Response:
        """`{"input_tokens": N, "context_management": {"original_input_tokens": N}}`: the prompt
        as the chat template renders it; a prompt past the window is refused as chat refuses
        it (vLLM 0.32: 400, "at least max_model_len + 1" tokens)."""
        try:
            body = parse_json_object(await request.body())
            check_messages(body, count_only=True)
        except SimHTTPError as error:
            return error.response()
        try:
            self.server.check_model(body["model"])
            ids = self._prompt(body)[0]
            server = self.server
            fit_context(ids, True, None, "max_tokens", server.max_model_len, server.surface)
            count = len(ids)
        except SimHTTPError as error:
            return anthropic_error(error)
        return json_response(
            dumps({"input_tokens": count, "context_management": {"original_input_tokens": count}})
        )

    async def create(self, request: SimRequest) -> Answer:
        """A message, streamed when the body asks."""
        try:
            body = parse_json_object(await request.body())
            check_messages(body)
        except SimHTTPError as error:
            return error.response()
        server = self.server
        try:
            server.check_model(body["model"])
            chat = to_chat(body, merge_inline_system=self.merge_inline_system)
            parsed = parse_generation(
                "chat", chat, server.tokenizer, server.max_model_len, server.surface
            )
        except SimHTTPError as error:
            return anthropic_error(error)
        fault = body.get("sim_fault")  # as on chat: a proxy passes the body on untouched
        fault = fault if isinstance(fault, str) else ""
        admitted = await server.admit(request, fault, generation=True, answer=anthropic_error)
        if not isinstance(admitted, RequestFault):
            return admitted
        try:
            state = server.engine.submit(parsed, admitted, request.headers.get("x-request-id", ""))
        except SimHTTPError as error:
            return anthropic_error(error)
        writer = MessageWriter(state, str(body["model"]), request.headers.get("x-request-id"))
        try:
            if parsed.stream:
                return await self._stream(request, state, writer)
            try:
                async for _ in state.updates():
                    pass
            except SimHTTPError as error:
                return anthropic_error(error)
            if state.fault.die_after is not None:
                return drop_connection(request)
            return json_response(writer.full_body())
        finally:
            server.engine.abort(state)  # no-op when it finished

    async def _stream(
        self, request: SimRequest, state: RequestState, writer: MessageWriter
    ) -> Answer:
        response = EventStream(request, SSE_HEADERS)
        die_after = state.fault.die_after
        started = False
        try:
            async for start, end in state.updates():
                if not started:
                    await response.start()
                    await response.write(writer.message_start())
                    started = True
                if die_after is not None and end >= die_after:
                    await response.write(writer.text(start, max(start, die_after)))
                    drop_connection(request)
                    return response
                await response.write(writer.text(start, end))
        except SimHTTPError as error:
            if not started:
                return anthropic_error(error)
            await response.write(event("error", {"type": "error", "error": _error(error)}))
            await response.end()
            return response
        except ConnectionResetError:
            return response
        await response.write(writer.ending())
        await response.end()
        return response

    def _prompt(self, body: dict[str, Any]) -> tuple[list[int], dict[str, Any]]:
        """The prompt ids of a checked body, and its chat form. Raises `SimHTTPError`."""
        chat = to_chat(body, merge_inline_system=self.merge_inline_system)
        tools = chat.get("tools")
        try:
            text = self.server.tokenizer.render_chat(
                chat["messages"],
                tools=template_tools(tools) if tools is not None else None,
                **(body.get("chat_template_kwargs") or {}),
            )
        except TemplateError as exc:
            raise SimHTTPError(400, str(exc), type="BadRequestError") from exc
        return self.server.tokenizer.encode(text, add_special_tokens=False), chat


class MessageWriter:
    """The Anthropic bodies and events of one generation."""

    def __init__(self, state: RequestState, model: str, request_id: str | None) -> None:
        self.state = state
        self.model = model
        self.id = "chatcmpl-" + (request_id or secrets.token_hex(8))
        self.block_open = False

    def usage(self) -> dict[str, int]:
        return {
            "input_tokens": self.state.seq.prompt_tokens,
            "output_tokens": len(self.state.token_ids),
        }

    def stop(self) -> tuple[str | None, str | None]:
        """(stop_reason, stop_sequence) as vLLM maps a chat finish (`_to_anthropic_stop_reason`;
        the simulator makes no tool calls)."""
        finish = self.state.finish_reason or "stop"
        if finish == "length":
            return "max_tokens", None
        if finish != "stop":
            return None, None
        if self.state.stop_reason is not None:
            return "stop_sequence", self.state.stop_reason
        return "end_turn", None

    def full_body(self) -> bytes:
        text = "".join(self.state.pieces)
        reason, sequence = self.stop()
        body: dict[str, Any] = {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "content": [{"type": "text", "text": text}],
            "model": self.model,
            "stop_reason": reason,
        }
        if sequence is not None:
            body["stop_sequence"] = sequence
        body["usage"] = self.usage()
        return dumps(body)

    def message_start(self) -> bytes:
        message: dict[str, Any] = {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "content": [],
            "model": self.model,
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": self.state.seq.prompt_tokens, "output_tokens": 0},
        }
        return event("message_start", {"type": "message_start", "message": message})

    def text(self, start: int, end: int) -> bytes:
        """The events of tokens `start:end`: the text block opened on its first text."""
        text = "".join(self.state.pieces[start:end])
        if not text:
            return b""
        out = b""
        if not self.block_open:
            self.block_open = True
            block = {"type": "text", "text": ""}
            out += event(
                "content_block_start",
                {"type": "content_block_start", "content_block": block, "index": 0},
            )
        delta = {"type": "text_delta", "text": text}
        return out + event(
            "content_block_delta", {"type": "content_block_delta", "delta": delta, "index": 0}
        )

    def ending(self) -> bytes:
        """content_block_stop (when a block is open), message_delta and message_stop."""
        out = b""
        if self.block_open:
            out += event("content_block_stop", {"type": "content_block_stop", "index": 0})
        reason, sequence = self.stop()
        delta = {"stop_reason": reason, "stop_sequence": sequence}
        out += event(
            "message_delta", {"type": "message_delta", "delta": delta, "usage": self.usage()}
        )
        return out + event("message_stop", {"type": "message_stop"})


def event(name: str, data: dict[str, Any]) -> bytes:
    """One SSE event as vLLM writes it (`wrap_data_with_event`)."""
    return b"event: " + name.encode() + b"\ndata: " + dumps(data) + b"\n\n"


def anthropic_error(error: SimHTTPError) -> Response:
    """An error the Messages handler answers: vLLM's `translate_error_response`."""
    return json_response(dumps({"type": "error", "error": _error(error)}), error.status)


def _error(error: SimHTTPError) -> dict[str, str]:
    return {"type": error.type, "message": error.message}


def _refuses_inline_system(server: Host) -> bool:
    """Whether the chat template refuses a system turn after the first (no template: True)."""
    try:
        server.tokenizer.render_chat(_INLINE_SYSTEM_PROBE, add_generation_prompt=False)
    except TemplateError:
        return True
    return False


__all__ = ["MessagesAPI"]
