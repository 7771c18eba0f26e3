"""The swap groups at work in-process, over a daemon's state with stand-in supervisors: an
engine whose sleep has been started takes no request from that moment, before its sleep runs;
a group fit by memory wakes by the footprints read through (fake) NVML."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import tomli_w

from llmd.config import load_config
from llmd.daemon.swapping import Swapping
from llmd.engine.sleep import SleepMechanism
from llmd.errors import ActionRefused
from llmd.supervisor.state import EnginePhase
from tests.support.configs import multi_sim_config
from tests.support.llmd_process import short_tmpdir
from tests.support.model import ensure_tiny_model
from tests.support.nvml import GIB, fake_nvml, fitted
from tests.support.state import daemon_state


class Sleeper:
    """A supervisor as Swapping sees it: its table, its mechanism, and a sleep that ends when
    `done` is set."""

    def __init__(self, engine: object) -> None:
        self.engine = engine
        self.mechanism = SleepMechanism.LEVEL1
        self.started = asyncio.Event()
        self.done = asyncio.Event()

    async def sleep(self) -> bool:
        self.started.set()
        await self.done.wait()
        return True


def swap_config(names: tuple[str, ...]) -> Path:
    """A config file of simulator engines `names`, on demand, in swap group gpu0 of one."""
    engines: dict[str, tuple[str, list[str]]] = {m: (m, []) for m in names}
    raw = tomllib.loads(multi_sim_config(ensure_tiny_model(), engines))
    for table in raw["engines"].values():
        table["on_demand"] = True
    raw["swap_groups"] = {"gpu0": {"engines": list(names), "max_resident": 1}}
    path = short_tmpdir("llmd-swapping-") / "llmd.toml"
    path.write_text(tomli_w.dumps(raw))
    return path


async def test_an_engine_put_to_sleep_takes_no_request_before_its_sleep_runs() -> None:
    """From the moment its sleep is started (before the sleep task has run a step) the engine
    is closed, so no request released meanwhile reaches it asleep; once the sleep ended it is
    open again."""
    config = load_config(swap_config(("chat", "coder")))
    state = daemon_state(config)
    state.fleet.engines["chat"].phase = EnginePhase.SERVING
    supervisors = {name: Sleeper(table) for name, table in config.engine_tables.items()}
    swapping = Swapping(state, supervisors, lambda: None)  # type: ignore[arg-type]
    capacity = state.admission.capacity
    assert not capacity.holding("chat")
    assert swapping._start("chat", wake=False)
    assert capacity.holding("chat")  # at once: the sleep task has not begun
    assert not supervisors["chat"].started.is_set()
    await supervisors["chat"].started.wait()
    swapping.decide()  # a pass while the sleep runs keeps it closed
    assert capacity.holding("chat")
    state.fleet.engines["chat"].phase = EnginePhase.ASLEEP
    supervisors["chat"].done.set()
    await asyncio.wait_for(swapping._ops["chat"], 5)
    swapping.decide()
    assert "chat" not in swapping._closed


class Waker(Sleeper):
    """A stand-in supervisor that also wakes (at once)."""

    async def wake(self) -> bool:
        return True


@pytest.mark.parametrize(("chat_gib", "coder_wakes"), [(5, True), (20, False)])
async def test_a_group_fit_by_memory_wakes_by_the_measured_footprint(
    chat_gib: int, coder_wakes: bool
) -> None:
    """On a 24 GiB device (fake NVML), the serving engine's footprint is read through NVML
    (its process group's processes) when it serves and replaces its estimate: beside a chat
    measured at 5 GiB the 10 GiB coder may wake (5 + 10 + 2 asleep), beside one at 20 GiB it
    may not; the wake refused says the group has no room."""
    config = load_config(swap_config(("chat", "coder", "small")))
    state = daemon_state(config)
    chat = state.fleet.engines["chat"]
    chat.phase, chat.pid = EnginePhase.SERVING, os.getpgid(0)
    for name in ("coder", "small"):
        state.fleet.engines[name].phase = EnginePhase.ASLEEP
    supervisors = {name: Waker(table) for name, table in config.engine_tables.items()}
    swapping = Swapping(state, supervisors, lambda: None)  # type: ignore[arg-type]
    nvml = fake_nvml(processes=[(os.getpid(), chat_gib * GIB)])
    estimates = {"chat": 10 * GIB, "coder": 10 * GIB, "small": 20 * GIB}
    swapping.fit_by_memory(fitted(nvml, estimates))
    assert swapping.groups["gpu0"][0].policy.device_bytes == 24 * GIB
    swapping.decide()  # chat is seen serving: its footprint is read
    assert swapping.memory is not None
    assert swapping.memory.sizes("chat") == (chat_gib * GIB, 2 * GIB)
    if not coder_wakes:
        with pytest.raises(ActionRefused, match="has no room for coder beside the others' memory"):
            swapping.operator_wake("coder")
        return
    assert swapping.operator_wake("coder")["started"]
    state.fleet.engines["coder"].phase = EnginePhase.WAKING
    with pytest.raises(ActionRefused, match="room for small"):  # 5 + 10 + 20 > 24
        swapping.operator_wake("small")
    await asyncio.wait_for(swapping._ops["coder"], 5)


def test_serve_refuses_a_group_fit_by_memory_without_a_gpu() -> None:
    """`llmd serve` with vLLM engines (the CPU build here) in a group without max_resident
    exits 78 before booting any, saying max_resident is required without a GPU."""
    workdir = short_tmpdir("llmd-swap-nogpu-")
    tables = "".join(
        f'[engines.{n}]\nkind = "vllm"\nmodel = "{ensure_tiny_model()}"\non_demand = true\n'
        'args = ["--kv-cache-memory-bytes", "67108864"]\n'
        for n in ("a", "b")
    )
    config = workdir / "llmd.toml"
    config.write_text('[swap_groups.g]\nengines = ["a", "b"]\n' + tables)
    done = subprocess.run(
        [
            *(sys.executable, "-m", "llmd.cli", "serve", "--config", str(config)),
            *("--listen", "127.0.0.1:0", "--runtime-dir", str(workdir / "run")),
            *("--state-dir", str(workdir / "state")),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 78, done.stderr[-2000:]
    assert "swap_groups.g.max_resident is required without a GPU" in done.stdout + done.stderr
    assert "engine_started" not in done.stdout + done.stderr


def test_a_group_fit_by_memory_starts_with_one_engine_awake() -> None:
    """At start-up all but one engine of a group without max_resident boot to sleep (the
    pinned one stays awake if any)."""
    from llmd.daemon.swapping import starts_asleep

    config = load_config(swap_config(("chat", "coder", "small")))
    group = dataclasses.replace(config.swap_groups["gpu0"], max_resident=0)
    config = dataclasses.replace(config, swap_groups={"gpu0": group})
    assert starts_asleep(config) == {"coder", "small"}
