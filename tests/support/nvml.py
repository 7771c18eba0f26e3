"""pynvml replaced at its boundary: an object with its names, answering as a host with H100s."""

from __future__ import annotations

import types
from collections.abc import Mapping, Sequence
from typing import Any

from llmd.gpu.footprint import Footprints, GroupMemory

GIB = 1024**3


class NVMLError(Exception):
    pass


def fake_nvml(
    *,
    present: bool = True,
    devices: int = 2,
    power: bool = True,
    processes: Sequence[tuple[int, int]] = (),
) -> Any:
    """An object with pynvml's names, answering as a host with `devices` H100s would, each
    listing `processes` (pid, GPU memory used in bytes) as its compute processes; the list
    may be changed through the object's `processes`."""
    calls = {"init": 0}

    def init() -> None:
        calls["init"] += 1
        if not present:
            raise NVMLError("NVML Shared Library Not Found")

    def power_usage(handle: str) -> int:
        if not power:
            raise NVMLError("Not Supported")
        return 350_500

    listed = list(processes)
    return types.SimpleNamespace(
        calls=calls,
        processes=listed,
        nvmlDeviceGetComputeRunningProcesses=lambda h: [
            types.SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in listed
        ],
        NVMLError=NVMLError,
        NVML_TEMPERATURE_GPU=0,
        nvmlInit=init,
        nvmlShutdown=lambda: None,
        nvmlDeviceGetCount=lambda: devices,
        nvmlDeviceGetHandleByIndex=lambda i: f"handle{i}",
        nvmlDeviceGetName=lambda h: b"NVIDIA H100 80GB HBM3",
        nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(
            free=20 * GIB, total=80 * GIB, used=60 * GIB
        ),
        nvmlDeviceGetUtilizationRates=lambda h: types.SimpleNamespace(gpu=87, memory=40),
        nvmlDeviceGetTemperature=lambda h, sensor: 61,
        nvmlDeviceGetPowerUsage=power_usage,
    )


def fitted(nvml: Any, estimates: Mapping[str, int], total: int = 24 * GIB) -> GroupMemory:
    """Swap group gpu0 of the engines in `estimates` (their footprint estimates, bytes) fit by
    memory on device 0 of `nvml` with `total` bytes, each holding 2 GiB asleep."""
    return GroupMemory(
        Footprints(nvml),
        totals={"gpu0": total},
        devices=dict.fromkeys(estimates, 0),
        estimates=dict(estimates),
        asleep=dict.fromkeys(estimates, 2 * GIB),
    )
