"""A client's W3C traceparent reaches the engine through llmd (the fake engine's record of
headers): as it came without llmd's spans, as the relay span's context with them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from llmd.telemetry.otel import OtlpTracing
from tests.support.fake_engine import FakeEngine, ProxyStack
from tests.support.waiting import wait_for
from tests.validation.conftest import STRING_TEMPLATE, make_tokenizer_dir

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"
CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyStack]:
    model = make_tokenizer_dir(tmp_path_factory.mktemp("model"), STRING_TEMPLATE)
    runtime = Path(tmp_path_factory.mktemp("run"))
    with ProxyStack.run(model, runtime, 4096, engine=FakeEngine()) as running:
        yield running


def test_the_clients_traceparent_reaches_the_engine_as_it_came(stack: ProxyStack) -> None:
    """No OTLP endpoint: the engine gets the client's traceparent and tracestate unchanged;
    a request without them sends none."""
    headers = {"traceparent": TRACEPARENT, "tracestate": "vendor=1"}
    assert httpx.post(stack.base_url + "/v1/chat/completions", json=CHAT, headers=headers)
    got = stack.engine.headers[-1]
    assert (got["traceparent"], got["tracestate"]) == (TRACEPARENT, "vendor=1")
    httpx.post(stack.base_url + "/v1/chat/completions", json=CHAT).raise_for_status()
    assert "traceparent" not in stack.engine.headers[-1]


def test_with_llmds_spans_the_engine_joins_under_the_relay_span(stack: ProxyStack) -> None:
    """With spans exported: the engine's traceparent has the client's trace id and the relay
    span's id, and the request's four spans are exported once it has ended."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    observer = stack.ctx.observer
    before, observer.tracing = observer.tracing, OtlpTracing(provider)
    try:
        answer = httpx.post(
            stack.base_url + "/v1/chat/completions", json=CHAT, headers={"traceparent": TRACEPARENT}
        )
        answer.raise_for_status()
        assert wait_for(lambda: len(exporter.get_finished_spans()) == 4, 10)
    finally:
        observer.tracing = before
    relay = next(span for span in exporter.get_finished_spans() if span.name == "relay")
    sent = stack.engine.headers[-1]["traceparent"]
    assert sent == f"00-{TRACE_ID}-{relay.context.span_id:016x}-01"
