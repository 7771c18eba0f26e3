"""The request observer: each finished or refused request updates the metrics, the latency and
throughput windows, the tallies and the usage kept in the state directory (`usage`, written by
llmd/daemon/usage.py), and writes its one log line (never the prompt text).

It also holds the latest engine and GPU readings, which the telemetry scraper writes and the
Status snapshot reads. Everything here runs on the event loop; a call costs a few microseconds
(scripts/bench_observability.py measures it).
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Protocol

from llmd.admission.classes import Priority
from llmd.config import ANONYMOUS
from llmd.engine.metrics import EngineSample
from llmd.gpu.nvml import GpuReading
from llmd.logs import OncePerConfig
from llmd.status import (
    CountsStatus,
    EndpointStatus,
    EngineLatencyStatus,
    GpuStatus,
    KvCacheStatus,
    LatencyStatus,
    LatencyWindows,
    ThroughputStatus,
)
from llmd.telemetry.engine_window import EngineWindow
from llmd.telemetry.gaps import TokenGaps
from llmd.telemetry.metrics import OTHER_ENDPOINT, ProxyMetrics, input_length_label
from llmd.telemetry.outcomes import Ending, Outcome, Tallies, classify
from llmd.telemetry.tracers import tracing_for
from llmd.telemetry.tracing import Traced, Tracing
from llmd.telemetry.windows import LatencyWindow, RateWindow
from llmd.usage.records import UsageBatch

# The request log line's logger, bound once per logging configuration (llmd/logs.py).
request_log = OncePerConfig("llmd.requests")

# Error codes that mean a request waited too long (admission's queue timeout and deadlines).
TIMEOUT_CODES = frozenset({"queue_timeout", "deadline_exceeded"})
DEFAULT_TOP_TENANTS = 20
# The `strategy` and `outcome` of llmd_deploys_total (llmd/releases/: Strategy, the ended
# events).
DEPLOY_STRATEGIES = ("replace", "canary")
DEPLOY_OUTCOMES = ("promoted", "rolled_back", "failed")


class Record(Ending, Traced, Protocol):
    """What the observer reads from a request (how it ended, `Ending`; its figures and times,
    `Traced`; and these): `llmd.inflight.Exchange` is one."""

    stream: bool
    input_tokens: int
    finish_reason: str | None
    gaps: TokenGaps | None


class TtftSink(Protocol):
    """Who else takes each answered streamed request's TTFT (a non-streamed answer's first
    byte comes with its last token): the SLO guard (llmd/admission/slo.py)."""

    def observed(self, request_class: str, ttft_s: float, queue_s: float) -> None: ...


class Windows:
    """The sliding windows behind the snapshot's percentiles and throughput."""

    def __init__(self) -> None:
        self.queue_wait = LatencyWindow()
        self.ttft = LatencyWindow()
        self.e2e = LatencyWindow()
        # requests, prompt tokens, output tokens
        self.throughput = RateWindow()
        # ended requests, by endpoint (a dozen at most: the table's names)
        self.endpoints: dict[str, RateWindow] = {}

    def endpoint(self, name: str) -> RateWindow:
        """The ended-requests window of endpoint `name`."""
        window = self.endpoints.get(name)
        if window is None:
            window = self.endpoints[name] = RateWindow()
        return window

    def status(self, window_s: int) -> LatencyStatus:
        """Queue wait, TTFT and end-to-end percentiles over the last `window_s` seconds."""
        return LatencyStatus(
            queue_wait=self.queue_wait.percentiles(window_s),
            ttft=self.ttft.percentiles(window_s),
            e2e=self.e2e.percentiles(window_s),
        )


@dataclasses.dataclass(frozen=True)
class TelemetrySnapshot:
    """The observer's part of the Status: the primary backend's KV cache and latest scrape
    (`engine`, for its running and waiting gauges), the GPUs, latency over 1 and 5 minutes,
    throughput, the counts since start, and the requests by endpoint."""

    engine: EngineSample | None
    kv_cache: KvCacheStatus
    gpus: GpuStatus
    latency: LatencyWindows
    throughput: ThroughputStatus
    counts: CountsStatus
    endpoints: tuple[EndpointStatus, ...] = ()


