"""The swap groups at work in-process, over a daemon's state with stand-in supervisors: an
engine whose sleep has been started takes no request from that moment, before its sleep runs."""

from __future__ import annotations

import asyncio
import tomllib

import tomli_w

from llmd.config import load_config
from llmd.daemon.swapping import Swapping
from llmd.engine.sleep import SleepMechanism
from llmd.supervisor.state import EnginePhase
from tests.support.configs import multi_sim_config
from tests.support.llmd_process import short_tmpdir
from tests.support.model import ensure_tiny_model
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


async def test_an_engine_put_to_sleep_takes_no_request_before_its_sleep_runs() -> None:
    """From the moment its sleep is started (before the sleep task has run a step) the engine
    is closed, so no request released meanwhile reaches it asleep; once the sleep ended it is
    open again."""
    engines: dict[str, tuple[str, list[str]]] = {m: (m, []) for m in ("chat", "coder")}
    raw = tomllib.loads(multi_sim_config(ensure_tiny_model(), engines))
    for table in raw["engines"].values():
        table["on_demand"] = True
    raw["swap_groups"] = {"gpu0": {"engines": ["chat", "coder"], "max_resident": 1}}
    path = short_tmpdir("llmd-swapping-") / "llmd.toml"
    path.write_text(tomli_w.dumps(raw))
    config = load_config(path)
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
