"""Accounting by endpoint: the `endpoint` label of the request counter, the latency histograms
and the prompt tokens, the log line's field, and the Status's `endpoints` (live and ended
requests of each endpoint)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from llmd.config import Config, EngineConfig
from llmd.endpoints.table import ENDPOINTS, label_of
from llmd.inflight import Exchange
from llmd.status import EndpointStatus
from llmd.telemetry.metrics import OTHER_ENDPOINT
from llmd.telemetry.observer import Observer
from tests.support.exchanges import finished_exchange
from tests.support.log_capture import Captured
from tests.support.state import daemon_state


def requests(
    observer: Observer,
    endpoint: str,
    outcome: str,
    status: str,
    code: str = "",
    model: str = "tiny",
) -> float:
    labels = {"tenant": "anonymous", "class": "normal", "status": status, "model": model,
              "endpoint": endpoint, "outcome": outcome, "code": code}  # fmt: skip
    return observer.metrics.registry.get_sample_value("llmd_requests_total", labels) or 0.0


def test_requests_latency_and_prompt_tokens_are_counted_by_endpoint(
    captured_logs: Captured,
) -> None:
    """Chat and embeddings of one model read apart in llmd_requests_total, the end-to-end
    histogram and llmd_prompt_tokens_total; each request's log line names its endpoint."""
    observer = Observer()
    observer.finished(finished_exchange(total_s=2.0, prompt_tokens=30))
    for _ in range(3):
        observer.finished(
            finished_exchange(endpoint="embeddings", total_s=0.01, ttft_s=None, prompt_tokens=8)
        )
    assert requests(observer, "chat", "ok", "200") == 1
    assert requests(observer, "embeddings", "ok", "200") == 3
    value = observer.metrics.registry.get_sample_value
    lengths = {
        "tenant": "anonymous",
        "class": "normal",
        "input_length": "le512",
        "model": "tiny",
        "release": "",
    }
    chat_e2e = value("llmd_e2e_request_latency_seconds_sum", {**lengths, "endpoint": "chat"})
    embed = {**lengths, "endpoint": "embeddings"}
    assert chat_e2e == pytest.approx(2.0)
    assert value("llmd_e2e_request_latency_seconds_count", embed) == 3
    assert value("llmd_e2e_request_latency_seconds_sum", embed) == pytest.approx(0.03)
    tokens = "llmd_prompt_tokens_total"
    assert value(tokens, {"tenant": "anonymous", "endpoint": "chat"}) == 30
    assert value(tokens, {"tenant": "anonymous", "endpoint": "embeddings"}) == 24
    assert [line["endpoint"] for line in captured_logs.lines()] == ["chat"] + ["embeddings"] * 3


def test_a_refusal_carries_its_endpoint_or_other(captured_logs: Captured) -> None:
    """A request refused at a known endpoint counts under its name; one refused before llmd
    knew its endpoint (the connection limit, on a path of no entry) under `other`."""
    observer = Observer()
    observer.rejected("a", 400, "invalid_request", 0.0, model="tiny", endpoint="rerank")
    observer.rejected("b", 503, "too_many_connections", 0.0)
    assert requests(observer, "rerank", "rejected", "400", "invalid_request") == 1
    assert requests(observer, "other", "rejected", "503", "too_many_connections", model="") == 1
    assert [line["endpoint"] for line in captured_logs.lines()] == ["rerank", "other"]


def test_the_endpoint_label_of_a_path() -> None:
    """Every path of the table maps to its entry's name; any other path to `other`."""
    for endpoint in ENDPOINTS:
        assert {label_of(path) for path in endpoint.paths} == {endpoint.name}
    assert label_of("/v1/nowhere") == label_of("/v1/models") == OTHER_ENDPOINT == "other"
    assert OTHER_ENDPOINT not in {endpoint.name for endpoint in ENDPOINTS}


def test_the_status_lists_live_and_ended_requests_by_endpoint() -> None:
    """`endpoints` has one entry per endpoint seen, first seen first: its live requests
    (relayed, queued) and its ended ones by outcome, adding up to `requests`."""
    ctx = daemon_state(
        Config(engine=EngineConfig(model="tiny")), observer=Observer(log_requests="off")
    )
    observer = ctx.observer
    observer.finished(finished_exchange())
    observer.finished(finished_exchange(status=502, error_code="engine_error"))
    observer.finished(finished_exchange(endpoint="embeddings", ttft_s=None))
    observer.finished(finished_exchange(endpoint="embeddings", client_gone=True, ttft_s=None))
    observer.rejected("r", 400, "context_length_exceeded", 0.0, endpoint="embeddings")
    relayed = Exchange("live", stream=False, endpoint="embeddings")
    relayed.admitted_at = relayed.started_at
    ctx.inflight.add(relayed)
    ctx.inflight.add(Exchange("queued", stream=False, endpoint="embeddings"))
    ctx.inflight.add(Exchange("tok", stream=False, endpoint="tokenize"))
    endpoints = ctx.snapshot().endpoints
    # Over the last minute, or since llmd started when that is less (here: under a second).
    assert [e.requests_per_s > 0 for e in endpoints] == [True, True, False]
    assert [dataclasses.replace(e, requests_per_s=0.0) for e in endpoints] == [
        EndpointStatus("chat", requests=2, answered=1, errors=1),
        EndpointStatus(
            "embeddings", in_flight=1, queued=1, requests=3, answered=1, rejected=1, cancelled=1
        ),
        EndpointStatus("tokenize", queued=1),
    ]


def test_the_readme_names_every_endpoint_label() -> None:
    """The README's metrics section names every `endpoint` label: the table's names and
    `other`."""
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    section = readme[readme.index("**Metrics.**") : readme.index("| series | type | labels |")]
    missing = [n for n in [e.name for e in ENDPOINTS] + ["other"] if f"`{n}`" not in section]
    assert missing == []
