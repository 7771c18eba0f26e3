"""Reading the engines' model lists again when a request names a model no pool holds, so an
adapter loaded while an engine runs is served from then on.

- vLLM 0.32: `POST /v1/load_lora_adapter` with VLLM_ALLOW_RUNTIME_LORA_UPDATING=True; the
  adapter joins its `GET /v1/models`.
- At most one read per REFRESH_S; concurrent misses share the read in progress.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from typing import Any

import structlog

from llmd.engine.client import EngineClient
from llmd.supervisor.state import EngineState, model_cards

log = structlog.get_logger("llmd.backends")

# Least time between two reads prompted by unknown names (s).
REFRESH_S = 1.0
# How long one read of a model list may take (s).
READ_TIMEOUT_S = 5.0


class ModelRelisting:
    """Reads the serving engines' `/v1/models` on demand. `engines` and `clients` are the
    fleet's (by backend name, read live); `on_change(name)` runs for each engine whose list
    changed, after its `served_models` took the new list (the backends move it into the new
    pools and give them validators)."""

    def __init__(
        self,
        engines: Mapping[str, EngineState],
        clients: Mapping[str, EngineClient],
        on_change: Callable[[str], None],
    ) -> None:
        self.engines = engines
        self.clients = clients
        self.on_change = on_change
        self._read_at = float("-inf")
        self._reading: asyncio.Task[None] | None = None

    async def relist(self) -> None:
        """Read every serving engine's list again, unless a read ended less than REFRESH_S ago
        (then nothing: the names are as fresh as allowed); a read in progress is awaited."""
        if self._reading is None:
            if time.monotonic() - self._read_at < REFRESH_S:
                return
            self._reading = asyncio.create_task(self._read_all())
        await asyncio.shield(self._reading)

    async def _read_all(self) -> None:
        try:
            for name, state in list(self.engines.items()):
                client = self.clients.get(name)
                if not state.serving or client is None:
                    continue
                cards = await _read(client)
                ids = tuple(cards)
                if ids and ids != state.served_models and self.engines.get(name) is state:
                    state.served_models, state.cards = ids, cards
                    log.info("engine_models_relisted", engine=name, models=list(ids))
                    self.on_change(name)
        finally:
            self._read_at = time.monotonic()
            self._reading = None


async def _read(client: EngineClient) -> dict[str, dict[str, Any]]:
    """The cards `client`'s backend lists, by id (empty when it cannot be read)."""
    try:
        answer = await client.fetch("GET", "/v1/models", timeout_s=READ_TIMEOUT_S)
        return model_cards(answer.json()) if answer.status == 200 else {}
    except (TimeoutError, OSError, ValueError) as exc:
        log.info("engine_models_read_failed", error=repr(exc))
        return {}
