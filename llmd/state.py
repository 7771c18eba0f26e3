"""The daemon's shared state: config, engine, in-flight requests, admission, validation and the
observer, passed as one typed object (no `app.state` bag). The daemon builds it and wires it;
the proxy, the admin API and the operator actions read it, and its snapshot is the Status.
"""

from __future__ import annotations

import dataclasses
import time

from llmd import __version__
from llmd.admission.waiters import Admission
from llmd.config import Config
from llmd.engine.client import EngineClient
from llmd.errors import ApiError, Draining
from llmd.proxy.inflight import InFlight
from llmd.runtime import RuntimePaths
from llmd.status import Status
from llmd.supervisor.state import EngineState
from llmd.telemetry.events import recent_events
from llmd.telemetry.observer import Observer
from llmd.validation.validator import Validator


@dataclasses.dataclass
class DaemonState:
    """Config (the live one: a reload replaces it), the runtime paths, the engine's published
    state, admission (tenants, queues, capacity), the validator, the observer that accounts
    each request (metrics, windows, the request log line), the one HTTP client to the engine,
    the in-flight registry, the drain flag, and when llmd started (Unix time, s)."""

    config: Config
    paths: RuntimePaths
    engine: EngineState
    admission: Admission
    validator: Validator
    observer: Observer
    upstream: EngineClient
    inflight: InFlight = dataclasses.field(default_factory=lambda: InFlight())
    draining: bool = False
    started_at: float = dataclasses.field(default_factory=time.time)

    def unavailable(self) -> ApiError | None:
        """Why llmd admits no request now: Draining, or EngineUnavailable (503 with
        Retry-After); None when it admits."""
        if self.draining:
            return Draining(
                "llmd is draining and admits no new requests",
                retry_after_s=self.config.server.drain_timeout_s,
            )
        if not self.engine.serving:
            return self.engine.unavailable_error()
        return None

    def snapshot(self) -> Status:
        """The Status now: the sum of each part's own snapshot."""
        now = time.monotonic()
        telemetry = self.observer.as_snapshot()
        inflight = self.inflight.as_snapshot(now)
        admission = self.admission.as_snapshot(now, inflight.by_tenant)
        return Status(
            llmd_version=__version__,
            taken_at=time.time(),
            listen=self.config.server.listen,
            draining=self.draining,
            in_flight=inflight.count,
            engine=self.engine.as_snapshot(telemetry.engine, now),
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
            queued=inflight.queued,
        )
