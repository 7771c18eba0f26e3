"""What llmd reports to systemd: status lines, READY once, load-time extensions, watchdog."""

from __future__ import annotations

import time

from llmd.supervisor.exits import ExitReason
from llmd.supervisor.state import EnginePhase, EngineState
from llmd.systemd.reporter import ServiceReporter, status_line


class Recorder:
    """A Notifier stand-in that records the messages."""

    def __init__(self, watchdog: float | None = 15.0) -> None:
        self.sent: list[dict[str, str | int]] = []
        self.watchdog_interval_s = watchdog

    def notify(self, **fields: str | int) -> None:
        self.sent.append(fields)


def test_status_lines_name_the_phase() -> None:
    """STATUS= says loading, serving, restarting (n/max: reason), draining."""
    engine = EngineState(phase=EnginePhase.STARTING, boot_started_at=time.monotonic() - 12)
    assert (
        status_line(engine, draining=False, in_flight=0, max_failed_boots=5)
        == "loading model (12s)"
    )
    engine = EngineState(
        phase=EnginePhase.RESTARTING, failed_boots=1, last_exit=ExitReason("oom", "x")
    )
    assert (
        status_line(engine, draining=False, in_flight=0, max_failed_boots=5)
        == "restarting engine (2/5): oom"
    )
    engine = EngineState(phase=EnginePhase.SERVING, model="tiny")
    assert (
        status_line(engine, draining=False, in_flight=3, max_failed_boots=5)
        == "serving tiny: 3 in flight"
    )
    assert (
        status_line(engine, draining=True, in_flight=3, max_failed_boots=5)
        == "draining: 3 in flight"
    )


def test_ready_once_after_the_engine_serves_and_extensions_before() -> None:
    """EXTEND_TIMEOUT_USEC while loading, READY=1 exactly once when serving, STATUS on change."""
    recorder = Recorder()
    reporter = ServiceReporter(recorder, max_failed_boots=5)  # type: ignore[arg-type]
    engine = EngineState(phase=EnginePhase.STARTING, boot_started_at=time.monotonic())
    reporter.tick(
        {"main": engine}, ready=engine.serving, draining=False, in_flight=0, making_progress=True
    )
    engine.phase, engine.model = EnginePhase.SERVING, "tiny"
    reporter.tick(
        {"main": engine}, ready=engine.serving, draining=False, in_flight=0, making_progress=True
    )
    reporter.tick(
        {"main": engine}, ready=engine.serving, draining=False, in_flight=0, making_progress=True
    )
    first, second, third = recorder.sent
    assert "EXTEND_TIMEOUT_USEC" in first and "READY" not in first
    assert second["READY"] == 1 and second["STATUS"] == "serving tiny: 0 in flight"
    assert third == {"WATCHDOG": 1}


def test_no_watchdog_ping_without_progress() -> None:
    """A stalled supervisor gets no WATCHDOG=1, so systemd restarts llmd."""
    recorder = Recorder()
    reporter = ServiceReporter(recorder, max_failed_boots=5)  # type: ignore[arg-type]
    engine = EngineState(phase=EnginePhase.SERVING, model="tiny")
    reporter.tick(
        {"main": engine}, ready=engine.serving, draining=False, in_flight=0, making_progress=False
    )
    assert "WATCHDOG" not in recorder.sent[0]


def test_ready_after_a_reload_only_when_the_engine_serves() -> None:
    """A reload while the engine boots sends no READY=1; the first tick that finds it serving
    does. A reload while it serves answers READY=1 at once."""
    recorder = Recorder(watchdog=None)
    reporter = ServiceReporter(recorder, max_failed_boots=5)  # type: ignore[arg-type]
    engine = EngineState(phase=EnginePhase.RESTARTING, boot_started_at=time.monotonic())
    reporter.reloading()
    reporter.reloaded(ready=engine.serving)
    reporter.tick(
        {"main": engine}, ready=engine.serving, draining=False, in_flight=0, making_progress=True
    )
    assert not any("READY" in message for message in recorder.sent)
    engine.phase, engine.model = EnginePhase.SERVING, "tiny"
    reporter.tick(
        {"main": engine}, ready=engine.serving, draining=False, in_flight=0, making_progress=True
    )
    assert recorder.sent[-1]["READY"] == 1
    reporter.reloading()
    reporter.reloaded(ready=engine.serving)
    assert recorder.sent[-1]["READY"] == 1 and "RELOADING" in recorder.sent[-2]
