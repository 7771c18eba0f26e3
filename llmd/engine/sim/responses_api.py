"""The Responses API (`POST /v1/responses`) as vLLM 0.32 serves it without its store
(`VLLM_ENABLE_RESPONSES_API_STORE` off, its default): the input rendered as chat
(llmd/engine/responses_input.py), a response object or a stream of typed events, field for
field as vLLM writes them (`entrypoints/openai/responses/serving.py`, `protocol.py`,
`streaming_events.py` `SimpleStreamingEventProcessor`).

    stream  response.created, response.in_progress, then for the text: output_item.added,
            content_part.added, output_text.delta (one per engine step with text),
            output_text.done, content_part.done, output_item.done; then response.completed,
            whose response says `incomplete` when max_output_tokens cut it

`store` is ignored (as vLLM does), a `previous_response_id` is unknown (404), `background`
is refused. Context: a prompt over the window is a 400, one that fills it exactly vLLM's
"engine prompt length" 400; `max_output_tokens` over the window is a 400, else clamped.
"""

from __future__ import annotations

import secrets
import time
from typing import Any, Protocol

from llmd.engine.responses_input import (
    InputError,
    chat_messages,
    chat_tools,
    continues_final,
    input_items,
)
from llmd.engine.sim import errors, messages_api
from llmd.engine.sim.asgi import Answer, EventStream, SimRequest
from llmd.engine.sim.core import RequestState
from llmd.engine.sim.errors import SimHTTPError
from llmd.engine.sim.faults import RequestFault
from llmd.engine.sim.requests import GenerationRequest, parse_json_object
from llmd.engine.sim.responses import drop_connection, dumps, json_response
from llmd.engine.sim.tokenizer import TemplateError


class Host(messages_api.Host, Protocol):
    """What the Responses route uses of the simulator's server (server.py's `SimServer`)."""

    model_name: str


SSE_HEADERS = {"content-type": "text/event-stream; charset=utf-8"}


