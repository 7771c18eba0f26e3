"""Entry point: `python -m llmd.engine.sim --model DIR --uds SOCKET [...]` (see options.py).

Boots like vLLM as llmd sees it: nothing listens until the model is "loaded" (after any
`--fault-boot-delay`), then `/health` is 200; SIGTERM or SIGINT stops it with status 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
import sys
from pathlib import Path

from llmd.engine.sim.options import SimOptions, parse_options

log = logging.getLogger("vllm.entrypoints.openai.api_server")


def main() -> None:
    from llmd.engine.sim.logs import configure_logging

    options = parse_options()
    configure_logging()
    sys.exit(asyncio.run(serve(options)))


async def serve(options: SimOptions) -> int:
    """Boot, serve until a stop signal, stop; the process exit status."""
    from aiohttp import web

    from llmd.engine.sim.core import SimEngine
    from llmd.engine.sim.logs import AccessLogger, log_stats
    from llmd.engine.sim.metrics import SimMetrics
    from llmd.engine.sim.server import SimServer
    from llmd.engine.sim.tokenizer import SimTokenizer

    log.info("vLLM API server version 0.32.0 (llmd simulator)")
    log.info("non-default args: %s", options)
    faults = options.faults
    if faults.boot_delay_s:
        await asyncio.sleep(faults.boot_delay_s)
    if faults.boot_exit_code is not None:
        log.error("Simulated boot failure: exiting with status %d", faults.boot_exit_code)
        return faults.boot_exit_code
    model_dir = Path(options.model)
    if not (model_dir / "tokenizer.json").is_file():
        log.error("OSError: %s is not a local folder with a tokenizer.json", options.model)
        return 1
    tokenizer = SimTokenizer(model_dir)
    max_model_len = options.max_model_len or _model_max_len(model_dir)
    if options.num_gpu_blocks * options.block_size < max_model_len:
        log.error(
            "ValueError: the KV cache holds %d tokens, less than max_model_len %d",
            options.num_gpu_blocks * options.block_size,
            max_model_len,
        )
        return 1
    metrics = SimMetrics(
        options.served_model_name,
        block_size=options.block_size,
        num_gpu_blocks=options.num_gpu_blocks,
        max_model_len=max_model_len,
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
    )
    server = SimServer(
        engine=engine,
        tokenizer=tokenizer,
        metrics=metrics,
        model_name=options.served_model_name,
        model_root=str(model_dir),
        max_model_len=max_model_len,
        faults=faults,
        request_overhead_s=options.timing.request_overhead_s,
    )
    engine.start()
    runner = web.AppRunner(
        server.app(),
        handler_cancellation=True,
        access_log_class=AccessLogger,
        access_log=logging.getLogger("uvicorn.access"),
    )
    await runner.setup()
    if options.uds:
        with contextlib.suppress(FileNotFoundError):
            Path(options.uds).unlink()
        await web.UnixSite(runner, options.uds).start()
        log.info("Starting vLLM API server 0 on unix:%s", options.uds)
    if options.port:
        await web.TCPSite(runner, options.host, options.port).start()
        log.info("Starting vLLM API server 0 on http://%s:%d", options.host, options.port)
    log.info(
        "Application startup complete. KV cache: %d blocks of %d tokens; max_model_len %d",
        options.num_gpu_blocks,
        options.block_size,
        max_model_len,
    )
    stats = asyncio.create_task(log_stats(engine, options.stats_interval_s))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("Shutting down the API server.")
    stats.cancel()
    await runner.cleanup()
    await engine.close()
    return 0


def _model_max_len(model_dir: Path) -> int:
    """vLLM's default max_model_len: the model config's `max_position_embeddings`."""
    try:
        config = json.loads((model_dir / "config.json").read_text())
        return int(config.get("max_position_embeddings", 2048))
    except (OSError, ValueError):
        return 2048


if __name__ == "__main__":
    main()
