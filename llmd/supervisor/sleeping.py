"""The calls that put a vLLM engine to sleep and wake it (its dev-mode sleep endpoints, vLLM
0.32), and the one-token generation a woken engine must answer before it serves again."""

from __future__ import annotations

import asyncio
import json
import time

from llmd.config import EngineConfig
from llmd.engine.args import engine_auth_headers
from llmd.engine.runner import EngineKind, engine_kind
from llmd.engine.wire import Pool

# How long one sleep or wake call may take (a level 2 wake of a large model reloads weights).
CALL_TIMEOUT_S = 300.0
# Between tries of the first token of a woken engine.
FIRST_TOKEN_RETRY_S = 0.1


async def call_sleep(probe: Pool, engine: EngineConfig, level: int) -> bool:
    """POST /sleep?level=`level` (1 or 2); whether the engine said 200."""
    return await _post(probe, engine, f"/sleep?level={level}")


async def call_wake_up(probe: Pool, engine: EngineConfig) -> bool:
    """POST /wake_up; whether the engine said 200 (it answers once awake)."""
    return await _post(probe, engine, "/wake_up")


async def first_token(probe: Pool, engine: EngineConfig, timeout_s: float) -> bool:
    """Whether a one-token generation succeeds within `timeout_s` (tried again until then): a
    woken engine's /health answers before it can generate. A pooling engine, which generates
    nothing, is asked /health instead."""
    deadline = time.monotonic() + timeout_s
    pooling = engine_kind(engine.args) is EngineKind.POOLING
    path = "/health" if pooling else "/v1/completions"
    ping = {"model": engine.model_name, "prompt": "ping", "max_tokens": 1}
    method, body = ("GET", b"") if pooling else ("POST", json.dumps(ping).encode())
    headers = {**engine_auth_headers(engine), "content-type": "application/json"}
    while time.monotonic() < deadline:
        remaining = max(0.1, deadline - time.monotonic())
        try:
            answer = await probe.fetch(method, path, body, headers, timeout_s=remaining)
            if answer.status == 200:
                return True
        except (TimeoutError, OSError):
            pass
        await asyncio.sleep(FIRST_TOKEN_RETRY_S)
    return False


async def _post(probe: Pool, engine: EngineConfig, path: str) -> bool:
    try:
        headers = engine_auth_headers(engine)
        answer = await probe.fetch("POST", path, headers=headers, timeout_s=CALL_TIMEOUT_S)
    except (TimeoutError, OSError):
        return False
    return answer.status == 200
