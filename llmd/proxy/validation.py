"""The validate stage: a live request's body made a `Prepared` backend request (its class,
deadline, counted prompt, cost, prefix key and bytes to send), or the answer llmd gives here
(tokenize, detokenize, a count); the model's validator (llmd/validation) reads the prompt.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from llmd.admission.classes import Priority
from llmd.admission.requests import AdmissionRequest, read_deadline
from llmd.admission.slo import CAPPED_HEADER, SloGuard
from llmd.admission.tenants import Tenant
from llmd.endpoints.dialects import OPENAI
from llmd.endpoints.stream_usage import ask_usage, needs_usage
from llmd.endpoints.table import Answer, BodyKind, Endpoint
from llmd.errors import EngineUnavailable
from llmd.inflight import Exchange
from llmd.proxy.intake import Arrival, Body
from llmd.routing.canary import conversation_key
from llmd.routing.prefix import prefix_key
from llmd.state import DaemonState
from llmd.validation.validator import Validated

T = TypeVar("T")


@dataclasses.dataclass
class Prepared:
    """A request ready for a backend: the bytes to send (`priority_body`: with vLLM's
    `priority` field, for engines run with --scheduling-policy priority), whether it streams,
    what admission weighs and headers for the client's response (validation's notes).
    `drop` lets the bytes go (the relay has ended)."""

    body: bytes
    priority_body: bytes
    stream: bool
    request: AdmissionRequest
    response_headers: list[tuple[bytes, bytes]]
    content_type: str = "application/json"
    # The client's headers the engine is sent too (the dialect's `forward_headers`).
    passed_on: dict[str, str] = dataclasses.field(default_factory=dict)

    def drop(self) -> None:
        self.body = self.priority_body = b""

    def cap(self, guard: SloGuard) -> None:
        """Lower max_tokens in the bytes to send when the SLO guard caps the request's class
        now, saying so in the response header `x-llmd-max-tokens-capped`."""
        if self.content_type != "application/json":
            return  # a form (audio): no max_tokens to cap
        bodies, said = guard.cap_body(self.request.cls, [self.body, self.priority_body])
        if said is not None:
            self.body, self.priority_body = bodies
            self.response_headers.append((CAPPED_HEADER, said))


class Validation:
    """The validate stage of requests to `endpoint` (run by the relay, llmd/proxy/relay.py,
    once the request is live)."""

    def __init__(self, state: DaemonState, endpoint: Endpoint) -> None:
        self.state = state
        self.endpoint = endpoint

    async def validate(
        self, arrival: Arrival, exchange: Exchange, tenant: Tenant, body: Body, model: str
    ) -> Prepared | dict[str, Any]:
        """Class, deadline (from arrival), the endpoint's fields, prompt tokens (counted in
        the class's turn) and context (by its model's validator: tokenizer and context length;
        an endpoint that does not validate goes as it is), its cost (a request that fits no
        backend of its pool, or not its tenant's KV share, is refused) and its prefix key for
        admission; or, for a tokenizer request the local tokenizer answers, that answer. The
        body's object is dropped once the bytes to send are built. Raises ApiError (400)."""
        admission, endpoint = self.state.admission, self.endpoint
        cls = admission.classify(tenant, arrival.headers)
        arrival.request_class = exchange.request_class = cls.label
        admission.check_wake(model, cls)
        deadline = read_deadline(arrival.headers, arrival.at)
        fields = endpoint.read(body.payload)
        validator = self.state.validators.for_model(model)
        awake = functools.partial(admission.wait_awake, tenant, cls, model, deadline)
        if endpoint.answer is Answer.COUNT:  # the prompt's tokens, counted here
            check = endpoint.validate  # refused past the window
            count = functools.partial(
                validator.count, fields, int(cls), check=check, size=len(body.raw)
            )
            exchange.prompt_tokens = await self.counted(model, count, awake)
            assert endpoint.counted is not None
            return endpoint.counted(exchange.prompt_tokens)
        if endpoint.answer is not Answer.RELAY:
            here = {
                Answer.TOKENIZE: validator.tokenize,
                Answer.DETOKENIZE: validator.detokenize,
            }[endpoint.answer]
            answer = await here(fields, int(cls), size=len(body.raw))
            if answer is not None:
                exchange.prompt_tokens = answer.get("count")
                return answer
        if endpoint.validate:
            # Inputs the engine's answer counts need no count here when a bound shows they fit,
            # unless a token budget charges them as counted (llmd/admission/budgets.py).
            bounded = fields.usage_counts_input and not admission.budgets.holds(tenant.name)
            room = functools.partial(admission.budgets.output_room, tenant.name)
            checked = functools.partial(
                validator.check,
                fields, body.payload, body.raw, arrival.headers, int(cls), bounded=bounded,
                output_room=room,
            )  # fmt: skip
            valid = await self.counted(model, checked, awake)
            exchange.input_from_answer = not valid.exact
        else:
            counts = (0,) * max(1, len(fields.texts))
            valid = Validated(body.raw, counts, fields.output.max_tokens, 1, [], counted=False)
        openai_json = endpoint.dialect is OPENAI and endpoint.body is BodyKind.JSON
        if endpoint.streams and openai_json and body.stream:  # chat, completions
            valid = self._usage_asked(exchange, body.payload, valid, model)
        # `payload` carries validation's changes (edited in place).
        gates = admission.gates
        json_body = endpoint.body is BodyKind.JSON
        priority = json_body and bool(gates.priority_backends)
        priority_body = _with_priority(body.payload, cls) if priority else b""
        key = None  # the prefix's affinity: only among several backends (a pool of one has none)
        if gates.prefix_chars and len(admission.capacity.pool(model) or ()) > 1:
            key = prefix_key(fields.prompt, gates.prefix_chars)
        conversation = None
        if model in admission.capacity.splits:  # a canary: sticky per conversation
            conversation = exchange.conversation = conversation_key(fields.prompt)
        body.drop()
        if body.hold is not None:
            body.hold.resize(len(valid.body) + len(priority_body))
        exchange.prompt_tokens, exchange.max_tokens = valid.prompt_tokens, valid.max_tokens
        cost = endpoint.cost(fields, valid, validator.engine.max_model_len)
        exchange.input_tokens = cost.input_tokens
        gates.check_fits(cost, model)
        admission.check_share(tenant, cost, model)
        request = AdmissionRequest(
            tenant, cls, cost, deadline, model=model, affinity=key, conversation=conversation
        )
        return Prepared(
            valid.body,
            priority_body,
            body.stream,
            request,
            valid.response_headers,
            content_type=body.content_type,
            passed_on=_passed_on(arrival.headers, endpoint.dialect.forward_headers),
        )

    async def counted(
        self,
        model: str,
        count: Callable[[], Awaitable[T]],
        awake: Callable[[], Awaitable[None]],
    ) -> T:
        """`count()`, validation counting the prompt; when it could not (503: only the engine
        counts this prompt and cannot now) while every engine of `model`'s pool sleeps on
        demand or is being woken, wait in the queue for the wake (`awake`), as a request for
        an asleep model does, then count again. Raises what `count` and `awake` raise."""
        try:
            return await count()
        except EngineUnavailable:
            if self.state.admission.capacity.wake_s(model, time.monotonic()) is None:
                raise  # not asleep: the engine is down or busy, retry later
        await awake()
        return await count()

    def _usage_asked(
        self, exchange: Exchange, payload: dict[str, Any], valid: Validated, model: str
    ) -> Validated:
        """`valid` with its body asking the engine for the stream's usage when the client did
        not (its events cannot count its tokens: llmd/endpoints/stream_usage.py) and every
        backend of `model`'s pool is an engine whose fingerprint llmd read (it is put back on
        the finish events the client gets); the exchange then keeps the usage event from the
        client. Else `valid` as it was: the stream is counted by its events."""
        if not needs_usage(payload) or not self.state.fleet.fingerprinted(model):
            return valid
        exchange.usage_hidden = True
        return dataclasses.replace(valid, body=ask_usage(payload, valid.body))


def _passed_on(headers: list[Any], names: tuple[bytes, ...]) -> dict[str, str]:
    """The request's ASGI `headers` named in `names`, for the engine (each value as sent)."""
    if not names:
        return {}
    return {n.decode(): v.decode("latin-1") for n, v in headers if n in names}


def _with_priority(payload: dict[str, Any], cls: Priority) -> bytes:
    """The body with vLLM's request field `priority` set to the class rank (lower runs first;
    used only when the engine runs with --scheduling-policy priority)."""
    return json.dumps({**payload, "priority": int(cls)}, separators=(",", ":")).encode()
