"""The daemon's shared state: config, the backends, in-flight requests, admission, validation and
the observer, passed as one typed object (no `app.state` bag). The daemon builds it and wires
it; the proxy, the admin API and the operator actions read it, and its snapshot is the Status.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from llmd import __version__
from llmd.admission.control import Admission
from llmd.admission.pools import FIRST_PROBE_WAIT_S
from llmd.backends.fleet import Fleet
from llmd.backends.relisting import ModelRelisting
from llmd.config import Config
from llmd.errors import ApiError, Draining, EngineUnavailable, ModelNotFound
from llmd.events import recent_events
from llmd.inflight import InFlight
from llmd.runtime import RuntimePaths
from llmd.status import Status
from llmd.supervisor.state import EngineState
from llmd.telemetry.observer import Observer
from llmd.validation.pools import Validators


@dataclasses.dataclass
class DaemonState:
    """Config (the live one: a reload replaces it), the runtime paths, the backends (`fleet`:
    the engines' published states, the upstreams', a client each), admission (tenants, queues,
    each backend's capacity in pools), a validator per model, the observer that accounts each
    request (metrics, windows, the request log line), the in-flight registry, the drain flag,
    and when llmd started (Unix time, s)."""

    config: Config
    paths: RuntimePaths
    fleet: Fleet
    admission: Admission
    validators: Validators
    observer: Observer
    inflight: InFlight = dataclasses.field(default_factory=lambda: InFlight())
    # Reads the engines' model lists again for a name no pool holds (set by the daemon).
    relisting: ModelRelisting | None = None
    draining: bool = False
    # The latest deploy of each engine, as its snapshot (set by llmd/releases/orchestrator.py).
    deploys: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    started_at: float = dataclasses.field(default_factory=time.time)

    def __post_init__(self) -> None:
        self.observer.ttft_sink = self.admission.guard  # each answered request's TTFT
        self.observer.release_of = self.release_of

    def release_of(self, backend: str) -> str | None:
        """The release engine `backend` runs (None: an upstream, or none recorded)."""
        engine = self.fleet.engines.get(backend)
        return engine.release if engine is not None else None

    @property
    def engine(self) -> EngineState:
        """The `main` engine's state (or the first engine's): the Status's `engine`."""
        return self.fleet.primary()

    def unavailable(self) -> ApiError | None:
        """Why llmd admits no request at all now: Draining (503 with Retry-After); None when
        it admits (each model's pool may still be unavailable: `not_ready`)."""
        if self.draining:
            return Draining(
                "llmd is draining and admits no new requests",
                retry_after_s=self.config.server.drain_timeout_s,
            )
        return None

    def not_ready(self, model: str | None = None) -> ApiError | None:
        """Why `/ready` is not 200: draining, a model (`model`, or any llmd serves) with no
        backend that can take a request now (503 with the pool's Retry-After), an upstream
        whose models are not known yet; ModelNotFound (404) for a model llmd does not serve.
        None when ready."""
        error = self.unavailable()
        if error is not None:
            return error
        capacity, now = self.admission.capacity, time.monotonic()
        if model is not None and capacity.pool(model) is None:
            names = self.engine.api.names_models_when_not_found
            return ModelNotFound(model, list(capacity.models()), names)
        for name in [model] if model is not None else capacity.models():
            # A model whose engines sleep on demand is ready: it will be served.
            if not capacity.available(name, now) and capacity.wake_s(name, now) is None:
                return self.pool_unavailable(name)
        if model is None:
            for name, upstream in self.fleet.upstreams.items():
                if not upstream.models:
                    return EngineUnavailable(
                        f"upstream {name} has not listed its models yet",
                        retry_after_s=FIRST_PROBE_WAIT_S,
                    )
        return None

    def pool_unavailable(self, model: str) -> EngineUnavailable:
        """The 503 for a request to `model` while no backend of its pool can take one, with
        Retry-After from the breakers' cooldowns and the engines' restart backoff. A pool of
        one engine says what that engine is doing."""
        capacity, now = self.admission.capacity, time.monotonic()
        retry_after = capacity.retry_after_s(model, now)
        members = capacity.pool(model) or ()
        if len(members) == 1 and members[0] in self.fleet.engines:
            engine = self.fleet.engines[members[0]]
            if not engine.serving:
                error = engine.unavailable_error()
                error.retry_after_s = retry_after
                return error
        states = []
        for view in capacity.backends(now, model):
            state = "drained" if capacity.draining(view.name) else None
            if view.name in self.fleet.engines:
                state = state or self.fleet.engines[view.name].phase.value
            elif view.breaker is not None:
                unproven = "" if view.serving else ", no probe answered yet"
                state = state or f"breaker {view.breaker.value}{unproven}"
            states.append(f"{view.name} {state or 'unavailable'}")
        return EngineUnavailable(
            f"no backend serving {model} can take a request now ({', '.join(states)}); retry later",
            retry_after_s=retry_after,
        )

    def snapshot(self) -> Status:
        """The Status now: the sum of each part's own snapshot."""
        now = time.monotonic()
        primary = self.fleet.primary_name()
        inflight = self.inflight.as_snapshot(now)
        telemetry = self.observer.as_snapshot(primary, inflight.by_endpoint)
        admission = self.admission.as_snapshot(now, inflight.by_tenant)
        engines, models = self.fleet.as_snapshot(
            self.admission.capacity,
            self.observer.engine_samples,
            inflight.by_backend,
            now,
            self.observer.engine_latency(),
        )
        return Status(
            llmd_version=__version__,
            taken_at=time.time(),
            listen=self.config.server.listen,
            draining=self.draining,
            in_flight=inflight.count,
            engine=next(
                (entry for entry in engines if entry.name == primary),
                self.engine.as_snapshot(None, now),
            ),
            kv_cache=telemetry.kv_cache,
            gpus=telemetry.gpus,
            queues=admission.queues,
            tenants=admission.tenants,
            sequences=inflight.sequences,
            latency=telemetry.latency,
            throughput=telemetry.throughput,
            counts=telemetry.counts,
            started_at=round(self.started_at, 3),
            events=recent_events().recent(),
            engines=engines,
            models=models,
            queued=inflight.queued,
            guard=self.admission.guard.as_snapshot(),
            device_hold=self.admission.holds.as_snapshot(now),
            deploys=tuple(self.deploys.values()),
            endpoints=telemetry.endpoints,
        )
