"""The daemon's device checks before start-up: the GPU preflight, and the swap groups fit by
memory measured on their GPUs."""

from __future__ import annotations

import asyncio

import structlog

from llmd import exitcodes
from llmd.config import Config
from llmd.daemon.swapping import Swapping
from llmd.errors import ConfigError
from llmd.gpu.footprint import open_group_memory
from llmd.gpu.preflight import GpuReport, PreflightError, run_preflight
from llmd.systemd.reporter import ServiceReporter

log = structlog.get_logger("llmd.daemon.daemon")


async def check_devices(
    config: Config, swapping: Swapping, reporter: ServiceReporter
) -> GpuReport | int:
    """Run the GPU preflight (llmd/gpu/preflight.py) for `config`'s engines, and fit the swap
    groups that fit by memory (`swapping.fit_by_memory`). The GPU report, or the status
    `llmd serve` exits with when it must not start (`exitcodes.CONFIG` for a permanent
    failure, `exitcodes.FAILURE` otherwise): logged, and systemd told through `reporter`."""
    try:
        # A group fit by memory needs at least one engine awake beside the others asleep.
        groups = [(g.max_resident or 1, g.engines) for g in config.swap_groups.values()]
        gpu = await asyncio.to_thread(run_preflight, config.engine_tables, groups)
    except PreflightError as exc:
        log.error("gpu_preflight_failed", error=str(exc))
        reporter.stopping(f"GPU preflight failed: {exc}")
        return exitcodes.CONFIG if exc.permanent else exitcodes.FAILURE
    by_memory = {n: g.engines for n, g in config.swap_groups.items() if not g.max_resident}
    if by_memory:
        try:
            memory = await asyncio.to_thread(open_group_memory, config.engine_tables, by_memory)
        except ConfigError as exc:
            log.error("swap_groups_refused", error=str(exc))
            reporter.stopping(str(exc))
            return exitcodes.CONFIG
        swapping.fit_by_memory(memory)
        log.info("swap_groups_fit_by_memory", groups=memory.totals)
    log.info(
        "gpu_preflight_passed",
        driver=gpu.driver_version,
        cuda=gpu.cuda_version,
        devices=list(gpu.devices),
        note=gpu.note,
    )
    return gpu
