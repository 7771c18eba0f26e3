"""The intake: the stages a request passes as it arrives, before it is live (in the in-flight
registry): authenticate → take its class's turn → check availability → read → route. Each
is a small method with a typed result that raises an `ApiError` to refuse; the relay
(llmd/proxy/relay.py) answers the refusal at once and accounts it.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from starlette.types import Receive

from llmd.admission.bodies import BodyHold
from llmd.admission.classes import Priority
from llmd.admission.tenants import Tenant
from llmd.config import ANONYMOUS
from llmd.endpoints.audio import read_form
from llmd.endpoints.table import Answer, BodyKind, Endpoint, needs_of, serving
from llmd.errors import InvalidRequest, ModelNotFound, UnsupportedEndpoint
from llmd.proxy.body import (
    body_coding,
    check_content_type,
    check_length,
    parse_object,
    read_body,
    without_bom,
)
from llmd.state import DaemonState

# llmd's own request headers (x-llmd-priority, x-llmd-deadline-ms, x-llmd-context-policy), as
# ASGI names them (lower case).
CONTROL_PREFIX = b"x-llmd-"


@dataclasses.dataclass
class Arrival:
    """A request as it arrives: its id, when (monotonic s), its ASGI headers and path, and,
    once the stages know them, its tenant and class (what a refusal is accounted under)."""

    request_id: str
    at: float
    headers: list[Any]
    path: str
    tenant: str = ANONYMOUS
    request_class: str = Priority.NORMAL.label
    model: str | None = None


@dataclasses.dataclass
class Body:
    """The request body: its bytes, the parsed JSON object, whether it asks to stream, and its
    share of admission's body budget (None: not reserved). `drop` lets the bytes and the
    object go (once the backend request is built); `release` gives the share back."""

    raw: bytes
    payload: dict[str, Any]  # a multipart body's: its text fields (llmd/endpoints/audio.py)
    stream: bool
    hold: BodyHold | None = None
    content_type: str = "application/json"  # what the backend is sent it as

    def drop(self) -> None:
        self.raw, self.payload = b"", {}

    def release(self) -> None:
        if self.hold is not None:
            self.hold.release()


class Intake:
    """The arriving stages of requests to `endpoint`."""

    def __init__(self, state: DaemonState, endpoint: Endpoint) -> None:
        self.state = state
        self.endpoint = endpoint

    def authenticate(self, arrival: Arrival) -> Tenant:
        """The tenant of the request's API key. Raises InvalidApiKey (401)."""
        tenant = self.state.admission.authenticate(arrival.headers)
        arrival.tenant = tenant.name
        return tenant

    async def take_turn(self, tenant: Tenant, arrival: Arrival) -> None:
        """A batch request's turn in the batch lane (llmd/admission/lanes.py), before its body
        is read: a wave's requests let other classes' requests that arrive behind them go
        first through every stage. A class header that names no class passes here; validation
        refuses it."""
        admission = self.state.admission
        try:
            cls = admission.classify(tenant, arrival.headers)
        except InvalidRequest:
            return
        await admission.lane.turn(cls)

    def check_available(self) -> None:
        """Raises Draining (503 + Retry-After) when llmd admits nothing."""
        error = self.state.unavailable()
        if error is not None:
            raise error

    def hold_body(self, arrival: Arrival) -> BodyHold:
        """A share of admission's body budget, empty until the body's bytes arrive (`read`
        grows it), after refusing a declared Content-Length over `server.max_body_bytes`.
        Raises BodyTooLarge (413), QueueFull (429: the budget is past its limit)."""
        check_length(arrival.headers, self.state.config.server.max_body_bytes)
        return self.state.admission.hold_body()

    async def read(
        self, arrival: Arrival, receive: Receive, hold: BodyHold, *, whole: bool = False
    ) -> Body:
        """The whole body, decoded and parsed: `application/json`, or a multipart form for an
        entry that takes one (its text fields parsed, the upload kept as it came); in no
        content coding or gzip or deflate; its share of the body budget grown as its bytes
        arrive, then resized to what was read. `whole`: it came with its head (`read_body`).
        Raises UnsupportedMediaType (415), BodyTooLarge (413), QueueFull (429: the budget
        cannot grow), InvalidRequest (400), RequestTimeout (408: not all there within
        `server.read_timeout_s`), ClientGone."""
        multipart = self.endpoint.body is BodyKind.MULTIPART
        content_type = check_content_type(arrival.headers, multipart=multipart)
        coding = body_coding(arrival.headers)
        server, admission = self.state.config.server, self.state.admission
        raw = await read_body(
            receive,
            server.max_body_bytes,
            coding,
            server.read_timeout_s,
            taking=lambda size: admission.grow_body(hold, size),
            whole=whole,
        )
        hold.resize(len(raw))
        if multipart:  # the form's text fields; the upload stays in `raw`, sent as it came
            form = read_form(raw, content_type)
            stream = form.get("stream", "").strip().lower() == "true"
            return Body(raw, form, stream, hold, content_type.decode("latin-1"))
        payload = parse_object(raw)
        if not isinstance(payload.get("stream"), bool | None):
            raise InvalidRequest("'stream' must be a boolean", param="stream")
        stream = self.endpoint.streams and bool(payload.get("stream"))
        return Body(without_bom(raw), payload, stream=stream, hold=hold)

    async def route(self, arrival: Arrival, body: Body) -> str:
        """The model whose pool serves the request: its `model` (omitted: the one model llmd
        serves; a name no pool holds makes llmd read the engines' model lists again first, at
        most once a second: an adapter loaded at run time). Raises InvalidRequest (400: not a
        string, or omitted while llmd serves several), ModelNotFound (404: no backend serves
        it, as vLLM answers), EngineUnavailable (503 + Retry-After: no backend of the pool can
        take it now, unless a deploy holds one: then it queues)."""
        capacity = self.state.admission.capacity
        model = body.payload.get("model")
        served = capacity.models()
        if model is None and len(served) == 1:
            model = served[0]
        elif model is None:
            raise InvalidRequest(
                f"'model' is required: llmd serves {', '.join(served)}", param="model"
            )
        if not isinstance(model, str):
            raise InvalidRequest("'model' must be a string", param="model")
        if capacity.pool(model) is None and self.state.relisting is not None:
            await self.state.relisting.relist()
            served = capacity.models()
        if capacity.pool(model) is None:
            api = self.state.engine.api
            raise ModelNotFound(model, list(served), api.names_models_when_not_found)
        arrival.model = model
        self.check_kind(model, arrival.path)
        if self.endpoint.answer is Answer.COUNT:  # counted here: no backend needed to answer
            return model
        if not capacity.available(model, time.monotonic()) and not capacity.holding(model):
            raise self.state.pool_unavailable(model)
        return model

    def check_kind(self, model: str, path: str) -> None:
        """Refuse an endpoint that `model`'s engines do not serve (embeddings of a generate
        engine's model, chat of a pooling one's). Raises UnsupportedEndpoint (400) naming
        the models here that do."""
        fleet = self.state.fleet
        kinds = fleet.kinds_of(model)
        if serving(self.endpoint, kinds):
            return
        others = [
            m
            for m in self.state.admission.capacity.models()
            if serving(self.endpoint, fleet.kinds_of(m))
        ]
        kind = "/".join(sorted(kinds or ()))
        raise UnsupportedEndpoint(path, model, kind, others, needs_of(self.endpoint))


def check_control_headers(headers: list[Any]) -> None:
    """Refuse a request that sends one of llmd's control headers (`x-llmd-*`: priority,
    deadline, context policy) more than once: which value would count is anyone's guess, and
    a bad second value would go unseen. Raises InvalidRequest (400) naming the header."""
    seen: set[bytes] = set()
    for name, _ in headers:
        if name.startswith(CONTROL_PREFIX):
            if name in seen:
                shown = name.decode("latin-1")
                raise InvalidRequest(
                    f"header {shown} appears more than once; send it once", param=shown
                )
            seen.add(name)
