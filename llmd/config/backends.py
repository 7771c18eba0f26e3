"""What llmd serves from: supervised engines (`[engine]`, or `[engines.NAME]`), upstreams it does
not supervise (`[upstreams.NAME]`), and how requests are routed between them (`[routing]`).

The tables and the checks that span them: names, upstream URLs, one model name per served
model, and engines sharing a GPU (each needs an explicit `--kv-cache-memory-bytes`, since
`--gpu-memory-utilization` is a fraction of the whole device checked against its free memory at
boot: vllm#10533, #14376, #17979). A leaf: it imports only the error tree and the breaker's
policy.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from typing import Literal

from llmd.engine.args import engine_flag, flags_given, int_flag
from llmd.errors import ConfigError
from llmd.routing.breaker import BreakerPolicy

# `[engine]` alone is one engine with this name (DESIGN.md).
MAIN = "main"
# Backend names become socket and pid file names and metric labels: short, plain.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,31}$")
# vLLM's flag for an explicit KV cache size per device (0.10+).
KV_BYTES_FLAG = "--kv-cache-memory-bytes"
# An engine without `gpus` runs on the first device it sees (vLLM's default).
DEFAULT_GPU = "0"


@dataclasses.dataclass(frozen=True)
class EngineConfig:
    """What engine to run and how: `kind` picks the adapter (`vllm` or `sim`). `gpus`: the
    devices it may use (indexes or UUIDs; sets CUDA_VISIBLE_DEVICES; empty: as the
    environment says). `device`: what it computes on, for admission's device hold (engines
    naming the same one share it; empty: `shared_device`'s default). `nice`: added to the
    niceness of the engine's processes (0-19), so that llmd's own process gets the CPU first
    when both want it (llmd/supervisor/process.py). `warmup`: a short request must succeed
    through the booted engine before it serves."""

    kind: Literal["vllm", "sim"] = "vllm"
    model: str = ""
    served_model_name: str = ""
    python: str = ""
    # May hold secrets (--api-key, VLLM_API_KEY, HF_TOKEN): never echoed in a config error.
    command: tuple[str, ...] = dataclasses.field(default=(), metadata={"secret": True})
    args: tuple[str, ...] = dataclasses.field(default=(), metadata={"secret": True})
    env: dict[str, str] = dataclasses.field(default_factory=dict, metadata={"secret": True})
    gpus: tuple[str, ...] = ()
    device: str = ""
    nice: int = 0
    start_timeout_s: float = 900.0
    stop_timeout_s: float = 20.0
    health_interval_s: float = 2.0
    # One short generation (an embedding for a pooling engine) of `warmup_prompt` must succeed
    # before the engine serves (llmd/supervisor/warmup.py).
    warmup: bool = True
    warmup_prompt: str = "Hello"
    # The stall watchdog (llmd/supervisor/stall.py): sequences running and no token for this
    # long restarts the engine. 0: max(30 s, 100 x its measured mean inter-token latency).
    stall_timeout_s: float = 0.0
    # A relayed request that gets no byte from the engine for this long is aborted (more for
    # a prompt still in prefill, by its tokens). 0: twice the stall timeout.
    request_idle_timeout_s: float = 0.0
    # On demand (llmd/config/swap.py): the engine may be put to sleep, and is woken when a
    # request names its model. `idle_sleep_s`: asleep after this long without requests (0: only
    # when evicted). `sleep`: how (`level1`/`level2`: vLLM's sleep mode; `stop`: its process
    # group stopped and booted again; `auto`: level1 where the engine has sleep mode, else
    # stop). A pinned engine is never evicted.
    on_demand: bool = False
    idle_sleep_s: float = 0.0
    sleep: Literal["auto", "level1", "level2", "stop"] = "auto"
    pin: bool = False

    @property
    def model_name(self) -> str:
        """The name clients use in `model`: `served_model_name`, else the model path."""
        return self.served_model_name or self.model

    @property
    def devices(self) -> tuple[str, ...]:
        """The GPUs it runs on: `gpus`, else CUDA_VISIBLE_DEVICES from `env`, else GPU 0."""
        if self.gpus:
            return self.gpus
        visible = self.env.get("CUDA_VISIBLE_DEVICES", "")
        return tuple(part.strip() for part in visible.split(",") if part.strip()) or (DEFAULT_GPU,)

    @property
    def shared_device(self) -> tuple[str, ...]:
        """What it computes on, as the device hold groups engines (llmd/admission/sharing.py):
        `device` when set; else a vLLM engine's GPUs (`devices`, as `gpu:N`: vLLM's CPU build
        sees GPU 0 there, so the CPU engines of a host share one); else none (a simulator)."""
        if self.device:
            return (f"device:{self.device}",)
        if self.kind == "vllm":
            return tuple(f"gpu:{gpu}" for gpu in self.devices)
        return ()


@dataclasses.dataclass(frozen=True)
class UpstreamConfig:
    """An OpenAI-compatible server llmd sends requests to but does not supervise.

    `url`: `http(s)://HOST:PORT` or `unix:/path/to.sock`. `models`: the names it serves
    (empty: read from its `/v1/models`). `api_key_env`: the environment variable holding the
    key llmd sends as `Authorization: Bearer` (empty: none). `max_in_flight`: llmd's requests
    there at once. `stall_timeout_s`, `request_idle_timeout_s`: as an engine's.
    """

    url: str = ""
    models: tuple[str, ...] = ()
    api_key_env: str = ""
    stall_timeout_s: float = 0.0  # a stall opens the upstream's breaker
    request_idle_timeout_s: float = 0.0
    max_in_flight: int = 128


@dataclasses.dataclass(frozen=True)
class RoutingConfig:
    """How a request picks a backend of its model's pool (llmd/routing/choice.py): prefix
    affinity over the first `prefix_chars` characters of the prompt (0: none, least load
    only), kept while the affinity backend's fill is within (1 + epsilon) x the pool's mean
    plus `slack` requests; upstreams' health probe (`/v1/models`) every `probe_interval_s`;
    and each upstream's circuit breaker (`[routing.breaker]`, llmd/routing/breaker.py)."""

    prefix_chars: int = 1024
    epsilon: float = 0.25
    slack: float = 1.0
    probe_interval_s: float = 5.0
    breaker: BreakerPolicy = dataclasses.field(default_factory=BreakerPolicy)


