"""What the supervisor asks its engine's socket besides sleep and wake: `/health` (is it up),
and, once it is ready, what it serves (`/v1/models`) and which vLLM it is (`/version`)."""

from __future__ import annotations

import contextlib

from llmd.config import EngineConfig
from llmd.engine.args import engine_auth_headers
from llmd.engine.versions import ASSUMED, EngineApi
from llmd.engine.wire import Pool
from llmd.supervisor.state import EngineState, model_cards, model_ids

# How long one of these calls may take, seconds.
CALL_TIMEOUT_S = 5


async def healthy(probe: Pool, engine: EngineConfig) -> bool:
    """Whether the engine answers GET /health with 200 within `CALL_TIMEOUT_S` (vLLM answers
    503 once its engine core is dead while HTTP stays up)."""
    try:
        headers = engine_auth_headers(engine)
        answer = await probe.fetch("GET", "/health", headers=headers, timeout_s=CALL_TIMEOUT_S)
    except (TimeoutError, OSError):
        return False
    return answer.status == 200


async def read_served(probe: Pool, engine: EngineConfig, state: EngineState) -> None:
    """Read the ready engine's models into `state` (`cards`, `served_models`, `max_model_len`
    of the first: left as they were when the listing fails or lacks them) and its API version
    (`api`: vLLM's `/version`, `ASSUMED` when it does not answer one)."""
    with contextlib.suppress(TimeoutError, OSError, ValueError, KeyError, IndexError):
        headers = engine_auth_headers(engine)
        listed = await probe.fetch("GET", "/v1/models", headers=headers, timeout_s=CALL_TIMEOUT_S)
        models = listed.json()
        state.cards = model_cards(models)
        state.served_models = model_ids(models)
        state.max_model_len = int(models["data"][0]["max_model_len"])
    state.api = ASSUMED
    with contextlib.suppress(TimeoutError, OSError, ValueError, KeyError, TypeError):
        version = await probe.fetch("GET", "/version", timeout_s=CALL_TIMEOUT_S)
        state.api = EngineApi.parse(version.json()["version"])
