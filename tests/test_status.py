"""The Status JSON contract: every key of the snapshot tree with its JSON type, for a live
snapshot and for the recorded example (tests/data/status_example.json) the TUI tests use."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from llmd.config import Config, EngineConfig
from llmd.engine.histograms import EngineHistogram
from llmd.engine.metrics import EngineSample
from llmd.gpu.nvml import GpuDevice, GpuReading
from llmd.inflight import Exchange
from llmd.releases.deploy_events import DeployPhase, DeployPlan, DeployState, Strategy
from llmd.supervisor.state import EnginePhase, EngineState
from tests.support.exchanges import finished_exchange
from tests.support.state import daemon_state

EXAMPLE = Path(__file__).parent / "data" / "status_example.json"
NUM = (int, float)
OPT_NUM = (int, float, type(None))
OPT_INT = (int, type(None))
OPT_STR = (str, type(None))
PERCENTILES = {"p50": OPT_NUM, "p95": OPT_NUM, "p99": OPT_NUM, "count": int}
LATENCY = {"queue_wait": PERCENTILES, "ttft": PERCENTILES, "e2e": PERCENTILES}
PHASE = {"mean_s": OPT_NUM, "p50_s": OPT_NUM, "p95_s": OPT_NUM, "count": int}
# The engine's side of latency (its own histograms and counters over its last minute).
ENGINE_LATENCY = {
    "window_s": NUM, "queue": PHASE, "prefill": PHASE, "decode": PHASE, "inter_token": PHASE,
    "prefill_share": OPT_NUM, "preemptions_per_s": OPT_NUM, "preemptions": OPT_INT,
    "prefix_cache_hit_ratio": OPT_NUM, "prefix_cache_hit_ratio_total": OPT_NUM,
}  # fmt: skip
# One backend (an engine llmd supervises, or an upstream): `engine` and each of `engines`.
ENGINE = {
    "state": str, "pid": OPT_INT, "model": str, "version": str, "max_model_len": OPT_INT,
    "uptime_s": OPT_NUM, "restarts": int, "last_exit_reason": OPT_STR,
    "last_exit_detail": OPT_STR, "exits_by_reason": {str: int}, "running": OPT_INT,
    "waiting": OPT_INT, "metrics_age_s": OPT_NUM,
    "diagnosis": [{"check": str, "severity": str, "message": str, "hint": str, "evidence": str}],
    "name": str, "kind": str, "gpus": [str],
    "release": OPT_STR, "release_note": OPT_STR, "kv_usage": OPT_NUM,
    "kv_capacity_tokens": OPT_INT, "in_flight": int,
    "draining": bool, "url": OPT_STR, "breaker": OPT_STR,
    "latency": (ENGINE_LATENCY, None),
}  # fmt: skip
# The contract. Fields may be added (with the TUI and README); never renamed or removed.
SCHEMA: dict[str, Any] = {
    "llmd_version": str,
    "taken_at": NUM,
    "listen": str,
    "draining": bool,
    "in_flight": int,
    "queued": int,
    "engine": ENGINE,
    "kv_cache": {
        "usage": OPT_NUM, "capacity_tokens": OPT_INT, "block_size": OPT_INT, "num_blocks": OPT_INT,
    },
    "gpus": {
        "devices": [{
            "index": int, "name": str, "utilization": OPT_NUM, "memory_used_bytes": OPT_INT,
            "memory_total_bytes": OPT_INT, "temperature_c": OPT_NUM, "power_w": OPT_NUM,
        }],
        "reason": OPT_STR,
    },
    "queues": [{"name": str, "depth": int, "oldest_wait_s": OPT_NUM}],
    "tenants": [{
        "name": str, "in_flight": int, "queued": int, "max_in_flight": OPT_INT,
        "max_queued": OPT_INT, "kv_tokens": int, "max_kv_tokens": OPT_INT,
        "budgets": [{"name": str, "limit": int, "remaining": int, "reset_s": NUM}],
    }],
    "sequences": [{
        "id": str, "tenant": str, "request_class": str, "phase": str, "stream": bool,
        "prompt_tokens": OPT_INT, "output_tokens": int, "age_s": NUM, "ttft_s": OPT_NUM,
        "tokens_per_s": OPT_NUM, "model": OPT_STR, "backend": OPT_STR, "endpoint": OPT_STR,
    }],
    "latency": {"last_1m": LATENCY, "last_5m": LATENCY},
    "throughput": {
        "requests_per_s": NUM, "prompt_tokens_per_s": NUM, "output_tokens_per_s": NUM,
        "engine_prompt_tokens_per_s": OPT_NUM, "engine_generation_tokens_per_s": OPT_NUM,
    },
    "counts": {
        "requests": int, "answered": int, "rejections": {str: int},
        "cancellations": {"queued": int, "prefill": int, "decode": int},
        "aborted": {str: int}, "errors": {str: int}, "timeouts": int,
    },
    "started_at": OPT_NUM,
    "events": [{"at": NUM, "level": str, "event": str, "message": str}],
    "engines": [ENGINE],
    "models": [{"name": str, "backends": [str], "available": bool}],
    "guard": {
        "level": int, "name": str, "reason": str, "since_s": NUM, "mode": str,
        "classes": [{"name": str, "p95_s": OPT_NUM, "samples": int, "budget_s": OPT_NUM}],
    },
    "deploys": [{
        "deploy": str, "engine": str, "strategy": str, "old": str, "new": str, "phase": str,
        "step": OPT_INT, "steps": [int], "share": int, "verdict": (dict, type(None)),
        "reason": OPT_STR,
    }],
    "endpoints": [{
        "name": str, "in_flight": int, "queued": int, "requests": int, "answered": int,
        "rejected": int, "cancelled": int, "aborted": int, "errors": int, "requests_per_s": NUM,
    }],
    "device_hold": ({
        "groups": [[str]], "bound_ms": NUM, "held": [str], "reasons": [str], "holds": int,
        "batch_seats": int, "limited": [str], "limit_reasons": [str],
    }, None),
}  # fmt: skip


def mismatches(value: Any, schema: Any, path: str = "$") -> list[str]:
    """Where `value` (decoded JSON) departs from `schema`; empty when it conforms. A schema
    `(OBJECT, None)` is that object or null."""
    if isinstance(schema, tuple) and len(schema) == 2 and isinstance(schema[0], dict):
        return [] if value is None else mismatches(value, schema[0], path)
    if isinstance(schema, dict) and set(schema) == {str}:
        if not isinstance(value, dict):
            return [f"{path}: expected an object"]
        return [p for k, v in value.items() for p in mismatches(v, schema[str], f"{path}.{k}")]
    if isinstance(schema, dict):
        if not isinstance(value, dict):
            return [f"{path}: expected an object"]
        if set(value) != set(schema):
            return [f"{path}: keys {sorted(set(value) ^ set(schema))} differ"]
        return [p for k in schema for p in mismatches(value[k], schema[k], f"{path}.{k}")]
    if isinstance(schema, list):
        if not isinstance(value, list):
            return [f"{path}: expected a list"]
        return [
            p for i, item in enumerate(value) for p in mismatches(item, schema[0], f"{path}[{i}]")
        ]
    types = schema if isinstance(schema, tuple) else (schema,)
    if isinstance(value, bool) and bool not in types:
        return [f"{path}: {value!r} is a bool"]
    return [] if isinstance(value, types) else [f"{path}: {value!r} is not {types}"]


def busy_snapshot() -> dict[str, Any]:
    """The JSON of a snapshot with every section filled: engine, GPU, sequences, history."""
    ctx = daemon_state(
        Config(engine=EngineConfig(model="tiny")),
        EngineState(phase=EnginePhase.SERVING, exits_by_reason={"oom_killed": 1}),
    )
    ctx.observer.engine_samples["main"] = EngineSample(0.0, 3, 1, 0.4, 100, 16, 10.0, 20.0)
    for at, count in ((0.0, 1.0), (30.0, 5.0)):
        histogram = EngineHistogram(((0.1, count), (math.inf, count)), count * 0.05, count)
        sample = EngineSample(at, prefill_time=histogram, preemptions_total=count)
        ctx.observer.engine_window("main").add(sample)
    ctx.observer.gpus = GpuReading((GpuDevice(0, "H100", 0.9, 1, 2, 60.0, None),), None)
    ctx.observer.finished(finished_exchange())
    ctx.observer.rejected("r", 429, "queue_full", started_at=0.0)
    for phase in ("queued", "prefill", "decode"):
        exchange = Exchange(phase, stream=True, model="tiny")
        exchange.endpoint = "embeddings" if phase == "queued" else "chat"
        if phase != "queued":
            exchange.admitted_at = exchange.started_at
            exchange.backend = "main"
        if phase == "decode":
            exchange.first_byte_at = exchange.started_at
        ctx.inflight.add(exchange)
    plan = DeployPlan("d1", "main", "r1", "r2", Strategy.REPLACE)
    ctx.deploys["main"] = DeployState(plan, DeployPhase.SMOKING_NEW).as_snapshot()
    return json.loads(json.dumps(ctx.snapshot().to_dict()))


def test_a_live_snapshot_matches_the_schema() -> None:
    """Every section of a busy snapshot has exactly the contracted keys and JSON types."""
    status = busy_snapshot()
    assert mismatches(status, SCHEMA) == []
    assert [s["phase"] for s in status["sequences"]] == ["queued", "prefill", "decode"]
    assert [s["backend"] for s in status["sequences"]] == [None, "main", "main"]
    assert status["counts"]["rejections"] == {"queue_full": 1}
    assert [s["endpoint"] for s in status["sequences"]] == ["embeddings", "chat", "chat"]
    (engine,) = status["engines"]
    assert engine == status["engine"] and engine["name"] == "main" and engine["in_flight"] == 2
    assert engine["kv_usage"] == 0.4 and engine["kind"] == "engine"
    latency = engine["latency"]
    assert latency["prefill"]["count"] == 4 and latency["preemptions_per_s"] == round(4 / 30, 3)
    assert status["models"] == [{"name": "tiny", "backends": ["main"], "available": True}]


def test_an_idle_snapshot_matches_the_schema() -> None:
    """Before any engine reading or request, unknown figures are null, not missing."""
    ctx = daemon_state(Config(engine=EngineConfig(model="tiny")))
    status = json.loads(json.dumps(ctx.snapshot().to_dict()))
    assert mismatches(status, SCHEMA) == []
    assert status["kv_cache"]["usage"] is None and status["sequences"] == []


def test_the_recorded_example_matches_the_schema() -> None:
    """tests/data/status_example.json (scripts/record_status_example.py) is current, taken
    under load with active sequences and requests to four endpoints."""
    status = json.loads(EXAMPLE.read_text())
    assert mismatches(status, SCHEMA) == []
    assert len(status["sequences"]) >= 10 and status["engine"]["state"] == "serving"
    names = [entry["name"] for entry in status["endpoints"]]
    assert names == ["chat", "completions", "tokenize", "embeddings"]
