"""Backends as the router sees them: one engine or upstream's live figures, and pools by model.

A backend is a vLLM child llmd supervises (an engine) or an OpenAI-compatible server it does not
(an upstream). A pool is every backend serving one model name; a name no backend serves is
unknown (the proxy answers 404, as vLLM does).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable

from llmd.routing.breaker import BreakerState


@dataclasses.dataclass(frozen=True)
class EngineLoad:
    """The engine's load as it reports it: requests `running` and `waiting`, `kv_usage`
    (0..1, vllm:kv_cache_usage_perc) and `kv_tokens` (capacity; None if not reported)."""

    running: int = 0
    waiting: int = 0
    kv_usage: float = 0.0
    kv_tokens: int | None = None


class BackendKind(enum.StrEnum):
    """ENGINE: a vLLM child llmd supervises; UPSTREAM: a server llmd only sends requests to."""

    ENGINE = "engine"
    UPSTREAM = "upstream"


@dataclasses.dataclass(frozen=True)
class Backend:
    """One backend at one moment."""

    name: str
    kind: BackendKind
    models: tuple[str, ...]
    seats: int  # how many requests llmd lets it run at once (admission's max_in_flight for it)
    in_flight: int = 0  # llmd's own requests there
    reserved_tokens: int = 0  # their prompt + max_tokens
    # Its own /metrics (running, waiting, KV usage 0..1, KV capacity in tokens; None: not known,
    # as for an upstream that exports none).
    engine: EngineLoad | None = None
    serving: bool = True  # the supervisor's word for an engine, the health probe's for an upstream
    breaker: BreakerState | None = None  # an upstream's breaker state (None for an engine)
    reachable: bool = True  # whether it lets a request through now

    @property
    def available(self) -> bool:
        """Whether a request may be sent to it now."""
        return self.serving and self.reachable

    @property
    def sequences(self) -> int:
        """Requests at the backend: llmd's own, or what the engine reports running and
        waiting if that is more (an upstream may serve other clients too)."""
        engine = self.engine
        reported = engine.running + engine.waiting if engine is not None else 0
        return max(self.in_flight, reported)

    @property
    def fill(self) -> float:
        """How full it is, 0..1 (above 1 when overcommitted): the larger of its seat fill
        (sequences / seats) and its KV fill (the engine's KV usage, or llmd's reserved tokens
        over the KV capacity if that is more)."""
        fill = self.sequences / max(self.seats, 1)
        engine = self.engine
        if engine is not None:
            fill = max(fill, engine.kv_usage)
            if engine.kv_tokens:
                fill = max(fill, self.reserved_tokens / engine.kv_tokens)
        return fill

    @property
    def one_request(self) -> float:
        """The fill one more request adds to its seats: 1 / seats."""
        return 1.0 / max(self.seats, 1)


def group_pools(backends: Iterable[tuple[str, Iterable[str]]]) -> dict[str, tuple[str, ...]]:
    """Pools from (backend name, models it serves) pairs: model name -> backend names, in the
    order given (the config's). A model absent from the result is unknown."""
    pools: dict[str, list[str]] = {}
    for name, models in backends:
        for model in models:
            members = pools.setdefault(model, [])
            if name not in members:
                members.append(name)
    return {model: tuple(names) for model, names in pools.items()}
