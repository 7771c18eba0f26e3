"""GPU readings with pynvml replaced at its boundary: devices, unsupported fields, no GPU."""

from __future__ import annotations

from llmd.gpu.nvml import GpuReader
from tests.support.nvml import fake_nvml

GIB = 1024**3


def test_reads_every_device_in_base_units() -> None:
    """Utilisation as 0..1, memory in bytes, temperature in C, power in W; NVML initialised
    once across reads."""
    nvml = fake_nvml()
    reader = GpuReader(nvml)
    reading = reader.read()
    reader.read()
    assert nvml.calls["init"] == 1
    assert reading.reason is None
    assert [d.index for d in reading.devices] == [0, 1]
    device = reading.devices[0]
    assert device.name == "NVIDIA H100 80GB HBM3"
    assert device.utilization == 0.87
    assert (device.memory_used_bytes, device.memory_total_bytes) == (60 * GIB, 80 * GIB)
    assert (device.temperature_c, device.power_w) == (61.0, 350.5)


def test_an_unsupported_field_reads_as_none() -> None:
    """A board that cannot report power still reports the rest."""
    device = GpuReader(fake_nvml(power=False)).read().devices[0]
    assert device.power_w is None and device.utilization == 0.87


def test_no_driver_is_an_empty_list_with_the_reason() -> None:
    """Without NVML: no devices, the reason, and no further attempts."""
    nvml = fake_nvml(present=False)
    reader = GpuReader(nvml)
    reading = reader.read()
    assert reading.devices == ()
    assert reading.reason is not None and "NVML Shared Library Not Found" in reading.reason
    assert reader.unavailable
    reader.read()
    assert nvml.calls["init"] == 1


def test_no_device_is_an_empty_list_with_the_reason() -> None:
    """A driver that sees no GPU: an empty list and why."""
    reading = GpuReader(fake_nvml(devices=0)).read()
    assert reading.devices == () and reading.reason == "no GPU visible to the NVIDIA driver"
