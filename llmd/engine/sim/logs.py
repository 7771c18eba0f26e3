"""Log lines in vLLM's format, so that llmd's supervisor parses the simulator like the real thing:
`(APIServer pid=N) LEVEL MM-DD HH:MM:SS [file.py:L] message` (vLLM 0.32), uvicorn's own access
lines `INFO:      - "POST /v1/... HTTP/1.1" 200`, and the periodic stats line every few seconds.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys

from llmd.engine.sim.core import SimEngine

VLLM_FORMAT = (
    "(APIServer pid=%(process)d) %(levelname)s %(asctime)s [%(filename)s:%(lineno)d] %(message)s"
)
stats_log = logging.getLogger("vllm.v1.metrics.loggers")


def configure_logging() -> None:
    """vLLM's line format on stdout; the level from `VLLM_LOGGING_LEVEL` (default INFO)."""
    level = os.environ.get("VLLM_LOGGING_LEVEL", "INFO").upper()
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter(VLLM_FORMAT, datefmt="%m-%d %H:%M:%S"))
    root = logging.getLogger("vllm")
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = False
    access = logging.getLogger("uvicorn.access")
    access_handler = logging.StreamHandler(sys.stdout)
    access_handler.setFormatter(logging.Formatter("%(levelname)s:     %(message)s"))
    access.handlers[:] = [access_handler]
    access.setLevel(level)
    access.propagate = False


async def log_stats(engine: SimEngine, interval_s: float) -> None:
    """vLLM's periodic stats line, at INFO while there is traffic (DEBUG when idle)."""
    prompt = generation = 0
    while True:
        await asyncio.sleep(interval_s)
        d_prompt = engine.prompt_tokens_done - prompt
        d_gen = engine.generation_tokens_done - generation
        prompt, generation = engine.prompt_tokens_done, engine.generation_tokens_done
        idle = not (d_prompt or d_gen or engine.num_running or engine.num_waiting)
        (stats_log.debug if idle else stats_log.info)(
            "Engine 000: Avg prompt throughput: %.1f tokens/s, Avg generation throughput: "
            "%.1f tokens/s, Running: %d reqs, Waiting: %d reqs, GPU KV cache usage: %.1f%%, "
            "Prefix cache hit rate: 0.0%%",
            d_prompt / interval_s,
            d_gen / interval_s,
            engine.num_running,
            engine.num_waiting,
            engine.scheduler.pool.usage * 100,
        )
