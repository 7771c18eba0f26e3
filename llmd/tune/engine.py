"""One engine booted for one tune step: its own process group on a private socket, ready when
`/health` answers 200, stopped (group SIGTERM, then SIGKILL) when the step is over."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp

from llmd.config import EngineConfig
from llmd.config.backends import MAIN
from llmd.engine.launch import engine_launch
from llmd.errors import TuneError
from llmd.runtime import RuntimePaths
from llmd.supervisor.diagnosis import diagnose
from llmd.supervisor.exits import classify_exit
from llmd.supervisor.process import EngineProcess


@dataclasses.dataclass(frozen=True)
class BootedEngine:
    """A ready engine: the socket it serves on and how long it took to boot (s)."""

    socket: Path
    boot_s: float


@contextlib.asynccontextmanager
async def booted_engine(engine: EngineConfig, runtime_dir: Path) -> AsyncIterator[BootedEngine]:
    """Boot `engine` in `runtime_dir`, laid out as llmd's own (serving on `engine.sock`); stop
    its group on leaving. Raises `TuneError` with the diagnosis of its output when it exits or
    is not ready within `engine.start_timeout_s`."""
    paths = RuntimePaths(runtime_dir)
    socket = paths.engine_socket
    launch = engine_launch(engine, socket, paths.rpc_dir_of(MAIN))
    process = await EngineProcess.spawn(launch, lambda level, line: None)
    started = time.monotonic()
    try:
        await _wait_ready(process, socket, engine.start_timeout_s)
        yield BootedEngine(socket, round(time.monotonic() - started, 1))
    finally:
        await process.stop_group(engine.stop_timeout_s)


async def _wait_ready(process: EngineProcess, socket: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    connector = aiohttp.UnixConnector(path=str(socket))
    async with aiohttp.ClientSession(connector=connector) as session:
        while time.monotonic() < deadline:
            if not process.running:
                code = await process.wait()
                lines = list(process.output.recent)
                reason = classify_exit(
                    code, stop_requested=False, was_ready=False, recent_lines=lines
                )
                # The generic "unrecognised exit" finding adds nothing to the detail here.
                known = [
                    f for f in diagnose(lines, reason.kind, reason.detail) if f.check != "exit"
                ]
                cause = f"{known[0].message}; hint: {known[0].hint}" if known else ""
                raise TuneError(
                    f"the engine exited while booting ({reason.detail}). {cause}".strip()
                )
            with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError):
                timeout = aiohttp.ClientTimeout(total=5)
                async with session.get("http://engine/health", timeout=timeout) as response:
                    if response.status == 200:
                        return
            await asyncio.sleep(0.5)
    raise TuneError(f"the engine was not ready after {timeout_s:g}s (engine.start_timeout_s)")
