"""The model names the engine answers to: each `--served-model-name` and each LoRA adapter.

They are what the engine's `GET /v1/models` lists (vLLM 0.32: the base model under every served
name, then the adapters, `--lora-modules` and those loaded at run time). The supervisor reads
the list when a boot becomes ready (`EngineState.served_models`); a request naming a model not
in it makes llmd read the list again, at most once per `REFRESH_S` (concurrent requests share
one read), so an adapter loaded at run time is accepted from then on.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping

import aiohttp
import structlog

from llmd.errors import ModelNotFound
from llmd.supervisor.state import EngineState, model_ids

log = structlog.get_logger("llmd.validation")

# Least time between two reads of the engine's /v1/models prompted by unknown names.
REFRESH_S = 1.0
_TIMEOUT = aiohttp.ClientTimeout(total=5)


class ServedModels:
    """The names a request's `model` may take, for one engine (`engine`'s published list, or
    `fallback`, the configured name, before the first boot is ready)."""

    def __init__(
        self,
        engine: EngineState,
        session: Callable[[], aiohttp.ClientSession],
        headers: Callable[[], Mapping[str, str]] = dict,
    ) -> None:
        self.engine = engine
        self.fallback = ""
        self._session = session
        self._headers = headers
        self._read: tuple[str, ...] = ()
        self._read_for: float | None = None  # the boot (EngineState.ready_at) it was read from
        self._read_at = float("-inf")
        self._reading: asyncio.Task[None] | None = None

    def names(self) -> tuple[str, ...]:
        """The names accepted now."""
        ready_at = self.engine.ready_at
        if self._read and ready_at is not None and self._read_for == ready_at:
            return self._read
        return self.engine.served_models or (self.fallback,)

    async def check(self, name: str) -> None:
        """Accept `name`, reading the engine's list again if it is not known yet. Raises
        ModelNotFound (404, as vLLM answers it)."""
        if name in self.names():
            return
        if time.monotonic() - self._read_at >= REFRESH_S or self._reading is not None:
            if self._reading is None:
                self._reading = asyncio.create_task(self._read_models())
            await asyncio.shield(self._reading)
        if name not in self.names():
            raise ModelNotFound(
                name, list(self.names()), self.engine.api.names_models_when_not_found
            )

    async def _read_models(self) -> None:
        ready_at = self.engine.ready_at
        try:
            async with self._session().get(
                "http://engine/v1/models", headers=dict(self._headers()), timeout=_TIMEOUT
            ) as response:
                listing = await response.json() if response.status == 200 else None
            ids = model_ids(listing)
            if ids and ready_at is not None:
                self._read, self._read_for = ids, ready_at
        except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as exc:
            log.info("engine_models_read_failed", error=repr(exc))
        finally:
            self._read_at = time.monotonic()
            self._reading = None
