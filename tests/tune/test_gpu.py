"""The peak GPU memory a tune step records: the highest NVML reading of the engine's GPU."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from llmd.config import EngineConfig
from llmd.gpu.nvml import GpuReader
from llmd.tune.gpu import GpuPeak
from tests.support.nvml import fake_nvml

GIB = 1024**3


def rising_nvml() -> Any:
    """Memory in use grows by 1 GiB per reading, then falls back to 1 GiB after the sixth."""
    nvml = fake_nvml()
    nvml.readings = 0

    def memory(handle: str) -> Any:
        nvml.readings += 1
        used = GIB if nvml.readings > 6 else nvml.readings * GIB
        return SimpleNamespace(used=used, total=80 * GIB)

    nvml.nvmlDeviceGetMemoryInfo = memory
    return nvml


async def test_the_peak_is_the_highest_reading() -> None:
    """Readings while the step runs, and one at its end: the peak survives the fall."""
    nvml = rising_nvml()
    async with GpuPeak(GpuReader(nvml), EngineConfig(model="m"), interval_s=0.01) as peak:
        while nvml.readings < 8:
            await asyncio.sleep(0.01)
    assert peak.peak_bytes is not None and peak.peak_bytes >= 5 * GIB
    assert peak.total_bytes == 80 * GIB and peak.note is None


async def test_without_a_gpu_the_note_says_why() -> None:
    """No NVIDIA driver: no figure, and NVML's reason."""
    async with GpuPeak(GpuReader(fake_nvml(present=False)), EngineConfig(model="m")) as peak:
        pass
    assert peak.peak_bytes is None
    assert peak.note == "no NVIDIA GPU: NVML Shared Library Not Found"
