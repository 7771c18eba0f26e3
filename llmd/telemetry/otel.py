"""llmd's own spans of a request, through the OpenTelemetry SDK (imported only when
`telemetry.otlp_endpoint` is set: llmd/telemetry/tracing.py).

    llmd request   (SERVER; arrival to the end; child of the client's traceparent)
    ├─ validation  (arrival to joining admission's queue)
    ├─ queue wait  (in the queue until released to a backend)
    └─ relay       (CLIENT; released to the end; its context is the backend's traceparent,
                    so vLLM's own spans nest under it)

Attributes: request id, tenant, class, endpoint, model, backend, outcome, status, error code,
prompt and output tokens, time to first byte. Never the prompt or the answer's text. Spans
are made from the request's own times (monotonic, converted to the wall clock), mostly once
it has ended; a batch processor exports them off the event loop.
"""

from __future__ import annotations

import time
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from llmd import __version__
from llmd.telemetry.tracing import Traced, Tracing

# Outcomes that are the request's failure, not the client's: the span's status is ERROR.
_FAILED = frozenset({"error", "aborted"})


class OtlpTracing(Tracing):
    """Spans of each request made with `provider`'s tracer (its processors export them)."""

    def __init__(self, provider: TracerProvider) -> None:
        self.provider = provider
        self.tracer = provider.get_tracer("llmd", __version__)
        self.propagator = TraceContextTextMapPropagator()

    @classmethod
    def exporting_to(cls, endpoint: str) -> OtlpTracing:
        """Spans batched and sent over OTLP/HTTP (protobuf) to `endpoint` (the traces URL,
        e.g. http://127.0.0.1:4318/v1/traces), as service `llmd`."""
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        resource = Resource.create({"service.name": "llmd", "service.version": __version__})
        provider = TracerProvider(resource=resource)
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
        return cls(provider)

    def outgoing(self, request: Traced) -> dict[str, str]:
        """Begin the request's spans (once: a retry on another backend keeps them) and give
        the relay span's context as the backend's traceparent."""
        spans = self._begin(request, time.monotonic())
        carrier: dict[str, str] = {}
        self.propagator.inject(carrier, context=trace.set_span_in_context(spans[1]))
        return carrier

    def finished(self, request: Traced, outcome: str) -> None:
        ended = request.ended_at or time.monotonic()
        root, relay = request.trace or self._begin(request, ended, relayed=False)
        attributes = _attributes(request, outcome)
        root.set_attributes(attributes)
        if outcome in _FAILED:
            root.set_status(Status(StatusCode.ERROR, request.error_code or outcome))
        if relay is not None:
            relay.set_attribute("llmd.backend", request.backend or "")
            if request.first_byte_at is not None:
                relay.add_event("first byte", timestamp=_wall_ns(request.first_byte_at))
            relay.end(end_time=_wall_ns(ended))
        root.end(end_time=_wall_ns(ended))
        request.trace = None

    def shutdown(self) -> None:
        self.provider.shutdown()

    def _begin(self, request: Traced, now: float, *, relayed: bool = True) -> tuple[Any, Any]:
        """The request's root span and, when it reached a backend, its relay span (begun at its
        release); the validation and queue spans, which are over by then, are made whole."""
        if request.trace is not None:
            return tuple(request.trace)
        parent = self.propagator.extract(dict(request.trace_context))
        root = self.tracer.start_span(
            "llmd request",
            context=parent,
            kind=SpanKind.SERVER,
            start_time=_wall_ns(request.started_at),
            attributes={"llmd.request_id": request.request_id},
        )
        inside = trace.set_span_in_context(root)
        validated = request.queued_at or (request.admitted_at if relayed else now)
        self._whole("validation", inside, request.started_at, validated or now)
        if request.queued_at is not None:
            self._whole("queue wait", inside, request.queued_at, request.admitted_at or now)
        relay = None
        if relayed:
            relay = self.tracer.start_span(
                "relay",
                context=inside,
                kind=SpanKind.CLIENT,
                start_time=_wall_ns(request.admitted_at or now),
            )
        request.trace = (root, relay)
        return root, relay

    def _whole(self, name: str, context: Any, start: float, end: float) -> None:
        span = self.tracer.start_span(name, context=context, start_time=_wall_ns(start))
        span.end(end_time=_wall_ns(max(start, end)))


def _attributes(request: Traced, outcome: str) -> dict[str, str | int | float]:
    """The request's figures, under OpenTelemetry's GenAI names where they exist
    (gen_ai.request.model, gen_ai.usage.*) and llmd's own otherwise; no text."""
    found: dict[str, str | int | float] = {
        "llmd.tenant": request.tenant,
        "llmd.class": request.request_class,
        "llmd.endpoint": request.endpoint,
        "llmd.outcome": outcome,
        "gen_ai.request.model": request.model or "",
        "llmd.backend": request.backend or "",
        "gen_ai.usage.output_tokens": request.output_tokens,
    }
    if request.prompt_tokens is not None:
        found["gen_ai.usage.input_tokens"] = request.prompt_tokens
    if request.status is not None:
        found["http.response.status_code"] = request.status
    if request.error_code:
        found["llmd.code"] = request.error_code
    if request.first_byte_at is not None:
        found["llmd.ttfb_s"] = round(request.first_byte_at - request.started_at, 6)
    return found


def _wall_ns(monotonic_s: float) -> int:
    """A `time.monotonic()` instant as Unix time in nanoseconds (what spans carry)."""
    return time.time_ns() - int((time.monotonic() - monotonic_s) * 1e9)
