"""The supervisor's own loop on the simulator: a stop that comes while an engine is being
spawned stops that engine too, and returns."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import pytest

from llmd.config import load_config
from llmd.config.backends import MAIN
from llmd.runtime import RuntimePaths
from llmd.supervisor import supervisor as supervisor_module
from llmd.supervisor.process import EngineProcess
from llmd.supervisor.state import EnginePhase, EngineState
from llmd.supervisor.supervisor import Supervisor
from tests.support.llmd_process import short_tmpdir
from tests.support.model import ensure_tiny_model
from tests.support.sim_process import sim_config


def supervisor() -> Supervisor:
    workdir = short_tmpdir("llmd-sup-")
    (workdir / "llmd.toml").write_text(sim_config(ensure_tiny_model()))
    config = load_config(workdir / "llmd.toml", runtime_dir=str(workdir / "run"))
    paths = RuntimePaths(Path(config.server.runtime_dir))
    paths.create()
    return Supervisor(MAIN, config.engine, config.supervisor, paths, EngineState())


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ")[1][0] != "Z"
    except OSError:
        return False


async def test_a_stop_during_the_spawn_stops_the_new_engine(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """stop() arrives while spawn() is under way (no process yet): it returns once the engine
    that spawn started is stopped, and run() ends."""
    spawning, release = asyncio.Event(), asyncio.Event()
    spawned: list[EngineProcess] = []
    real_spawn = EngineProcess.spawn

    async def slow_spawn(*args: object, **kwargs: object) -> EngineProcess:
        spawning.set()
        await release.wait()
        process = await real_spawn(*args, **kwargs)  # type: ignore[arg-type]
        spawned.append(process)
        return process

    monkeypatch.setattr(supervisor_module.EngineProcess, "spawn", slow_spawn)
    sup = supervisor()
    run = asyncio.create_task(sup.run())
    try:
        await asyncio.wait_for(spawning.wait(), 10)
        stop = asyncio.create_task(sup.stop())
        await asyncio.sleep(0)  # stop() has found no process to stop
        release.set()
        await asyncio.wait_for(stop, 30)
        await asyncio.wait_for(run, 5)
    finally:
        for process in spawned:
            await process.stop_group(5.0)
        if not run.done():
            run.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await run
    assert spawned and not alive(spawned[0].pid)
    assert sup.state.phase is EnginePhase.STOPPED
