"""The request observer: outcomes, cancellations by phase, timeouts, tallies, and the one log
line per request with its fields (and never the prompt)."""

from __future__ import annotations

from llmd.telemetry.observer import Observer
from tests.support.exchanges import finished_exchange
from tests.support.log_capture import Captured

LINE_FIELDS = {
    "request_id", "tenant", "class", "status", "prompt_tokens", "output_tokens", "queue_ms",
    "ttft_ms", "total_ms", "outcome", "event", "level", "timestamp", "model", "backend",
    "endpoint",
}  # fmt: skip


def test_the_request_line_has_the_contracted_fields(captured_logs: Captured) -> None:
    """A completed request: one INFO line with id, tenant, class, model, backend, status,
    tokens and times."""
    Observer().finished(finished_exchange(queue_s=0.1, ttft_s=0.3, total_s=1.0, prompt_tokens=42))
    (line,) = captured_logs.lines()
    assert set(line) == LINE_FIELDS
    assert line["event"] == "request_finished" and line["level"] == "info"
    assert (line["outcome"], line["status"], line["prompt_tokens"]) == ("ok", 200, 42)
    assert (line["queue_ms"], line["ttft_ms"], line["total_ms"]) == (100.0, 300.0, 1000.0)
    assert (line["model"], line["backend"]) == ("tiny", "main")


def test_cancellations_are_counted_by_phase(captured_logs: Captured) -> None:
    """A client leaving before the first byte is a prefill cancellation, after it a decode one."""
    observer = Observer()
    observer.finished(finished_exchange(client_gone=True, ttft_s=None))
    observer.finished(finished_exchange(client_gone=True, ttft_s=0.1))
    observer.finished(finished_exchange(client_gone=True, ttft_s=0.1))
    assert dict(observer.tallies.cancellations) == {"prefill": 1, "decode": 2}
    value = observer.metrics.registry.get_sample_value
    assert value("llmd_cancellations_total", {"phase": "decode"}) == 2
    assert [line["phase"] for line in captured_logs.lines()] == ["prefill", "decode", "decode"]


def test_rejections_and_timeouts(captured_logs: Captured) -> None:
    """Refused requests count by reason; a queue timeout also counts as a timeout."""
    observer = Observer()
    observer.rejected("a", 400, "context_length_exceeded", started_at=0.0)
    observer.rejected("b", 503, "queue_timeout", started_at=0.0, request_class="batch")
    assert dict(observer.tallies.rejections) == {"context_length_exceeded": 1, "queue_timeout": 1}
    assert observer.tallies.timeouts == 1
    value = observer.metrics.registry.get_sample_value
    assert value("llmd_timeouts_total", {"class": "batch"}) == 1
    lines = captured_logs.lines()
    assert [(line["outcome"], line["code"]) for line in lines] == [
        ("rejected", "context_length_exceeded"),
        ("rejected", "queue_timeout"),
    ]


def test_only_completed_requests_feed_the_end_to_end_window() -> None:
    """An engine error counts as an error and stays out of the e2e percentiles."""
    observer = Observer(log_requests="off")
    observer.finished(finished_exchange(total_s=2.0))
    observer.finished(finished_exchange(status=502, error_code="engine_error", total_s=9.0))
    assert observer.windows.e2e.percentiles(60).count == 1
    assert observer.tallies.errors == {"engine_error": 1} and observer.tallies.requests == 2


def test_the_failures_setting_logs_only_what_went_wrong(captured_logs: Captured) -> None:
    """logging.requests = "failures": no line for a completed request, one for a failure."""
    observer = Observer(log_requests="failures")
    observer.finished(finished_exchange())
    observer.finished(finished_exchange(status=502, error_code="engine_error"))
    assert [line["outcome"] for line in captured_logs.lines()] == ["error"]


def test_the_log_line_gives_the_finish_reason(captured_logs: Captured) -> None:
    """A request that ended with finish reason `length` says so on its log line."""
    answer = finished_exchange()
    answer.finish_reason = "length"
    Observer().finished(answer)
    assert captured_logs.lines()[-1]["finish_reason"] == "length"