class ResponsesApi:
    """`POST /v1/responses` over a `SimServer`'s engine."""

    def __init__(self, server: Host) -> None:
        self.server = server

    async def create(self, request: SimRequest) -> Answer:
        server = self.server
        try:
            body = parse_json_object(await request.body())
            server.check_model(body.get("model"))
            parsed = self.parse(body)
        except SimHTTPError as error:
            return error.response()
        admitted = await server.admit(request, parsed.sim_fault, generation=True)
        if not isinstance(admitted, RequestFault):
            return admitted
        try:
            state = server.engine.submit(parsed, admitted, request.headers.get("x-request-id", ""))
        except SimHTTPError as error:
            return error.response()
        response = Response(body, state, server.model_name)
        try:
            if parsed.stream:
                return await self._stream(request, state, response)
            async for _ in state.updates():
                pass
            return json_response(dumps(response.final()))
        except SimHTTPError as error:
            return error.response()
        finally:
            server.engine.abort(state)

    def parse(self, body: dict[str, Any]) -> GenerationRequest:
        """Check `body` and render its prompt. Raises SimHTTPError (400, 404)."""
        server = self.server
        if "input" not in body:
            raise errors.validation_error("missing", "body.input", "Field required", body)
        if body.get("previous_response_id") is not None:
            raise SimHTTPError(
                404,
                f"Response with id '{body['previous_response_id']}' not found.",
                type="invalid_request_error",
                param="response_id",
            )
        if body.get("background"):
            raise errors.invalid_value(
                "background can only be used when `store` is true", "background"
            )
        try:
            items = input_items(body["input"])
            messages = chat_messages(body.get("instructions"), items)
            tools = chat_tools(body.get("tools"))
            continued = continues_final(items)
            text = server.tokenizer.render_chat(
                messages,
                add_generation_prompt=not continued,
                continue_final_message=continued,
                tools=tools,
                **(body.get("chat_template_kwargs") or {}),
            )
        except InputError as exc:
            raise errors.invalid_value(exc.message, exc.param) from None
        except TemplateError as exc:
            raise errors.bad_request(str(exc)) from None
        # vLLM 0.32 adds the tokenizer's special tokens to a Responses prompt (build_tok_params)
        prompt = server.tokenizer.encode(text, add_special_tokens=True)
        requested = body.get("max_output_tokens")
        max_tokens = self._fit(len(prompt), requested)
        stream = body.get("stream")
        fault = body.get("sim_fault")
        return GenerationRequest(
            kind="chat",
            model=body.get("model"),
            prompt_ids=tuple(prompt),
            max_tokens=max_tokens,
            stream=bool(stream),
            seed=body.get("seed") if isinstance(body.get("seed"), int) else None,
            sim_fault=fault if isinstance(fault, str) else "",
        )

    def _fit(self, prompt: int, requested: object) -> int:
        """The output budget (vLLM 0.32 `TokenizeParams`, `_validate_generator_input`,
        `get_max_tokens`). Raises SimHTTPError 400."""
        limit = self.server.max_model_len
        if requested is not None and (
            not isinstance(requested, int) or isinstance(requested, bool)
        ):
            raise errors.validation_error(
                "int_parsing",
                "body.max_output_tokens",
                "Input should be a valid integer",
                requested,
            )
        if requested is not None and requested > limit:
            raise errors.invalid_value(
                f"max_output_tokens={requested} cannot be greater than max_model_len={limit}. "
                "Please request fewer output tokens.",
                "max_output_tokens",
                requested,
            )
        if prompt > limit:
            raise errors.invalid_value(
                f"This model's maximum context length is {limit} tokens. However, your prompt "
                f"contains {prompt} input tokens, which exceeds this limit even without any "
                "output tokens. Please reduce the length of the input prompt.",
                "input_tokens",
                prompt,
            )
        if prompt >= limit:
            raise errors.bad_request(
                f"The engine prompt length {prompt} exceeds the max_model_len {limit}. "
                "Please reduce prompt.",
                "input",
            )
        room = limit - prompt
        return room if requested is None else min(requested, room)

    async def _stream(self, request: SimRequest, state: RequestState, response: Response) -> Answer:
        stream = EventStream(request, SSE_HEADERS)
        await stream.start()
        events = Events()
        await stream.write(events.next("response.created", response=response.initial()))
        await stream.write(events.next("response.in_progress", response=response.initial()))
        message = f"msg_{secrets.token_hex(16)}"
        opened = False
        die_after = state.fault.die_after
        try:
            async for start, end in state.updates():
                if die_after is not None and end >= die_after:
                    drop_connection(request)  # the engine process died mid-stream
                    return stream
                delta = "".join(state.pieces[start:end])
                if not delta:
                    continue  # vLLM sends no event for a step without text
                if not opened:
                    opened = True
                    await stream.write(response.open(events, message))
                await stream.write(response.delta(events, message, delta))
        except SimHTTPError as error:
            await stream.write(b"data: " + error.json_bytes() + b"\n\n")
            await stream.end()
            return stream
        except ConnectionResetError:
            return stream
        if opened:
            await stream.write(response.close(events, message))
        response.streamed = True
        await stream.write(events.next("response.completed", response=response.final(message)))
        await stream.end()
        return stream


class Events:
    """A stream's events in vLLM's framing, numbered from 0 (`sequence_number`)."""

    def __init__(self) -> None:
        self.sequence = 0

    def next(self, kind: str, **fields: Any) -> bytes:
        event = {**fields, "sequence_number": self.sequence, "type": kind}
        self.sequence += 1
        return f"event: {kind}\ndata: ".encode() + dumps(event) + b"\n\n"