def engine_tables(
    engine: EngineConfig | None, engines: Mapping[str, EngineConfig]
) -> dict[str, EngineConfig]:
    """The supervised engines by name from `[engine]` (None when the file has none) and
    `[engines.NAME]`. Raises ConfigError when both are given, naming the keys."""
    if engine is not None and engines:
        names = ", ".join(f"engines.{name}" for name in engines)
        raise ConfigError(
            f"both [engine] and [engines.*] are set ({names}): use one form; "
            f"[engine] alone means one engine named {MAIN!r}, like [engines.{MAIN}]"
        )
    if engine is not None:
        return {MAIN: engine}
    return dict(engines)


def check_backends(
    engines: Mapping[str, EngineConfig],
    upstreams: Mapping[str, UpstreamConfig],
    routing: RoutingConfig,
) -> None:
    """Cross-table checks. Raises ConfigError naming the key: no backend at all, a bad or
    repeated name, an engine without a model, engine args that set a flag llmd sets
    (FLAGS_LLMD_SETS) or give a value vLLM would refuse for one llmd reads (NUMBER_FLAGS), an
    upstream URL that is not http(s):// or unix:/path, a breaker ratio over 1, and GPU sharing
    without explicit KV sizes."""
    if not engines and not upstreams:
        raise ConfigError("engine.model is required (a model directory or name)")
    for name in [*engines, *upstreams]:
        if not _NAME.match(name):
            raise ConfigError(
                f"backend name {name!r}: expected 1-32 letters, digits, '_', '.' or '-', "
                "starting with a letter or digit"
            )
    for name in set(engines) & set(upstreams):
        raise ConfigError(f"engines.{name} and upstreams.{name}: a backend name is used twice")
    for name, engine in engines.items():
        key = "engine" if name == MAIN and len(engines) == 1 else f"engines.{name}"
        if not engine.model:
            raise ConfigError(f"{key}.model is required (a model directory or name)")
        if engine.gpus and "CUDA_VISIBLE_DEVICES" in engine.env:
            raise ConfigError(
                f"{key}.gpus and {key}.env.CUDA_VISIBLE_DEVICES are both set: use gpus"
            )
        if not 0 <= engine.nice <= 19:
            raise ConfigError(
                f"{key}.nice = {engine.nice!r}: expected 0 to 19 (added to the niceness of the "
                "engine's processes; llmd never raises their priority)"
            )
        if len(set(engine.gpus)) != len(engine.gpus):
            raise ConfigError(f"{key}.gpus = {list(engine.gpus)!r}: a GPU is listed twice")
        _check_numbers_read(engine.args, key)
        for flag in flags_given(engine.args, FLAGS_LLMD_SETS):
            raise ConfigError(f"{key}.args: {flag} is set by llmd: {FLAGS_LLMD_SETS[flag]}")
    for name, upstream in upstreams.items():
        _check_url(upstream.url, f"upstreams.{name}.url")
        if not upstream.max_in_flight:
            raise ConfigError(f"upstreams.{name}.max_in_flight = 0: expected at least 1")
    if not (math.isfinite(routing.epsilon) and math.isfinite(routing.slack)):
        raise ConfigError("routing.epsilon and routing.slack: expected finite numbers")
    if routing.breaker.failure_ratio > 1:
        raise ConfigError(
            f"routing.breaker.failure_ratio = {routing.breaker.failure_ratio!r}: "
            "expected a fraction in [0, 1]"
        )
    check_gpu_sharing(engines)


