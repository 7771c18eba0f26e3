"""Assemble one simulator (tokenizer, metrics, engine, HTTP server) from `SimOptions`, and
start it listening: used by `__main__` and by in-process tests.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from llmd.engine.sim.core import SimEngine
from llmd.engine.sim.listen import Listener, listen
from llmd.engine.sim.metrics import SimMetrics
from llmd.engine.sim.options import SimOptions
from llmd.engine.sim.server import SimServer
from llmd.engine.sim.sleep import SleepRoutes, dev_mode
from llmd.engine.sim.surface import SURFACES
from llmd.engine.sim.tasks import resolve_tasks
from llmd.engine.sim.tokenizer import SimTokenizer

log = logging.getLogger("vllm.entrypoints.openai.api_server")


class BootError(Exception):
    """The simulator cannot start with these options (model directory, KV size)."""


def build_server(options: SimOptions) -> SimServer:
    """A ready-to-start server for `options`. Raises `BootError`."""
    model_dir = Path(options.model)
    if not (model_dir / "tokenizer.json").is_file():
        raise BootError(f"OSError: {options.model} is not a local folder with a tokenizer.json")
    tokenizer = SimTokenizer(model_dir)
    try:
        tasks = resolve_tasks(
            model_dir,
            runner=options.runner,
            convert=options.convert,
            hf_overrides=dict(options.hf_overrides),
            asr=options.asr,
        )
    except ValueError as exc:
        raise BootError(f"ValueError: {exc}") from exc
    max_model_len = options.max_model_len or model_max_len(model_dir)
    capacity = options.num_gpu_blocks * options.block_size
    if capacity < max_model_len:
        raise BootError(
            f"ValueError: the KV cache holds {capacity} tokens, less than max_model_len "
            f"{max_model_len}"
        )
    metrics = SimMetrics(
        options.served_model_name,
        block_size=options.block_size,
        num_gpu_blocks=options.num_gpu_blocks,
        max_model_len=max_model_len,
        prefix_caching=options.enable_prefix_caching,
    )
    engine = SimEngine.build(
        tokenizer=tokenizer,
        metrics=metrics,
        timing=options.timing,
        max_num_seqs=options.max_num_seqs,
        max_num_batched_tokens=options.max_num_batched_tokens,
        block_size=options.block_size,
        num_gpu_blocks=options.num_gpu_blocks,
        policy=options.scheduling_policy,
        seed=options.seed,
        prefix_caching=options.enable_prefix_caching,
    )
    sleep = SleepRoutes(
        engine,
        metrics,
        enabled=options.enable_sleep_mode,
        wake_s=options.wake_s,
        model_dir=model_dir,
        num_gpu_blocks=options.num_gpu_blocks,
    )
    return SimServer(
        sleep=sleep if dev_mode() else None,
        engine=engine,
        tokenizer=tokenizer,
        metrics=metrics,
        model_name=options.served_model_name,
        aliases=options.served_model_names,
        lora_modules=dict(options.lora_modules),
        api_keys=options.api_keys,
        model_root=str(model_dir),
        max_model_len=max_model_len,
        faults=options.faults,
        surface=SURFACES[options.vllm_version],
        tasks=tasks,
        vocab_size=model_vocab_size(model_dir),
    )


async def start(server: SimServer, options: SimOptions) -> Listener:
    """Start the engine loop and listen on `options.uds` and/or `options.port`; the listener
    (`await listener.close()` stops listening; then `await server.engine.close()`)."""
    server.engine.start(options.faults.stall_after_s)
    return await listen(server.app(), uds=options.uds, host=options.host, port=options.port)


def model_vocab_size(model_dir: Path) -> int:
    """The model's `vocab_size` (config.json; 0 if absent): vLLM 0.32 takes token ids below
    the larger of it and the tokenizer's."""
    try:
        return int(json.loads((model_dir / "config.json").read_text()).get("vocab_size", 0))
    except (OSError, ValueError, TypeError):
        return 0


def model_max_len(model_dir: Path) -> int:
    """vLLM's default max_model_len: the model config's `max_position_embeddings`."""
    try:
        config = json.loads((model_dir / "config.json").read_text())
        return int(config.get("max_position_embeddings", 2048))
    except (OSError, ValueError):
        return 2048
