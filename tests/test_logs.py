"""The log rate limiter: storms become a bounded number of lines plus a summary, counters keep
every event, successful request lines are never limited, engine output repeats collapse."""

from __future__ import annotations

import io
import json
import logging
import os
from typing import Any

import pytest
import structlog

from llmd.config import LoggingConfig
from llmd.logs import (
    LIBRARY_EVENT,
    SUPPRESSED_EVENT,
    LogStream,
    OncePerConfig,
    configure_logging,
    rate_key,
)
from llmd.telemetry.observer import Observer
from tests.support.exchanges import finished_exchange
from tests.support.log_capture import Captured

STORM = 10_000


def test_a_storm_of_identical_failures_is_bounded_and_counted(captured_logs: Captured) -> None:
    """10,000 identical engine failures: 10 lines of each kind, one summary each after the
    window, and every failure in the Prometheus counters."""
    log = structlog.get_logger("llmd.proxy")
    observer = Observer()
    for i in range(STORM):
        log.warning("request_failed", request_id=f"r{i}", code="engine_error", error="HTTP 500")
        observer.finished(
            finished_exchange(request_id=f"r{i}", status=502, error_code="engine_error")
        )
    assert len(captured_logs.lines()) == 20
    captured_logs.clock.now += 10
    captured_logs.limiter.flush()
    lines = captured_logs.lines()
    summaries = [line for line in lines if line["event"] == SUPPRESSED_EVENT]
    assert len(lines) == 22
    assert sorted((s["similar_to"], s["count"]) for s in summaries) == [
        ("request_failed", STORM - 10),
        ("request_finished", STORM - 10),
    ]
    assert summaries[0]["message"] == f"suppressed {STORM - 10} similar"
    assert captured_logs.limiter.suppressed == {
        "request_failed": STORM - 10,
        "request_finished": STORM - 10,
    }
    metrics = observer.metrics.registry
    assert (
        metrics.get_sample_value(
            "llmd_requests_total",
            {
                "tenant": "anonymous",
                "class": "normal",
                "status": "502",
                "model": "tiny",
                "endpoint": "chat",
                "outcome": "error",
                "code": "engine_error",
            },
        )
        == STORM
    )
    assert observer.tallies.errors == {"engine_error": STORM}


def test_the_summary_also_comes_with_the_next_line_of_its_key(captured_logs: Captured) -> None:
    """Without a flush, the first line of the next window is preceded by the summary."""
    log = structlog.get_logger("test")
    for _ in range(15):
        log.error("engine_metrics_failed", reason="refused")
    captured_logs.clock.now += 11
    log.error("engine_metrics_failed", reason="refused")
    events = [line["event"] for line in captured_logs.lines()]
    assert events == ["engine_metrics_failed"] * 10 + [SUPPRESSED_EVENT, "engine_metrics_failed"]


def test_successful_request_lines_are_never_limited(captured_logs: Captured) -> None:
    """One line per finished request: 500 successful requests give 500 lines."""
    observer = Observer()
    for i in range(500):
        observer.finished(finished_exchange(request_id=f"r{i}"))
    lines = captured_logs.lines()
    assert len(lines) == 500 and all(line["outcome"] == "ok" for line in lines)


def test_engine_output_repeats_collapse_by_message(captured_logs: Captured) -> None:
    """vLLM lines differing only in numbers share a key; different messages do not."""
    log = structlog.get_logger("llmd.supervisor")
    for i in range(100):
        log.warning("engine_output", level="warning", line=f"Sequence group {i} is preempted")
    log.warning("engine_output", level="warning", line="Casting torch.bfloat16 to float16")
    lines = [line["line"] for line in captured_logs.lines()]
    assert len(lines) == 11 and lines[-1] == "Casting torch.bfloat16 to float16"


