"""The peak GPU memory in use while a tune step runs, read from NVML; or why there is none."""

from __future__ import annotations

import asyncio
import contextlib
from types import TracebackType

from llmd.config import EngineConfig
from llmd.gpu.nvml import GpuReader
from llmd.gpu.preflight import visible_indices


class GpuPeak:
    """Reads the first GPU `engine` uses through `reader` every `interval_s` inside `async with`.
    After it: `peak_bytes` and `total_bytes` (None without a GPU), and `note` (why, e.g. 'no
    NVIDIA GPU: NVML Shared Library Not Found')."""

    def __init__(self, reader: GpuReader, engine: EngineConfig, interval_s: float = 0.5) -> None:
        self.reader = reader
        self.engine = engine
        self.interval_s = interval_s
        self.peak_bytes: int | None = None
        self.total_bytes: int | None = None
        self.note: str | None = None
        self._task: asyncio.Task[None] | None = None

    def read(self) -> bool:
        """One reading into the peak; False when there is no such device (and `note` says why)."""
        reading = self.reader.read()
        if not reading.devices:
            self.note = reading.reason or "no GPU visible"
            return False
        device = reading.devices[visible_indices(self.engine, len(reading.devices))[0]]
        self.total_bytes = device.memory_total_bytes
        used = device.memory_used_bytes
        if used is not None:
            self.peak_bytes = max(self.peak_bytes or 0, used)
        return True

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            self.read()

    async def __aenter__(self) -> GpuPeak:
        if self.read():
            self._task = asyncio.create_task(self._loop(), name="tune-gpu-peak")
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self.read()
