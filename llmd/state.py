"""What the proxy needs from the rest of llmd, passed as one typed object (no `app.state` bag)."""

from __future__ import annotations

import dataclasses
import time

from llmd.admission.waiters import Admission
from llmd.config import Config
from llmd.proxy.inflight import InFlight
from llmd.runtime import RuntimePaths
from llmd.supervisor.state import EngineState
from llmd.telemetry.observer import Observer


@dataclasses.dataclass
class DaemonState:
    """Config, the engine's published state, the drain flag, the in-flight registry, the
    observer that accounts each request (metrics, windows, the request log line), admission
    (tenants, queues, capacity; its `counters` are what admission did), and when llmd started
    (Unix time, s)."""

    config: Config
    paths: RuntimePaths
    engine: EngineState
    inflight: InFlight = dataclasses.field(default_factory=lambda: InFlight())
    draining: bool = False
    observer: Observer = dataclasses.field(default_factory=Observer)
    started_at: float = dataclasses.field(default_factory=time.time)
    admission: Admission = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.admission = Admission(self.config, self.engine)
