"""llmd in-process on three simulator engines in a swap group fit by memory, over a fake NVML
(tests/support/nvml.py, a 24 GiB device as far as the group knows): the footprints NVML lists
for the engines' processes decide which may be awake together, and every request is answered."""

from __future__ import annotations

import asyncio
import tomllib
from typing import TYPE_CHECKING

import pytest
import tomli_w

from llmd.config import load_config
from llmd.supervisor.state import EnginePhase
from tests.support.configs import multi_sim_config
from tests.support.inprocess import running_daemon
from tests.support.lazy_import import lazy_module
from tests.support.llmd_process import free_port, short_tmpdir
from tests.support.model import ensure_tiny_model
from tests.support.nvml import GIB, fake_nvml, fitted
from tests.support.waiting import until

if TYPE_CHECKING:
    import openai
else:  # its import costs about 0.7 s of CPU in every worker that collects this module
    openai = lazy_module("openai")

MODELS = ("chat", "coder", "small")


async def _ask(client: openai.AsyncOpenAI, model: str) -> str:
    answer = await client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "hello"}], max_tokens=4
    )
    assert answer.choices[0].finish_reason in ("length", "stop")
    return answer.model


@pytest.mark.parametrize(("chat_gib", "together"), [(10, True), (14, False)])
async def test_a_group_fit_by_memory_keeps_what_fits_awake_by_measured_footprints(
    chat_gib: int, together: bool
) -> None:
    """Estimates say chat and coder (10 GiB each) fit together beside small asleep (22 of 24
    GiB). NVML measures chat at `chat_gib`: at 10 coder wakes beside it, at 14 coder's wake
    evicts chat first (26 > 24); small (20 GiB) wakes only alone; every request is answered by
    its own model."""
    workdir = short_tmpdir("llmd-fit-")
    port = free_port()
    engines = {m: (m, ["--sim-wake-s", "0.1"]) for m in MODELS}
    server = {
        "listen": f"127.0.0.1:{port}",
        "runtime_dir": str(workdir / "run"),
        "state_dir": str(workdir / "state"),
    }
    raw = tomllib.loads(multi_sim_config(ensure_tiny_model(), engines, server=server))
    for table in raw["engines"].values():
        table["on_demand"] = True
    # The simulator needs max_resident at load; the group is then fit by memory below, as
    # `llmd serve` does on a GPU.
    group = {"engines": list(MODELS), "max_resident": 1, "min_residence_s": 0.0}
    raw["swap_groups"] = {"gpu0": {**group, "max_wait_s": 0.0}}
    path = workdir / "llmd.toml"
    path.write_text(tomli_w.dumps(raw))
    seen_together: list[set[str]] = []
    async with running_daemon(load_config(path)) as (daemon, _):
        fleet = daemon.state.fleet.engines

        def serving() -> set[str]:
            return {n for n in MODELS if fleet[n].phase is not EnginePhase.ASLEEP}

        async def watch() -> None:
            while True:
                seen_together.append(serving())
                await asyncio.sleep(0.01)

        settled = lambda: serving() == {"chat"} and fleet["chat"].phase is EnginePhase.SERVING  # noqa: E731
        assert await until(settled, timeout_s=60)
        pids = {n: fleet[n].pid for n in MODELS}
        sizes = {"chat": chat_gib * GIB, "coder": 10 * GIB, "small": 20 * GIB}
        nvml = fake_nvml(processes=[(pids[n], sizes[n]) for n in MODELS])
        estimates = {"chat": 10 * GIB, "coder": 10 * GIB, "small": 20 * GIB}
        daemon.swapping.fit_by_memory(fitted(nvml, estimates))
        memory = daemon.swapping.memory
        assert memory is not None and memory.sizes("chat") == (chat_gib * GIB, 2 * GIB)
        watcher = asyncio.create_task(watch())
        client = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x")
        for model in ("chat", "coder", "coder", "small", "chat"):
            assert await asyncio.wait_for(_ask(client, model), 60) == model
        await client.close()
        watcher.cancel()
    assert memory.footprints.measured == sizes  # each read once it served
    assert all(len(awake) <= 2 for awake in seen_together)
    assert any({"chat", "coder"} <= awake for awake in seen_together) is together
    assert not any("small" in awake and len(awake) > 1 for awake in seen_together)