class Observer:
    """Request accounting plus the latest engine and GPU readings (see the module docstring)."""

    def __init__(self, top_tenants: int = DEFAULT_TOP_TENANTS, log_requests: str = "all") -> None:
        self.metrics = ProxyMetrics(top_tenants)
        self.windows = Windows()
        self.tallies = Tallies()
        # Per hour, tenant, model and outcome: what llmd/daemon/usage.py writes to the store.
        self.usage = UsageBatch()
        self.log_requests = log_requests
        # The latest scrape of each backend's /metrics, and its prompt and generation token
        # rates (per s), by backend name.
        self.engine_samples: dict[str, EngineSample] = {}
        self.engine_token_rates: dict[str, tuple[float, float]] = {}
        # Each backend's reads over the last minute: the engine's side of latency.
        self.engine_windows: dict[str, EngineWindow] = {}
        self.gpus = GpuReading()
        self.ttft_sink: TtftSink | None = None
        # The release a backend runs (None: none recorded): the `release` label of each
        # request's latency and backend series, so a canary's two releases read apart.
        self.release_of: Callable[[str], str | None] = lambda backend: None
        # Called with each request once it ended, refused ones included (a canary's figures).
        self.on_ended: Callable[[Record], None] | None = None
        # The client's trace context to the backend, and llmd's own spans when an OTLP
        # endpoint is set (`trace_to`).
        self.tracing = Tracing()
        self._otlp_endpoint = ""

    def configure(self, top_tenants: int, log_requests: str) -> None:
        """Take new settings (a reload): the tenant label bound (tenants already labelled keep
        their label, so no series flaps) and which finished requests get a log line."""
        self.metrics.tenant.limit = top_tenants
        self.log_requests = log_requests

    @property
    def otlp_endpoint(self) -> str:
        """Where llmd's spans go now ("": nowhere)."""
        return self._otlp_endpoint

    def tracing_to(self, otlp_endpoint: str) -> Callable[[], None]:
        """The step that exports llmd's spans to `otlp_endpoint` ("" for none) from then on,
        replacing the tracing in use when the endpoint changed (a reload). Raises ConfigError
        now, when the OpenTelemetry SDK is needed and not installed."""
        if otlp_endpoint == self._otlp_endpoint:
            return lambda: None
        tracing = tracing_for(otlp_endpoint)

        def use() -> None:
            self.tracing.shutdown()
            self.tracing, self._otlp_endpoint = tracing, otlp_endpoint

        return use

    def engine_window(self, backend: str) -> EngineWindow:
        """The window of `backend`'s reads (made on its first read)."""
        window = self.engine_windows.get(backend)
        if window is None:
            window = self.engine_windows[backend] = EngineWindow()
        return window

    def engine_latency(self) -> dict[str, EngineLatencyStatus]:
        """The engine's side of latency over the last minute, by backend (those that report
        it)."""
        found = {name: window.status() for name, window in self.engine_windows.items()}
        return {name: status for name, status in found.items() if status is not None}

    def as_snapshot(
        self, primary: str | None = None, live: dict[str, tuple[int, int]] | None = None
    ) -> TelemetrySnapshot:
        """The readings, windows and tallies now, for the Status: the KV cache and engine
        sample of backend `primary`, the engines' token rates summed over every backend, and
        each endpoint's counts with its live requests (`live`: relayed, queued by endpoint,
        the in-flight registry's)."""
        sample = self.engine_samples.get(primary) if primary is not None else None
        kv_cache = KvCacheStatus()
        if sample is not None:
            kv_cache = KvCacheStatus(
                usage=sample.kv_usage,
                capacity_tokens=sample.kv_capacity_tokens,
                block_size=sample.block_size,
                num_blocks=sample.num_gpu_blocks,
            )
        requests, prompt, output = self.windows.throughput.rates(60, 3)
        known = list(self.engine_token_rates.values())
        rates = (sum(r[0] for r in known), sum(r[1] for r in known)) if known else None
        return TelemetrySnapshot(
            engine=sample,
            kv_cache=kv_cache,
            gpus=GpuStatus(self.gpus.devices, self.gpus.reason),
            latency=LatencyWindows(self.windows.status(60), self.windows.status(300)),
            throughput=ThroughputStatus(
                requests_per_s=round(requests, 2),
                prompt_tokens_per_s=round(prompt, 1),
                output_tokens_per_s=round(output, 1),
                engine_prompt_tokens_per_s=round(rates[0], 1) if rates else None,
                engine_generation_tokens_per_s=round(rates[1], 1) if rates else None,
            ),
            counts=self.tallies.as_counts(),
            endpoints=self._endpoints(live or {}),
        )

    def _endpoints(self, live: dict[str, tuple[int, int]]) -> tuple[EndpointStatus, ...]:
        """Each endpoint that ended a request (in the order it first did) or has one live."""
        ended_by = self.tallies.by_endpoint
        rows = []
        for name in [*ended_by, *(name for name in live if name not in ended_by)]:
            ended = ended_by.get(name) or Counter[Outcome]()
            in_flight, queued = live.get(name, (0, 0))
            window = self.windows.endpoints.get(name)
            rate = window.rates(60, 1)[0] if window is not None else 0.0
            rows.append(
                EndpointStatus(
                    name,
                    in_flight=in_flight,
                    queued=queued,
                    requests=ended.total(),
                    answered=ended[Outcome.OK],
                    rejected=ended[Outcome.REJECTED],
                    cancelled=ended[Outcome.CANCELLED],
                    aborted=ended[Outcome.ABORTED],
                    errors=ended[Outcome.ERROR],
                    requests_per_s=round(rate, 2),
                )
            )
        return tuple(rows)

    def finished(self, record: Record) -> None:
        """Account a request once it has ended, in exactly one count (llmd/telemetry/
        outcomes.py): as a rejection when it was refused for its own sake (`record.rejected`:
        validation, admission, a drain that turned the queue away, a backend's 4xx), else as a
        request relayed to a backend (answered, cancelled, aborted or failed)."""
        now = record.ended_at or time.monotonic()
        if self.on_ended is not None:
            self.on_ended(record)
        outcome, label = classify(record)
        self.tracing.finished(record, outcome.value)
        status = record.status or 0
        if outcome is Outcome.REJECTED:
            if record.backend is not None:  # the backend answered: a 4xx for the client's input
                release = self.release_of(record.backend) or ""
                self.metrics.backend_requests.inc(
                    (record.backend, record.model or "", "answered", release)
                )
            self.rejected(
                record.request_id,
                status,
                label,
                record.started_at,
                record.tenant,
                record.request_class,
                record.model,
                endpoint=record.endpoint,
                ended_at=now,
                queue_s=None if record.queued_at is None else now - record.queued_at,
            )
            return
        m = self.metrics
        tenant = m.tenant(record.tenant)
        klass = record.request_class
        model = record.model or ""
        endpoint = record.endpoint
        length = input_length_label(record.prompt_tokens)
        release = (self.release_of(record.backend) if record.backend is not None else None) or ""
        admitted = record.admitted_at or now
        queue_s = admitted - (record.queued_at or admitted)
        ttft_s = None if record.first_byte_at is None else record.first_byte_at - record.started_at
        total_s = now - record.started_at
        code = "" if outcome is Outcome.CANCELLED else label
        m.requests.inc((tenant, klass, str(status), model, endpoint, outcome.value, code))
        if record.backend is not None:
            answered = status and status < 500 and record.error_code is None
            m.backend_requests.inc(
                (record.backend, model, "answered" if answered else "failed", release)
            )
        series = (tenant, klass, length, model, endpoint, release)
        m.queue_wait.observe(series, queue_s)
        self.windows.queue_wait.add(queue_s)
        # TTFT of streamed answers only: a non-streamed answer's first byte comes with its last
        # token, so its "first token" time is its whole time.
        if ttft_s is not None and status == 200 and record.stream:
            m.ttft.observe(series, ttft_s)
            self.windows.ttft.add(ttft_s)
            if self.ttft_sink is not None:
                self.ttft_sink.observed(klass, ttft_s, queue_s)
        if outcome is Outcome.OK:
            m.e2e.observe(series, total_s)
            self.windows.e2e.add(total_s)
        gaps = _gaps(record, status)
        if gaps is not None:
            m.gaps.observe_sorted((klass, model), gaps.sorted())
        # Every prompt's tokens once each (all inputs of an embeddings request, the engine's
        # own count where validation only bounded them), not the longest one's.
        prompt = record.input_tokens or record.prompt_tokens or 0
        m.prompt_tokens.inc((tenant, endpoint), prompt)
        m.generation_tokens.inc((tenant,), record.output_tokens)
        self.windows.throughput.add(1, prompt, record.output_tokens)
        self.windows.endpoint(endpoint).add(1)
        self.tallies.add(outcome, label, endpoint)
        self.usage.add(
            record.tenant, model, outcome.value, record.input_tokens, record.output_tokens,
            time.time(),
        )  # fmt: skip
        phase = None
        if outcome is Outcome.CANCELLED:
            phase = label
            m.cancellations.inc((phase,))
        if record.error_code in TIMEOUT_CODES:
            self._timeout(klass)
        if self.log_requests == "all" or (
            self.log_requests == "failures" and outcome is not Outcome.OK
        ):
            request_log.get().info(
                "request_finished",
                request_id=record.request_id,
                tenant=record.tenant,
                **{"class": klass},
                endpoint=endpoint,
                model=record.model,
                backend=record.backend,
                status=status,
                prompt_tokens=record.prompt_tokens,
                output_tokens=record.output_tokens,
                queue_ms=_ms(queue_s),
                ttft_ms=_ms(ttft_s),
                total_ms=_ms(total_s),
                **_gap_fields(gaps),
                outcome=outcome.value,
                **_detail(record, phase, code),
            )

    def rejected(
        self,
        request_id: str,
        status: int,
        code: str,
        started_at: float,
        tenant: str = ANONYMOUS,
        request_class: str = Priority.NORMAL.label,
        model: str | None = None,
        *,
        endpoint: str = OTHER_ENDPOINT,
        ended_at: float | None = None,
        queue_s: float | None = None,
    ) -> None:
        """Account a request refused for its own sake (`code`: the error's name,
        `ApiError.reason`, the rejection reason; `model`: the served model it asked for, when
        it got that far; `endpoint`: its entry's name in the endpoint table, `other` when
        refused before llmd knew it; `queue_s`: how long it waited in admission's queue, for
        one turned away from there)."""
        m = self.metrics
        rejected = Outcome.REJECTED.value
        m.requests.inc(
            (m.tenant(tenant), request_class, str(status), model or "", endpoint, rejected, code)
        )
        m.rejections.inc((code,))
        self.tallies.add(Outcome.REJECTED, code, endpoint)
        self.usage.add(tenant, model or "", rejected, 0, 0, time.time())
        self.windows.throughput.add(1, 0, 0)
        self.windows.endpoint(endpoint).add(1)
        if code in TIMEOUT_CODES:
            self._timeout(request_class)
        if self.log_requests != "off":
            request_log.get().info(
                "request_finished",
                request_id=request_id,
                tenant=tenant,
                **{"class": request_class},
                endpoint=endpoint,
                status=status,
                **({} if queue_s is None else {"queue_ms": _ms(queue_s)}),
                total_ms=_ms((ended_at or time.monotonic()) - started_at),
                outcome=rejected,
                code=code,
            )

    def retried(self, backend: str, model: str | None) -> None:
        """Account a request that failed on `backend` before the first byte and was sent once
        more to another backend of its pool."""
        release = self.release_of(backend) or ""
        self.metrics.backend_requests.inc((backend, model or "", "retried", release))

    def deploys_of(self, engines: Iterable[str]) -> None:
        """Show a 0 for each outcome of each strategy of `engines`, so that an alert on the
        counter's increase sees the first deploy end (a series born at 1 shows none)."""
        for engine in engines:
            for strategy in DEPLOY_STRATEGIES:
                for outcome in DEPLOY_OUTCOMES:
                    self.metrics.deploys.declare((engine, strategy, outcome))

    def deploy_ended(self, engine: str, strategy: str, outcome: str) -> None:
        """Count a deploy of `engine` that ended: promoted, rolled_back or failed."""
        self.metrics.deploys.inc((engine, strategy, outcome))

    def _timeout(self, request_class: str) -> None:
        self.metrics.timeouts.inc((request_class,))
        self.tallies.timeouts += 1


def _gaps(record: Record, status: int) -> TokenGaps | None:
    """The gaps of a streamed request answered 200 that sent two chunks or more."""
    gaps = record.gaps
    if not record.stream or status != 200 or gaps is None or gaps.max_s is None:
        return None
    return gaps


def _gap_fields(gaps: TokenGaps | None) -> dict[str, object]:
    """The request line's client-side inter-token latency: the median and the longest gap
    between the chunks of its stream (ms)."""
    if gaps is None:
        return {}
    return {"itl_p50_ms": _ms(gaps.p50_s), "itl_max_ms": _ms(gaps.max_s)}


def _detail(record: Record, phase: str | None, code: str) -> dict[str, object]:
    detail: dict[str, object] = {}
    if phase is not None:
        detail["phase"] = phase
    if code:
        detail["code"] = code
    if record.finish_reason is not None:
        detail["finish_reason"] = record.finish_reason
    return detail


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 1)