def shared_gpus(engines: Mapping[str, EngineConfig]) -> dict[str, list[str]]:
    """GPU -> the vLLM engines on it, for the GPUs more than one engine uses (simulators use
    none). Config order."""
    users: dict[str, list[str]] = {}
    for name, engine in engines.items():
        if engine.kind == "vllm":
            for gpu in engine.devices:
                users.setdefault(gpu, []).append(name)
    return {gpu: names for gpu, names in users.items() if len(names) > 1}


def check_gpu_sharing(engines: Mapping[str, EngineConfig]) -> None:
    """Engines that share a GPU must each size their KV cache in bytes. Raises ConfigError."""
    for gpu, names in shared_gpus(engines).items():
        missing = [n for n in names if engine_flag(engines[n].args, KV_BYTES_FLAG) is None]
        if missing:
            raise ConfigError(
                f"engines {', '.join(names)} share GPU {gpu}: each needs {KV_BYTES_FLAG} in its "
                f"args (missing in: {', '.join(f'engines.{n}.args' for n in missing)}); "
                "--gpu-memory-utilization is a fraction of the whole device, checked against "
                "its free memory at boot"
            )


# Flags llmd passes before engine.args (llmd.engine.launch); vLLM keeps the last, so one in
# engine.args would serve another model than llmd validates for, or listen where llmd never looks.
FLAGS_LLMD_SETS = {
    "--model": "use engine.model",
    "--uds": "the engine listens on a Unix socket in the runtime directory",
}

# The engine flags llmd reads as numbers itself (admission seats, sizing, GPU preflight).
NUMBER_FLAGS = ("--max-num-seqs", "--max-model-len", KV_BYTES_FLAG)


def _check_numbers_read(args: tuple[str, ...], key: str) -> None:
    """Each of NUMBER_FLAGS given in `args` must read as vLLM reads it (a whole number, or a
    '64M'/'32k' form where vLLM takes one), else llmd would size its seats or memory for a
    different engine than the one that boots. Raises ConfigError naming the key and flag,
    never the value (engine.args may hold secrets)."""
    for flag in NUMBER_FLAGS:
        try:
            int_flag(args, flag)
        except ValueError as exc:
            raise ConfigError(f"{key}.args: {exc}") from None


def _check_url(url: str, key: str) -> None:
    if url.startswith("unix:/"):
        return
    if re.match(r"^https?://[^/\s]+(/\S*)?$", url):
        return
    shown = re.sub(r"//[^/@]*@", "//***@", url)  # a user:password@ part is never echoed
    raise ConfigError(
        f"{key} = {shown!r}: expected http://HOST:PORT, https://HOST:PORT or unix:/path/to.sock"
    )
