"""Tracing across llmd: the client's W3C trace context (`traceparent`, `tracestate`) goes on to
the backend, and, with `telemetry.otlp_endpoint` set, llmd exports its own spans of each
request over OTLP (llmd/telemetry/otel.py, the OpenTelemetry SDK: `pip install 'llmd[otel]'`).

Without an endpoint nothing of OpenTelemetry is imported: `Tracing` passes the client's
headers (read by llmd/proxy/tracecontext.py) on as they came (W3C Trace Context; vLLM joins
the trace when run with `--otlp-traces-endpoint`).
"""

from __future__ import annotations

from typing import Any, Protocol


class Traced(Protocol):
    """What tracing reads from a request (`llmd.inflight.Exchange` is one): its client's
    trace context and the spans begun for it (`trace`, the tracer's own), its figures and
    times (monotonic s)."""

    request_id: str
    trace_context: tuple[tuple[str, str], ...]
    trace: Any
    endpoint: str
    tenant: str
    request_class: str
    model: str | None
    backend: str | None
    prompt_tokens: int | None
    output_tokens: int
    status: int | None
    error_code: str | None
    started_at: float
    queued_at: float | None
    admitted_at: float | None
    first_byte_at: float | None
    ended_at: float | None


class Tracing:
    """No spans: the client's trace context goes on to the backend as it came."""

    def outgoing(self, request: Traced) -> dict[str, str]:
        """The trace headers of the backend request for `request`."""
        return dict(request.trace_context)

    def finished(self, request: Traced, outcome: str) -> None:
        """`request` ended with `outcome` (ok, rejected, cancelled, aborted, error)."""

    def shutdown(self) -> None:
        """Export what is pending and stop (at llmd's shutdown, or when replaced)."""
