"""llmd's logging configured into a buffer, with a fresh rate limiter on a settable clock."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
import structlog

import llmd.logs
from llmd.config import LoggingConfig
from llmd.logs import LineLimiter, configure_logging


class Clock:
    """A monotonic clock that moves only when told."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Captured:
    """The JSON lines written so far, the limiter and its clock."""

    def __init__(self, stream: io.StringIO, limiter: LineLimiter, clock: Clock) -> None:
        self.stream = stream
        self.limiter = limiter
        self.clock = clock

    def lines(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.stream.getvalue().splitlines()]


@pytest.fixture
def captured_logs(monkeypatch: pytest.MonkeyPatch) -> Iterator[Captured]:
    """Configure logging (JSON, INFO, 10 lines per key per 10 s) into a buffer; undo after."""
    clock = Clock()
    limiter = LineLimiter(lines=10, window_s=10.0, clock=clock)
    monkeypatch.setattr(llmd.logs, "_limiter", limiter)
    stream = io.StringIO()
    configure_logging(LoggingConfig(format="json"), stream=stream)
    try:
        yield Captured(stream, limiter, clock)
    finally:
        structlog.reset_defaults()
        logging.getLogger().handlers[:] = []