class Response:
    """The response object of one request, as vLLM 0.32's `ResponsesResponse.from_request`."""

    def __init__(self, body: dict[str, Any], state: RequestState, model: str) -> None:
        self.body = body
        self.state = state
        self.model = model
        self.id = body.get("request_id") or f"resp_{secrets.token_hex(16)}"
        self.created = int(time.time())
        self.streamed = False

    def text(self) -> str:
        return "".join(self.state.pieces)

    def initial(self) -> dict[str, Any]:
        return self._object([], "in_progress", None)

    def final(self, message_id: str | None = None) -> dict[str, Any]:
        """The finished response: `incomplete` when the output budget ended it. A stream's
        output is what it sent (no message without text); a whole answer always has one."""
        text = self.text()
        status = "incomplete" if self.state.finish_reason == "length" else "completed"
        output: list[dict[str, Any]] = []
        if text or not self.streamed:
            output.append(_message(message_id or f"msg_{secrets.token_hex(16)}", text, "completed"))
        return self._object(output, status, self._usage())

    def open(self, events: Events, item_id: str) -> bytes:
        return events.next(
            "response.output_item.added",
            item=_message(item_id, None, "in_progress"),
            output_index=0,
        ) + events.next(
            "response.content_part.added",
            content_index=0,
            item_id=item_id,
            output_index=0,
            part=_text_part("", logprobs=[]),
        )

    def delta(self, events: Events, item_id: str, delta: str) -> bytes:
        return events.next(
            "response.output_text.delta",
            content_index=0,
            delta=delta,
            item_id=item_id,
            logprobs=[],
            output_index=0,
        )

    def close(self, events: Events, item_id: str) -> bytes:
        text = self.text()
        return (
            events.next(
                "response.output_text.done",
                content_index=0,
                item_id=item_id,
                logprobs=[],
                output_index=0,
                text=text,
            )
            + events.next(
                "response.content_part.done",
                content_index=0,
                item_id=item_id,
                output_index=0,
                part=_text_part(text),
            )
            + events.next(
                "response.output_item.done",
                item=_message(item_id, text, "completed"),
                output_index=0,
            )
        )

    def _usage(self) -> dict[str, Any]:
        prompt, output = self.state.seq.prompt_tokens, len(self.state.token_ids)
        return {
            "input_tokens": prompt,
            "input_tokens_details": {
                "cached_tokens": self.state.cached_tokens,
                "cache_write_tokens": 0,
                "input_tokens_per_turn": [prompt],
                "cached_tokens_per_turn": [self.state.cached_tokens],
            },
            "output_tokens": output,
            "output_tokens_details": {
                "reasoning_tokens": 0,
                "tool_output_tokens": 0,
                "output_tokens_per_turn": [output],
                "tool_output_tokens_per_turn": [0],
            },
            "total_tokens": prompt + output,
        }

    def _object(
        self, output: list[dict[str, Any]], status: str, usage: dict[str, Any] | None
    ) -> dict[str, Any]:
        body = self.body
        tools = body.get("tools") or []
        choice = body.get("tool_choice", "auto")
        if not tools and choice in ("auto", "none"):
            choice = "none"  # vLLM 0.32 `check_tool_usage`
        temperature = body.get("temperature")
        top_p = body.get("top_p")
        return {
            "id": self.id,
            "created_at": self.created,
            "incomplete_details": {"reason": "max_output_tokens"}
            if status == "incomplete"
            else None,
            "instructions": body.get("instructions"),
            "metadata": body.get("metadata"),
            "model": self.model,
            "object": "response",
            "output": output,
            "parallel_tool_calls": body.get("parallel_tool_calls", True),
            "temperature": 1.0 if temperature is None else temperature,
            "tool_choice": choice,
            "tools": tools,
            "top_p": 1.0 if top_p is None else top_p,
            "background": False,
            "max_output_tokens": self.state.request.max_tokens,
            "max_tool_calls": body.get("max_tool_calls"),
            "previous_response_id": None,
            "prompt": None,
            "reasoning": body.get("reasoning"),
            "service_tier": body.get("service_tier", "auto"),
            "status": status,
            "text": body.get("text"),
            "top_logprobs": None,
            "truncation": body.get("truncation") or "disabled",
            "usage": usage,
            "user": body.get("user"),
            "presence_penalty": body.get("presence_penalty") or 0.0,
            "frequency_penalty": body.get("frequency_penalty") or 0.0,
            "kv_transfer_params": None,
            "ec_transfer_params": None,
            "input_messages": None,
            "output_messages": None,
        }


def _message(item_id: str, text: str | None, status: str) -> dict[str, Any]:
    """An assistant message item (its one text part, none while it opens or without text)."""
    content = [_text_part(text)] if text else []
    return {
        "id": item_id,
        "content": content,
        "role": "assistant",
        "status": status,
        "type": "message",
        "phase": None,
    }


def _text_part(text: str, logprobs: list[Any] | None = None) -> dict[str, Any]:
    return {"annotations": [], "text": text, "type": "output_text", "logprobs": logprobs}
