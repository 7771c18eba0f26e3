"""The log rate limiter: storms become a bounded number of lines plus a summary, counters keep
every event, successful request lines are never limited, engine output repeats collapse."""

from __future__ import annotations

import logging
import os

import structlog

from llmd.logs import LIBRARY_EVENT, SUPPRESSED_EVENT, LogStream, rate_key
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
