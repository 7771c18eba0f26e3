"""How a request ended: one outcome and one label per ending, the counts that add up to the
requests, and the observer's series (the TTFT of streamed answers only)."""

from __future__ import annotations

import dataclasses
import json

from llmd.errors import Draining, ModelNotFound, RequestCancelled
from llmd.inflight import Exchange
from llmd.telemetry.observer import Observer
from llmd.telemetry.outcomes import Outcome, Tallies, classify
from tests.support.exchanges import finished_exchange
from tests.support.log_capture import Captured


def endings() -> dict[str, tuple[Exchange, tuple[Outcome, str]]]:
    """An exchange for each way a request can end, with the outcome and label it must get."""
    ok = finished_exchange()
    rejected = finished_exchange(status=429, error_code="queue_full", backend=None)
    rejected.rejected = True
    by_engine = finished_exchange(status=400, error_code="invalid_request", ttft_s=None)
    by_engine.rejected = True
    queued_left = finished_exchange(client_gone=True, ttft_s=None)
    queued_left.admitted_at = None
    operator = finished_exchange(status=200)
    operator.abort_error = RequestCancelled("cancelled")
    drain = finished_exchange(status=503, ttft_s=None)
    drain.abort_error = Draining("deadline")
    stalled = finished_exchange(error_code="slow_consumer")
    failed = finished_exchange(status=502, error_code="engine_error", ttft_s=None)
    bug = finished_exchange(status=500, error_code=None, ttft_s=None)
    return {
        "ok": (ok, (Outcome.OK, "")),
        "rejected": (rejected, (Outcome.REJECTED, "queue_full")),
        "rejected by the engine": (by_engine, (Outcome.REJECTED, "invalid_request")),
        "left while queued": (queued_left, (Outcome.CANCELLED, "queued")),
        "left in decode": (finished_exchange(client_gone=True), (Outcome.CANCELLED, "decode")),
        "operator cancel": (operator, (Outcome.ABORTED, "cancelled")),
        "drain deadline": (drain, (Outcome.ABORTED, "draining")),
        "send timeout": (stalled, (Outcome.ABORTED, "slow_consumer")),
        "engine error": (failed, (Outcome.ERROR, "engine_error")),
        "status without a code": (bug, (Outcome.ERROR, "internal_error")),
    }


def test_each_ending_has_its_outcome_and_label() -> None:
    """Rejections and aborts by code, cancellations by phase, errors by code (a failure that
    carries none reads internal_error), an answered request by nothing."""
    found = {name: classify(exchange) for name, (exchange, _) in endings().items()}
    assert found == {name: wanted for name, (_, wanted) in endings().items()}


def test_the_counts_add_up_to_the_requests(captured_logs: Captured) -> None:
    """Every ending through the observer: each request in exactly one status count, and in
    llmd_requests_total under its outcome and code; the log line says the same."""
    observer = Observer()
    cases = endings()
    for exchange, _ in cases.values():
        observer.finished(exchange)
    counts = observer.as_snapshot().counts
    assert counts.requests == len(cases)
    parts = (counts.rejections, counts.cancellations, counts.aborted, counts.errors)
    assert counts.answered + sum(sum(part.values()) for part in parts) == counts.requests
    assert counts.aborted == {"cancelled": 1, "draining": 1, "slow_consumer": 1}
    assert counts.errors == {"engine_error": 1, "internal_error": 1}
    assert counts.rejections == {"queue_full": 1, "invalid_request": 1}
    samples = [
        s
        for family in observer.metrics.registry.collect()
        if family.name == "llmd_requests"
        for s in family.samples
        if s.name == "llmd_requests_total"
    ]
    assert sum(s.value for s in samples) == len(cases)
    aborted = {s.labels["code"]: s.value for s in samples if s.labels["outcome"] == "aborted"}
    assert aborted == {"cancelled": 1, "draining": 1, "slow_consumer": 1}
    logged = [(line["outcome"], line.get("code") or line.get("phase", "")) for line in
              captured_logs.lines()]  # fmt: skip
    assert logged == [(o.value, label) for _, (o, label) in cases.values()]


def test_tallies_count_each_outcome_under_its_label() -> None:
    """Tallies.add files an ending under its outcome's count and label."""
    tallies = Tallies()
    for outcome, label in [(Outcome.OK, ""), (Outcome.ABORTED, "draining")] * 2:
        tallies.add(outcome, label)
    assert (tallies.requests, tallies.answered, dict(tallies.aborted)) == (4, 2, {"draining": 2})


def test_an_unknown_model_is_labelled_by_its_name() -> None:
    """ModelNotFound's code and label are both model_not_found (not vLLM's number 404)."""
    error = ModelNotFound("nope", ["tiny"])
    assert (error.status, error.code, error.reason) == (404, "model_not_found", "model_not_found")
    assert json.loads(error.body())["error"]["code"] == "model_not_found"


def test_time_to_first_token_counts_streamed_answers_only() -> None:
    """A non-streamed answer's first byte is its last: it stays out of the TTFT histogram and
    window, a streamed one lands there."""
    observer = Observer(log_requests="off")
    plain = dataclasses.replace(finished_exchange(ttft_s=0.4), stream=False)
    observer.finished(plain)
    value = observer.metrics.registry.get_sample_value
    labels = {"tenant": "anonymous", "class": "normal", "input_length": "le512", "model": "tiny",
              "endpoint": "chat", "release": ""}  # fmt: skip
    assert value("llmd_time_to_first_token_seconds_count", labels) is None
    assert observer.windows.ttft.percentiles(60).count == 0
    observer.finished(finished_exchange(ttft_s=0.4))
    assert value("llmd_time_to_first_token_seconds_count", labels) == 1
    assert observer.windows.ttft.percentiles(60).count == 1
