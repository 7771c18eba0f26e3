"""The validate stage alone (llmd/proxy/validation.py), with no server and no relay: a live
request's body becomes a `Prepared` backend request, or is refused."""

from __future__ import annotations

import time

import pytest

from llmd.admission.classes import Priority
from llmd.config import Config, EngineConfig
from llmd.endpoints.table import ENDPOINTS, Endpoint
from llmd.errors import InvalidRequest
from llmd.inflight import Exchange
from llmd.proxy.intake import Arrival, Body
from llmd.proxy.validation import Prepared, Validation
from llmd.state import DaemonState
from tests.support.state import daemon_state

MODEL = "tiny"
TOKENIZE = next(endpoint for endpoint in ENDPOINTS if endpoint.name == "tokenize")


def stage(endpoint: Endpoint) -> tuple[Validation, DaemonState]:
    """The validate stage of `endpoint` in a daemon serving MODEL (no tokenizer loaded here)."""
    state = daemon_state(Config(engine=EngineConfig(model=MODEL)))
    return Validation(state, endpoint), state


async def test_a_tokenize_request_without_a_local_tokenizer_is_prepared_for_its_engine() -> None:
    """A tokenize request llmd cannot answer here is prepared for its engine: its bytes as they
    came, its class (from x-llmd-priority) on the exchange and the admission request, one seat
    of its model, and the body's parsed object dropped."""
    validation, state = stage(TOKENIZE)
    headers = [(b"x-llmd-priority", b"batch")]
    arrival = Arrival("r-1", time.monotonic(), headers, "/tokenize")
    raw = b'{"model":"tiny","prompt":"hi"}'
    body = Body(raw, {"model": MODEL, "prompt": "hi"}, stream=False)
    exchange = Exchange("r-1", stream=False, model=MODEL)
    tenant = state.admission.authenticate([])
    prepared = await validation.validate(arrival, exchange, tenant, body, MODEL)
    assert isinstance(prepared, Prepared)
    assert prepared.body == raw and prepared.priority_body == b"" and not prepared.stream
    assert prepared.request.cls is Priority.BATCH and exchange.request_class == "batch"
    assert prepared.request.model == MODEL and prepared.request.cost.seats == 1
    assert body.payload == {} and body.raw == b""


async def test_a_class_header_naming_no_class_is_refused_at_validation() -> None:
    """x-llmd-priority naming no class: 400 invalid_request_error naming the header, before
    any prompt is read."""
    validation, state = stage(TOKENIZE)
    arrival = Arrival("r-2", time.monotonic(), [(b"x-llmd-priority", b"urgent")], "/tokenize")
    body = Body(b"{}", {"model": MODEL}, stream=False)
    exchange = Exchange("r-2", stream=False, model=MODEL)
    with pytest.raises(InvalidRequest) as refused:
        await validation.validate(arrival, exchange, state.admission.authenticate([]), body, MODEL)
    assert refused.value.param == "x-llmd-priority" and body.payload == {"model": MODEL}