def test_keys_use_the_kind_of_event_not_its_ids() -> None:
    """Request ids and timings vary per line and are left out of the key."""
    one = {"event": "request_failed", "request_id": "a", "code": "engine_error", "ms": 3}
    two = {"event": "request_failed", "request_id": "b", "code": "engine_error", "ms": 9}
    assert rate_key(one) == rate_key(two) == ("request_failed", "engine_error")
    assert rate_key({"event": "request_finished", "outcome": "ok"}) is None


def test_library_log_lines_pass_the_same_limiter(captured_logs: Captured) -> None:
    """uvicorn's and aiohttp's stdlib log records become `library_logged` events, rendered
    as llmd's lines (with the traceback) and limited per message like llmd's own."""
    uvicorn_log = logging.getLogger("uvicorn.error")
    for i in range(30):
        uvicorn_log.warning("Invalid HTTP request received from 10.0.0.%d.", i)
    try:
        raise ValueError("boom")
    except ValueError:
        logging.getLogger("aiohttp.client").error("Unclosed session", exc_info=True)
    lines = captured_logs.lines()
    assert len(lines) == 11
    first = lines[0]
    assert first["event"] == LIBRARY_EVENT and first["logger"] == "uvicorn.error"
    assert first["message"] == "Invalid HTTP request received from 10.0.0.0."
    assert first["level"] == "warning"
    assert lines[-1]["logger"] == "aiohttp.client" and "ValueError: boom" in lines[-1]["exception"]
    assert captured_logs.limiter.suppressed == {LIBRARY_EVENT: 20}


def test_a_log_stream_whose_reader_has_gone_drops_lines_quietly() -> None:
    """Writing to a pipe nobody reads: the line is dropped, not raised, and the descriptor then
    points at /dev/null, so the interpreter's last flush cannot fail either."""
    read, write = os.pipe()
    os.close(read)
    with os.fdopen(write, "w") as pipe:
        stream = LogStream(pipe)
        assert stream.write("x" * 10) == 10
        stream.flush()
        assert stream.lost and os.readlink(f"/proc/self/fd/{write}") == os.devnull
        assert stream.write("y\n") == 2


def test_a_json_line_is_the_bytes_json_dumps_writes_from_one_encoder(
    captured_logs: Captured, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request's line is byte for byte what structlog's JSONRenderer wrote with
    `json.dumps` (its fallback for objects JSON has no type for included), and writing lines
    makes no JSON encoder: the renderer keeps one (issue 37, the request line's cost)."""
    made = []
    init = json.JSONEncoder.__init__

    def counted(self: json.JSONEncoder, *args: Any, **kwargs: Any) -> None:
        made.append(1)
        init(self, *args, **kwargs)

    monkeypatch.setattr(json.JSONEncoder, "__init__", counted)
    log = structlog.get_logger("llmd.requests")
    for i in range(3):
        log.info("request_finished", request_id=f"r{i}", ttft_ms=None, total_ms=1.5, odd=object)
    assert made == []
    monkeypatch.setattr(json.JSONEncoder, "__init__", init)
    line = captured_logs.stream.getvalue().splitlines()[-1]
    event = json.loads(line)
    assert event["odd"] == repr(object) and event["event"] == "request_finished"
    assert line == json.dumps(event)


def test_a_logger_bound_once_per_configuration_follows_a_new_one(
    captured_logs: Captured,
) -> None:
    """`OncePerConfig` gives the same bound logger while the configuration stands, and one
    bound under the new configuration once logging is configured again."""
    once = OncePerConfig("llmd.requests")
    first = once.get()
    assert once.get() is first
    first.info("request_finished", request_id="a")
    again = io.StringIO()
    configure_logging(LoggingConfig(format="json"), stream=again)
    assert once.get() is not first
    once.get().info("request_finished", request_id="b")
    assert [json.loads(line)["request_id"] for line in again.getvalue().splitlines()] == ["b"]
    assert [line["request_id"] for line in captured_logs.lines()] == ["a"]
