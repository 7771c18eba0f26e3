"""Every backend llmd routes to, by name: the supervised engines' published states, the
upstreams' states, and one client each (llmd/engine/client.py).

The pools and each backend's capacity are admission's (llmd/admission/pools.py); this is the
I/O side: where each backend is reached, what it said of its models, and its part of the
Status. Supervisors write the engine states; upstream probes write the upstream states.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator, Mapping
from typing import Any

import structlog

from llmd.admission.pools import PoolCapacity
from llmd.backends.upstream import UpstreamState
from llmd.config.backends import MAIN, EngineConfig, UpstreamConfig
from llmd.engine.args import has_switch
from llmd.engine.client import EngineClient
from llmd.engine.metrics import EngineSample
from llmd.engine.runner import EngineKind, engine_kind
from llmd.engine.versions import ASSUMED, EngineApi
from llmd.routing.backend import BackendKind
from llmd.routing.breaker import BreakerState
from llmd.runtime import RuntimePaths
from llmd.status import EngineLatencyStatus, EngineStatus, ModelStatus
from llmd.supervisor.state import EngineState

log = structlog.get_logger("llmd.backends")


class Fleet:
    """The backends by name (engines first, then upstreams, config order)."""

    def __init__(self, paths: RuntimePaths) -> None:
        self.paths = paths
        self.engines: dict[str, EngineState] = {}
        self.gpus: dict[str, tuple[str, ...]] = {}
        self.kinds: dict[str, EngineKind] = {}  # each engine's, from its flags
        # Engines run with --enable-force-include-usage: every stream of theirs carries its
        # usage (continuous too, vLLM 0.32 `should_include_usage`), nothing to ask for.
        self.usage_forced: set[str] = set()
        self.upstreams: dict[str, UpstreamState] = {}
        self.clients: dict[str, EngineClient] = {}
        self._retired: list[EngineClient] = []

    # -- membership ---------------------------------------------------------------------------

    def add_engine(self, name: str, engine: EngineConfig) -> EngineState:
        """A supervised engine on its socket in the runtime directory; its published state."""
        state = self.engines[name] = EngineState(model=engine.model_name)
        self.clients[name] = EngineClient(self.paths.socket_of(name))
        self.configure_engine(name, engine)
        return state

    def configure_engine(self, name: str, engine: EngineConfig) -> None:
        """Engine `name` runs `engine` (at start-up, on a reload, for a deploy): its GPUs, its
        kind (generate or pooling, from its flags) and its client's API key follow."""
        self.gpus[name] = engine.gpus
        self.kinds[name] = engine_kind(engine.args)
        self.usage_forced.discard(name)
        if has_switch(engine.args, "--enable-force-include-usage"):
            self.usage_forced.add(name)
        self.clients[name].configure(engine)

    def add_upstream(self, name: str, upstream: UpstreamConfig) -> UpstreamState:
        """An upstream at its URL, with the key its `api_key_env` names (logged when unset)."""
        key = os.environ.get(upstream.api_key_env) if upstream.api_key_env else None
        if upstream.api_key_env and not key:
            log.warning("upstream_key_missing", upstream=name, variable=upstream.api_key_env)
        state = self.upstreams[name] = UpstreamState(name, upstream.url, upstream.models)
        self.clients[name] = EngineClient(upstream.url, api_key=key)
        return state

    def remove(self, name: str) -> None:
        """Forget a backend. Its client stays open until `close()`: requests still running
        there finish on it."""
        self.engines.pop(name, None)
        self.gpus.pop(name, None)
        self.kinds.pop(name, None)
        self.usage_forced.discard(name)
        self.upstreams.pop(name, None)
        self._retired.append(self.clients.pop(name))

    def client(self, name: str) -> EngineClient:
        """The client of backend `name`. Raises KeyError."""
        return self.clients[name]

    def primary(self) -> EngineState:
        """The `main` engine, else the first one; a placeholder when llmd has only upstreams."""
        name = self.primary_name()
        return self.engines[name] if name in self.engines else EngineState()

    def primary_name(self) -> str | None:
        """The backend the Status's `engine` and `kv_cache` keys show: the `main` engine, else
        the first engine, else the first upstream (None: no backend)."""
        if MAIN in self.engines:
            return MAIN
        return next(iter([*self.engines, *self.upstreams]), None)

    async def close(self) -> None:
        """Close every client (at shutdown)."""
        for client in [*self.clients.values(), *self._retired]:
            await client.close()

    # -- models -------------------------------------------------------------------------------

    def serving_models(self, name: str) -> tuple[str, ...]:
        """What backend `name` serves now: an engine every name its /v1/models listed when it
        became ready (each --served-model-name, its LoRA adapters), its configured name until
        then; an upstream its configured or listed models."""
        if name in self.engines:
            state = self.engines[name]
            return state.served_models or (state.model,)
        return self.upstreams[name].models

    def members(self, model: str) -> Iterator[str]:
        """The backends serving `model`, engines first."""
        for name in [*self.engines, *self.upstreams]:
            if model in self.serving_models(name):
                yield name

    def client_of(self, model: str) -> EngineClient:
        """A client of a backend serving `model`, a serving one when there is one (for its
        /tokenize). Raises KeyError when none serves it."""
        members = list(self.members(model))
        serving = [n for n in members if n not in self.engines or self.engines[n].serving]
        return self.clients[(serving or members)[0]]

    def kinds_of(self, model: str) -> frozenset[EngineKind] | None:
        """The kinds of the engines serving `model` (None: an upstream serves it too, whose
        kind llmd does not know: it answers for itself)."""
        members = list(self.members(model))
        if any(name not in self.engines for name in members):
            return None
        return frozenset(self.kinds.get(name, EngineKind.GENERATE) for name in members)

    def fingerprint(self, name: str) -> bytes | None:
        """The `"system_fingerprint":"..."` bytes engine `name`'s warm-up answered at its
        serving boot (b"": it stamps none; None: not read, or `name` is an upstream, whose
        replicas llmd does not know)."""
        engine = self.engines.get(name)
        return None if engine is None else engine.fingerprint

    def fingerprinted(self, model: str) -> bool:
        """Whether every backend serving `model` is an engine whose fingerprint llmd read
        (`fingerprint`), so that a stream routed to any of them can be given back the
        fingerprint an ask for its usage takes off (llmd/endpoints/stream_usage.py), and
        none streams its usage unasked (`usage_forced`: the client would see the ask)."""
        members = list(self.members(model))
        return bool(members) and all(
            self.fingerprint(name) is not None and name not in self.usage_forced for name in members
        )

    def max_model_len(self, model: str) -> int | None:
        """The smallest context length any backend serving `model` reported (None: none did):
        a request that fits it fits every backend of the pool."""
        lengths = [
            self.engines[n].max_model_len if n in self.engines else
            self.upstreams[n].max_model_len(model)
            for n in self.members(model)
        ]  # fmt: skip
        known = [length for length in lengths if length]
        return min(known) if known else None

    def api(self, model: str) -> EngineApi:
        """The vLLM release of the first engine serving `model` (upstreams are not asked:
        the release llmd is built against)."""
        engines = [self.engines[n] for n in self.members(model) if n in self.engines]
        return engines[0].api if engines else ASSUMED

    def card(self, model: str) -> dict[str, Any]:
        """`model`'s entry for llmd's `/v1/models`: a backend's own card for it (vLLM's, with
        `max_model_len`, `root` and, for an adapter, `parent`), else that backend's first card
        under this id, else a minimal one; with `context_length` beside `max_model_len` (the
        name clients such as Open WebUI and Cline read)."""
        for name in self.members(model):
            cards = (
                self.engines[name].cards if name in self.engines else
                self.upstreams[name].cards
            )  # fmt: skip
            card = cards.get(model) or next(iter(cards.values()), None)
            if card:
                card = {**card, "id": model}
                if isinstance(card.get("max_model_len"), int):
                    card["context_length"] = card["max_model_len"]
                return card
        return {"id": model, "object": "model", "owned_by": "llmd"}

    def upstream_models(self) -> list[str]:
        """Models backends listed that no engine table names: upstreams' models, and the
        other names engines answer to (for validation's sources)."""
        engine_models = {state.model for state in self.engines.values()}
        listed = [m for state in self.engines.values() for m in state.served_models]
        listed += [m for state in self.upstreams.values() for m in state.models]
        return [m for m in dict.fromkeys(listed) if m not in engine_models]

    # -- status -------------------------------------------------------------------------------

    def as_snapshot(
        self,
        capacity: PoolCapacity,
        samples: Mapping[str, EngineSample],
        in_flight: Mapping[str, int],
        now: float,
        latency: Mapping[str, EngineLatencyStatus] | None = None,
    ) -> tuple[tuple[EngineStatus, ...], tuple[ModelStatus, ...]]:
        """One entry per backend (each with its latest metrics `samples`, llmd's requests
        there, `in_flight`, and its side of latency, `latency`), and one per served model, at
        `now` (monotonic s)."""
        latency = latency or {}
        views = {view.name: view for view in capacity.backends(now)}
        entries = []
        for name, engine in self.engines.items():
            sample = samples.get(name)
            entries.append(
                dataclasses.replace(
                    engine.as_snapshot(sample, now),
                    name=name,
                    kind=BackendKind.ENGINE.value,
                    gpus=self.gpus.get(name, ()),
                    latency=latency.get(name),
                    **self._load(name, sample, in_flight, capacity),
                )
            )
        for name, upstream in self.upstreams.items():
            view = views.get(name)
            breaker = view.breaker if view is not None else None
            sample = samples.get(name)
            entries.append(
                EngineStatus(
                    state=upstream.phase(breaker or BreakerState.CLOSED),
                    pid=None,
                    model=", ".join(upstream.models),
                    version="",
                    max_model_len=None,
                    uptime_s=None,
                    restarts=0,
                    last_exit_reason=None,
                    last_exit_detail=upstream.error,
                    running=sample.running if sample else None,
                    waiting=sample.waiting if sample else None,
                    metrics_age_s=round(now - sample.taken_at, 2) if sample else None,
                    name=name,
                    kind=BackendKind.UPSTREAM.value,
                    url=upstream.url,
                    breaker=breaker.value if breaker is not None else None,
                    latency=latency.get(name),
                    **self._load(name, sample, in_flight, capacity),
                )
            )
        models = tuple(
            ModelStatus(model, capacity.pool(model) or (), capacity.available(model, now))
            for model in capacity.models()
        )
        return tuple(entries), models

    def _load(
        self,
        name: str,
        sample: EngineSample | None,
        in_flight: Mapping[str, int],
        capacity: PoolCapacity,
    ) -> dict[str, Any]:
        return {
            "kv_usage": sample.kv_usage if sample else None,
            "kv_capacity_tokens": sample.kv_capacity_tokens if sample else None,
            "in_flight": in_flight.get(name, 0),
            "draining": name in capacity.names() and capacity.draining(name),
        }


@dataclasses.dataclass(frozen=True)
class PoolLimits:
    """A model's context length as validation reads it (the fleet's smallest for the model),
    and the vLLM release of its engines."""

    fleet: Fleet
    model: str

    @property
    def max_model_len(self) -> int | None:
        return self.fleet.max_model_len(self.model)

    @property
    def api(self) -> EngineApi:
        return self.fleet.api(self.model)
