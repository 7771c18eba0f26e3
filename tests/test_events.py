"""The recent-events list: which log events it keeps, its bound, and its place after the log
rate limiter."""

from __future__ import annotations

import io

import structlog

from llmd.config import LoggingConfig
from llmd.events import RecentEvents, recent_events
from llmd.logs import configure_logging


def record(events: RecentEvents, method: str, name: str, **fields: object) -> None:
    events(None, method, {"event": name, **fields})


def test_keeps_warnings_notable_info_and_refused_requests() -> None:
    """Warnings, errors, engine/drain info events and refused requests are kept; ordinary
    finished requests and chatter are not."""
    events = RecentEvents(clock=lambda: 100.0)
    record(events, "info", "request_finished", outcome="ok", status=200)
    record(events, "info", "request_finished", outcome="rejected", code="queue_full")
    record(events, "info", "engine_ready", pid=7, boot_s=1.5)
    record(events, "info", "telemetry_scraped")
    record(events, "error", "engine_exited", reason="oom", detail=None)
    record(events, "warn", "log_lines_suppressed", message="suppressed 9 similar")
    kept = events.recent()
    assert [e.event for e in kept] == [
        "request_finished",
        "engine_ready",
        "engine_exited",
        "log_lines_suppressed",
    ]
    assert kept[0].message == "outcome=rejected code=queue_full" and kept[0].at == 100.0
    assert kept[2].level == "error" and kept[2].message == "reason=oom"
    assert kept[3].level == "warning"


def test_is_bounded_and_keeps_the_newest() -> None:
    """Past its capacity the oldest events go; messages are cut to 200 characters."""
    events = RecentEvents(capacity=3)
    for i in range(10):
        record(events, "warning", "engine_output", line=f"{i}" * 300)
    kept = events.recent()
    assert len(kept) == 3 and kept[0].message.startswith("line=777")
    assert all(len(e.message) == 200 for e in kept)


def test_a_log_storm_reaches_the_list_as_its_limited_lines() -> None:
    """Behind the rate limiter, 1,000 identical failures add at most the limiter's lines."""
    configure_logging(LoggingConfig(rate_limit_lines=5), stream=io.StringIO())
    before = len([e for e in recent_events().recent() if e.event == "storm_failed"])
    log = structlog.get_logger("test")
    for _ in range(1000):
        log.error("storm_failed", code="x")
    after = len([e for e in recent_events().recent() if e.event == "storm_failed"])
    assert after - before <= 5
