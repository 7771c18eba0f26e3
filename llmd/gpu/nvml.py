"""GPU readings from NVML (`pynvml`, the nvidia-ml-py package): name, utilisation, memory,
temperature and power per device.

The NVML module is passed in, so tests replace it at this boundary. A field a device does not
support (power on some boards, utilisation under MIG) reads as None; no NVIDIA driver or no GPU
reads as an empty list with the reason.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any


@dataclasses.dataclass(frozen=True)
class GpuDevice:
    """One device: `utilization` 0..1 (NVML's percent over its last sample period), memory in
    bytes, temperature in °C, power draw in W."""

    index: int
    name: str
    utilization: float | None
    memory_used_bytes: int | None
    memory_total_bytes: int | None
    temperature_c: float | None
    power_w: float | None


@dataclasses.dataclass(frozen=True)
class GpuReading:
    """All devices, or none and `reason` (why there are none, e.g. no NVIDIA driver)."""

    devices: tuple[GpuDevice, ...] = ()
    reason: str | None = "not read yet"


class GpuReader:
    """Reads every device through `nvml`; NVML is initialised on the first read and kept."""

    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml
        self._ready = False
        self._failure: str | None = None

    @property
    def unavailable(self) -> bool:
        """True once NVML failed to start (no driver, no device): later reads only repeat it."""
        return self._failure is not None

    def read(self) -> GpuReading:
        """One reading of every device. Never raises: NVML errors become the `reason`."""
        nvml = self.nvml
        if self._failure is not None:
            return GpuReading((), self._failure)
        try:
            if not self._ready:
                nvml.nvmlInit()
                self._ready = True
            count = nvml.nvmlDeviceGetCount()
            devices = tuple(self._device(index) for index in range(count))
        except nvml.NVMLError as exc:
            if not self._ready:  # no driver or no device: it will not appear while llmd runs
                self._failure = f"no NVIDIA GPU: {exc}"
            return GpuReading((), self._failure or f"NVML failed: {exc}")
        return GpuReading(devices, None if devices else "no GPU visible to the NVIDIA driver")

    def close(self) -> None:
        if self._ready:
            self._ready = False
            self._optional(self.nvml.nvmlShutdown)

    def _device(self, index: int) -> GpuDevice:
        nvml = self.nvml
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        name = nvml.nvmlDeviceGetName(handle)
        memory = self._optional(lambda: nvml.nvmlDeviceGetMemoryInfo(handle))
        rates = self._optional(lambda: nvml.nvmlDeviceGetUtilizationRates(handle))
        temperature = self._optional(
            lambda: nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU)
        )
        milliwatts = self._optional(lambda: nvml.nvmlDeviceGetPowerUsage(handle))
        return GpuDevice(
            index=index,
            name=name.decode() if isinstance(name, bytes) else str(name),
            utilization=rates.gpu / 100 if rates is not None else None,
            memory_used_bytes=int(memory.used) if memory is not None else None,
            memory_total_bytes=int(memory.total) if memory is not None else None,
            temperature_c=float(temperature) if temperature is not None else None,
            power_w=milliwatts / 1000 if milliwatts is not None else None,
        )

    def _optional(self, call: Callable[[], Any]) -> Any:
        """`call()`, or None when NVML says the device cannot answer it."""
        try:
            return call()
        except self.nvml.NVMLError:
            return None


def nvml_reader() -> GpuReader:
    """A GpuReader over the real NVML (pynvml is imported here, not at llmd's import)."""
    import pynvml

    return GpuReader(pynvml)
