"""`llmd status` human output: a compact summary of the recorded snapshot."""

from __future__ import annotations

import json
from pathlib import Path

from llmd.admin.status_text import format_status

EXAMPLE = Path(__file__).parents[1] / "data" / "status_example.json"


def test_the_summary_names_each_section() -> None:
    """One line each for the engine, load, GPU, queues, sequences, latency, throughput, counts."""
    text = format_status(json.loads(EXAMPLE.read_text()))
    labels = [line.split("  ")[0].split(" ")[0] for line in text.splitlines()]
    for label in (
        "engine", "load", "gpu", "queues", "sequences", "latency", "throughput", "counts",
    ):  # fmt: skip
        assert label in labels, text
    assert "KV " in text and "p50/p95/p99" in text and "no NVIDIA GPU" in text


def test_a_status_from_an_older_daemon_still_prints() -> None:
    """Only the engine section (llmd before the telemetry fields): the first six lines."""
    status = json.loads(EXAMPLE.read_text())
    old = {k: status[k] for k in ("llmd_version", "listen", "draining", "in_flight", "engine")}
    assert len(format_status(old).splitlines()) == 6


def test_the_diagnosis_of_a_failed_exit_is_summarised() -> None:
    """The first error finding of the engine's diagnosis follows the last exit, with its hint."""
    status = json.loads(EXAMPLE.read_text())
    status["engine"]["diagnosis"] = [
        {"check": "model_not_found", "severity": "error", "message": "the model could not be "
         "found or read", "hint": "set engine.model to a local model directory", "evidence": ""},
    ]  # fmt: skip
    lines = format_status(status).splitlines()
    assert lines[5] == (
        "diagnosis  the model could not be found or read; hint: set engine.model to a local "
        "model directory"
    )


def test_several_backends_get_a_row_each_and_each_model_one() -> None:
    """Two engines and an upstream: a `backend` row each (state, model, drain, GPUs or URL and
    breaker, load), a `model` row each with its pool and whether it is available."""
    status = json.loads(EXAMPLE.read_text())
    engine = status["engines"][0]
    upstream = {
        **engine, "name": "lab", "kind": "upstream", "state": "unreachable", "pid": None,
        "model": "big", "url": "http://10.0.0.5:8000", "breaker": "open", "in_flight": 0,
    }  # fmt: skip
    status["engines"] = [
        {**engine, "name": "pa", "gpus": ["0"]},
        {**engine, "name": "pb", "gpus": ["1"], "draining": True},
        upstream,
    ]
    status["models"] = [
        {"name": "tiny", "backends": ["pa", "pb"], "available": True},
        {"name": "big", "backends": ["lab"], "available": False},
    ]
    lines = format_status(status).splitlines()
    backends = [line for line in lines if line.startswith("backend ")]
    assert len(backends) == 3
    assert "pa   serving  model tiny" in backends[0] and "gpus 0" in backends[0]
    assert "pb   serving, drained  model tiny" in backends[1]
    llmd_row = next(line for line in lines if line.startswith("llmd "))
    assert llmd_row.endswith("draining no, drained: pb")
    assert "lab  unreachable" in backends[2] and "breaker open" in backends[2]
    models = [line for line in lines if line.startswith("model ")]
    assert models[-2:] == [
        "model      tiny  available  on pa, pb",
        "model      big  UNAVAILABLE  on lab",
    ]


def test_one_backend_adds_no_fleet_rows() -> None:
    """With one engine the summary is as it was: no backend or per-model rows."""
    text = format_status(json.loads(EXAMPLE.read_text()))
    lines = text.splitlines()
    assert not any(line.startswith("backend ") for line in lines)
    assert [line for line in lines if line.startswith("model ")] == [
        "model      tiny  max_model_len 1024"
    ]


def test_the_release_and_each_deploy_get_a_row() -> None:
    """The release each engine runs, and a deploy row with strategy, step, share, phase and
    reason: what an operator reads when a promoted engine did not boot its release."""
    status = json.loads(EXAMPLE.read_text())
    status["engines"][0]["release"] = "r2"
    status["deploys"] = [
        {
            "deploy": "deploy-r2-1", "engine": "main", "strategy": "canary", "old": "r1",
            "new": "r2", "phase": "adopting", "step": 3, "steps": [20, 50, 100], "share": 100,
            "verdict": None, "reason": "promoted, but engine main did not boot r2: exit 3",
        },
    ]  # fmt: skip
    lines = format_status(status).splitlines()
    assert "release    main r2" in lines
    assert (
        "deploy     main r1 -> r2  canary  step 3/3 share 100%  adopting: promoted, but engine "
        "main did not boot r2: exit 3"
    ) in lines


def test_each_endpoint_with_requests_gets_a_row() -> None:
    """A row per endpoint of the snapshot, in its order: live now, finished per second, ended
    since start and each way but answered that is not 0."""
    status = json.loads(EXAMPLE.read_text())
    rows = [line for line in format_status(status).splitlines() if line.startswith("endpoint")]
    assert rows == [
        "endpoint   chat         in flight 29  queued 11  2.9 req/s  requests 12 (answered 8, "
        "rejected 3, cancelled 1)",
        "endpoint   completions  in flight 0  queued 0  0.3 req/s  requests 1 (answered 1)",
        "endpoint   tokenize     in flight 0  queued 0  1.1 req/s  requests 4 (answered 4)",
        "endpoint   embeddings   in flight 0  queued 0  0.3 req/s  requests 1 (rejected 1)",
    ]


def test_the_engine_side_of_latency_gets_a_row() -> None:
    """An engine that reports its own latency gets an `engine 1m` row: queue, prefill, decode
    and inter-token mean/p95 in ms, prefill's share, preemptions and the prefix-cache hits."""
    status = json.loads(EXAMPLE.read_text())
    phase = {"mean_s": 0.1, "p50_s": 0.08, "p95_s": 0.25, "count": 12}
    status["engines"][0]["latency"] = {
        "window_s": 60.0, "queue": phase, "prefill": phase, "decode": phase,
        "inter_token": phase, "prefill_share": 0.2, "preemptions_per_s": 0.5, "preemptions": 9,
        "prefix_cache_hit_ratio": 0.75, "prefix_cache_hit_ratio_total": 0.5,
    }  # fmt: skip
    row = next(line for line in format_status(status).splitlines() if line.startswith("engine 1m"))
    assert "prefill 100/250" in row and "ITL 100/250 (mean/p95 ms)" in row
    assert "prefill share 20%" in row and "preemptions 0.5/s (9 since start)" in row
    assert "prefix cache hits 75% (since start 50%)" in row
