"""Admission's view of each backend's load, from the telemetry scraper's reads of its /metrics."""

from __future__ import annotations

import time

from llmd.admission.control import Admission
from llmd.config import Config, EngineConfig
from llmd.engine.metrics import parse_engine_metrics
from llmd.engine.sim.metrics import SimMetrics
from llmd.supervisor.state import EngineState


def test_engine_sample_becomes_the_gates_load() -> None:
    """Running, waiting (after two reads in a row), KV usage and capacity reach the gate."""
    admission = Admission(Config(engine=EngineConfig(model="m")), {"main": EngineState()})
    metrics = SimMetrics("tiny", block_size=16, num_gpu_blocks=64, max_model_len=256)
    metrics.running.set(3)
    metrics.waiting.set(2)
    metrics.kv_usage.set(0.25)
    sample = parse_engine_metrics(metrics.render().decode(), time.monotonic())
    admission.engine_sampled("main", sample)
    admission.engine_sampled("main", sample)
    load = admission.capacity.gate("main").load
    assert load is not None
    assert (load.running, load.waiting, load.kv_usage, load.kv_tokens) == (3, 2, 0.25, 1024)


def test_no_sample_means_unknown_load() -> None:
    """A failed read (or an engine not serving) leaves only llmd's own accounting."""
    admission = Admission(Config(engine=EngineConfig(model="m")), {"main": EngineState()})
    admission.engine_sampled("main", None)
    assert admission.capacity.gate("main").load is None
