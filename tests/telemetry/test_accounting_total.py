"""The accounting is total: a set of requests ending every way a request can end, through a
real `llmd serve` on the simulator, lands each request in exactly one status count with the
label that says how it ended, in `llmd_requests_total{outcome, code}`, in `llmd status` and in
its log line alike, and the status counts add up to the requests."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.accounting import log_lines, samples
from tests.support.llmd_process import LlmdProcess
from tests.support.model import ensure_tiny_model
from tests.support.sim_process import sim_config
from tests.support.streams import SLOW, STREAM, Stream
from tests.support.waiting import wait_for

CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 5}
LONG = {**STREAM, "max_tokens": 1000}  # about 20 s at SLOW: ended by the test, never done
COUNT_KEYS = ("rejections", "cancellations", "aborted", "errors")


@pytest.fixture(scope="module")
def llmd() -> Iterator[LlmdProcess]:
    """llmd on the simulator at SLOW steps: a long stream lasts until the test ends it."""
    with LlmdProcess.running(sim_config(ensure_tiny_model(), SLOW), "llmd-acct-", 30) as process:
        yield process


def post(llmd: LlmdProcess, request_id: str, body: Any, path: str = "chat/completions") -> int:
    """POST `body` (JSON, or raw bytes) with `request_id`; the answer's status."""
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {"x-request-id": request_id, "content-type": "application/json"}
    url = f"{llmd.base_url}/v1/{path}"
    return httpx.post(url, content=content, headers=headers, timeout=30).status_code


def started_stream(llmd: LlmdProcess, request_id: str) -> Stream:
    """A long stream that has its first event."""
    stream = Stream(llmd, request_id, LONG)
    stream.start()
    assert stream.first.wait(15)
    return stream


def client_leaves_mid_stream(llmd: LlmdProcess, request_id: str) -> None:
    """A stream whose client closes its connection after the first event."""
    with httpx.stream(
        "POST", llmd.base_url + "/v1/completions", json=LONG,
        headers={"x-request-id": request_id}, timeout=30,
    ) as response:  # fmt: skip
        next(response.iter_lines())


def finished_line(llmd: LlmdProcess, request_id: str) -> dict[str, Any] | None:
    lines = [r for r in log_lines(llmd, request_id) if r["event"] == "request_finished"]
    return lines[0] if lines else None


def by_outcome(metrics: dict[Any, float]) -> dict[tuple[str, str], float]:
    """llmd_requests_total summed by (outcome, code)."""
    sums: dict[tuple[str, str], float] = {}
    for (name, labels), value in metrics.items():
        if name == "llmd_requests_total":
            label = dict(labels)
            key = (label["outcome"], label["code"])
            sums[key] = sums.get(key, 0.0) + value
    return sums


def status_counts(counts: dict[str, Any]) -> dict[tuple[str, str], int]:
    """The status counts as {(outcome, label): n}; the answered as ("ok", "")."""
    named = {"rejections": "rejected", "cancellations": "cancelled", "aborted": "aborted",
             "errors": "error"}  # fmt: skip
    flat = {("ok", ""): counts["answered"]}
    for key in COUNT_KEYS:
        flat.update({(named[key], label): n for label, n in counts[key].items()})
    return flat


def test_every_ending_lands_in_exactly_one_count_with_its_label(llmd: LlmdProcess) -> None:
    """Answered (streamed and not), rejected by llmd (bad JSON, unknown model) and by the
    engine (temperature -1), cancelled by the client, aborted by an operator cancel and by a
    drain deadline, failed in the engine: each in one count, labelled with its code (phase for
    a cancellation), in the metrics, the status and the log line; the counts sum to the
    requests."""
    run = uuid.uuid4().hex[:8]
    before_metrics, before = samples(llmd), llmd.admin_status()["counts"]
    expected: dict[str, tuple[str, str]] = {}

    def rid(name: str, outcome: str, label: str) -> str:
        request_id = f"{name}-{run}"
        expected[request_id] = (outcome, label)
        return request_id

    assert post(llmd, rid("ok", "ok", ""), CHAT) == 200
    assert post(llmd, rid("ok-stream", "ok", ""), {**CHAT, "stream": True}) == 200
    assert post(llmd, rid("bad-json", "rejected", "invalid_request"), b"{nope") == 400
    unknown = {**CHAT, "model": "nope"}
    assert post(llmd, rid("unknown-model", "rejected", "model_not_found"), unknown) == 404
    refused = {**CHAT, "temperature": -1}
    assert post(llmd, rid("temperature", "rejected", "invalid_request"), refused) == 400
    failing = {**CHAT, "sim_fault": "error:500"}
    assert post(llmd, rid("engine-500", "error", "engine_error"), failing) == 502
    client_leaves_mid_stream(llmd, rid("client-left", "cancelled", "decode"))

    cancelled = started_stream(llmd, rid("operator", "aborted", "cancelled"))
    with llmd.admin() as admin:
        assert admin.post(f"http://llmd/requests/operator-{run}/cancel").status_code == 200
    cancelled.join(30)
    assert cancelled.last_event()["error"]["code"] == "cancelled"

    drained = started_stream(llmd, rid("drain", "aborted", "draining"))
    with llmd.admin() as admin:
        assert admin.post("http://llmd/drain", json={"deadline_s": 0.2}).status_code == 200
        drained.join(30)
        assert admin.post("http://llmd/resume").status_code == 200
    assert drained.last_event()["error"]["code"] == "draining"

    assert wait_for(lambda: all(finished_line(llmd, r) for r in expected), timeout_s=20)
    for request_id, (outcome, label) in expected.items():
        line = finished_line(llmd, request_id)
        assert line is not None
        said = line.get("phase") if outcome == "cancelled" else line.get("code", "")
        assert (line["outcome"], said) == (outcome, label), request_id

    after_metrics, after = samples(llmd), llmd.admin_status()["counts"]
    wanted: dict[tuple[str, str], int] = {}
    for outcome, label in expected.values():
        wanted[(outcome, label)] = wanted.get((outcome, label), 0) + 1
    old, new = status_counts(before), status_counts(after)
    moved = {k: new[k] - old.get(k, 0) for k in new if new[k] != old.get(k, 0)}
    assert moved == wanted
    assert after["requests"] - before["requests"] == len(expected)
    total = after["answered"] + sum(sum(after[key].values()) for key in COUNT_KEYS)
    assert total == after["requests"]
    # The metric's code of a cancellation is empty (its phase is llmd_cancellations_total's).
    wanted_series: dict[tuple[str, str], int] = {}
    for (outcome, label), n in wanted.items():
        key = (outcome, "" if outcome == "cancelled" else label)
        wanted_series[key] = wanted_series.get(key, 0) + n
    metric_old, metric_new = by_outcome(before_metrics), by_outcome(after_metrics)
    series_moved = {k: v - metric_old.get(k, 0) for k, v in metric_new.items()}
    assert {k: v for k, v in series_moved.items() if v} == wanted_series
