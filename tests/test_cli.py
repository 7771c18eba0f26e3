"""`llmd status` human output: a compact summary of the recorded snapshot."""

from __future__ import annotations

import json
from pathlib import Path

from llmd.cli import format_status

EXAMPLE = Path(__file__).parent / "data" / "status_example.json"


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
