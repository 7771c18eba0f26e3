"""Tracing: the client's trace context passed on; llmd's own spans through the OpenTelemetry
SDK (its in-memory exporter), with the request's figures and never its text; nothing of
OpenTelemetry imported without an OTLP endpoint."""

from __future__ import annotations

import subprocess
import sys

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from llmd.errors import ConfigError
from llmd.proxy.tracecontext import trace_context
from llmd.telemetry.observer import Observer
from llmd.telemetry.otel import OtlpTracing
from llmd.telemetry.tracers import tracing_for
from llmd.telemetry.tracing import Tracing
from tests.support.exchanges import finished_exchange

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{CLIENT_SPAN}-01"


def in_memory() -> tuple[OtlpTracing, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return OtlpTracing(provider), exporter


def test_the_client_trace_context_is_read_when_well_formed() -> None:
    """traceparent (lowercased) and tracestate are kept; a malformed or all-zero traceparent,
    or a tracestate alone, gives nothing."""
    headers = [(b"TraceParent", TRACEPARENT.upper().encode()), (b"tracestate", b"k=v")]
    assert trace_context(headers) == (("traceparent", TRACEPARENT), ("tracestate", "k=v"))
    zero = f"00-{'0' * 32}-{CLIENT_SPAN}-01".encode()
    for bad in ([(b"traceparent", b"00-xyz")], [(b"traceparent", zero)], [(b"tracestate", b"a=b")]):
        assert trace_context(bad) == ()


def test_without_spans_the_context_goes_on_as_it_came() -> None:
    """No OTLP endpoint: the backend gets the client's headers unchanged, none when it sent
    none."""
    exchange = finished_exchange()
    assert Tracing().outgoing(exchange) == {}
    exchange.trace_context = (("traceparent", TRACEPARENT), ("tracestate", "k=v"))
    assert Tracing().outgoing(exchange) == {"traceparent": TRACEPARENT, "tracestate": "k=v"}


def test_a_relayed_request_makes_four_spans_under_the_clients_trace() -> None:
    """llmd request (child of the client's span) with validation, queue wait and relay; the
    backend's traceparent is the relay span's; the root carries tenant, class, model,
    backend, outcome and token counts."""
    tracing, exporter = in_memory()
    observer = Observer(log_requests="off")
    observer.tracing = tracing
    exchange = finished_exchange(tenant="acme", queue_s=0.1, prompt_tokens=12, output_tokens=7)
    exchange.queued_at = exchange.started_at + 0.02
    exchange.trace_context = (("traceparent", TRACEPARENT),)
    sent = tracing.outgoing(exchange)
    assert tracing.outgoing(exchange) == sent  # a retry elsewhere keeps the same relay span
    observer.finished(exchange)
    spans = {span.name: span for span in exporter.get_finished_spans()}
    assert set(spans) == {"llmd request", "validation", "queue wait", "relay"}
    root, relay = spans["llmd request"], spans["relay"]
    assert root.parent is not None and f"{root.parent.span_id:016x}" == CLIENT_SPAN
    assert {f"{span.context.trace_id:032x}" for span in spans.values()} == {TRACE_ID}
    for child in ("validation", "queue wait", "relay"):
        assert spans[child].parent is not None
        assert spans[child].parent.span_id == root.context.span_id
    assert sent["traceparent"] == f"00-{TRACE_ID}-{relay.context.span_id:016x}-01"
    attributes = dict(root.attributes or {})
    assert attributes["llmd.tenant"] == "acme" and attributes["llmd.class"] == "normal"
    assert attributes["gen_ai.request.model"] == "tiny" and attributes["llmd.backend"] == "main"
    assert attributes["llmd.outcome"] == "ok"
    assert attributes["gen_ai.usage.input_tokens"] == 12
    assert attributes["gen_ai.usage.output_tokens"] == 7
    queue = spans["queue wait"]
    assert queue.end_time is not None and queue.start_time is not None
    assert (queue.end_time - queue.start_time) / 1e9 == pytest.approx(0.08, abs=0.005)
    assert [event.name for event in relay.events] == ["first byte"]


def test_a_refused_request_gets_its_spans_without_a_relay() -> None:
    """A request refused in validation (never relayed): its root span, with the outcome and
    code, and its validation span; a new trace when the client sent none."""
    tracing, exporter = in_memory()
    observer = Observer(log_requests="off")
    observer.tracing = tracing
    exchange = finished_exchange(status=400, error_code="context_length_exceeded", ttft_s=None)
    exchange.rejected, exchange.backend, exchange.queued_at = True, None, None
    exchange.admitted_at = None
    observer.finished(exchange)
    spans = {span.name: span for span in exporter.get_finished_spans()}
    assert set(spans) == {"llmd request", "validation"}
    attributes = dict(spans["llmd request"].attributes or {})
    assert attributes["llmd.outcome"] == "rejected"
    assert attributes["llmd.code"] == "context_length_exceeded"
    assert spans["llmd request"].parent is None


def test_no_span_attribute_carries_text() -> None:
    """Attributes are names, numbers and codes: none is longer than a model or tenant name
    (a prompt would be)."""
    tracing, exporter = in_memory()
    observer = Observer(log_requests="off")
    observer.tracing = tracing
    observer.finished(finished_exchange())
    for span in exporter.get_finished_spans():
        for key, value in (span.attributes or {}).items():
            assert key.startswith(("llmd.", "gen_ai.", "http.")), key
            assert not isinstance(value, str) or len(value) <= 64, (key, value)


def test_without_an_endpoint_nothing_of_opentelemetry_is_imported() -> None:
    """The daemon's modules, an observer and its tracing, with no OTLP endpoint: no module of
    OpenTelemetry is loaded."""
    code = (
        "import sys, llmd.daemon.daemon, llmd.proxy.app, llmd.cli\n"
        "from llmd.telemetry.observer import Observer\n"
        "observer = Observer(); observer.tracing_to('')()\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n"
    )
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert found.stdout.strip() == "[]"


def test_an_endpoint_without_the_sdk_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """telemetry.otlp_endpoint set and the SDK missing: a ConfigError naming the extra."""
    monkeypatch.setitem(sys.modules, "llmd.telemetry.otel", None)
    with pytest.raises(ConfigError, match=r"pip install 'llmd\[otel\]'"):
        tracing_for("http://127.0.0.1:4318/v1/traces")
    assert type(tracing_for("")) is Tracing
