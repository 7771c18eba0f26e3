"""Logging, configured in one place: structlog, JSON off a TTY (journald), console on a TTY."""

from __future__ import annotations

import logging
import sys
from typing import Any

import structlog

from llmd.config import LoggingConfig


def configure_logging(config: LoggingConfig, stream: Any = None) -> None:
    """Route structlog and stdlib logging to `stream` (default stderr) at `config.level`.

    Events are data: `log.info("engine_exited", reason=...)`. uvicorn's own loggers are kept at
    WARNING (llmd logs its requests itself) and rendered the same way.
    """
    stream = stream or sys.stderr
    level = getattr(logging, config.level.upper())
    console = config.format == "console" or (config.format == "auto" and stream.isatty())
    renderer: Any = (
        structlog.dev.ConsoleRenderer(colors=stream.isatty())
        if console
        else structlog.processors.JSONRenderer()
    )
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    structlog.configure(
        processors=[*shared, structlog.processors.format_exc_info, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(stream),
        cache_logger_on_first_use=False,
    )
    handler = logging.StreamHandler(stream)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processor=renderer, foreign_pre_chain=[*shared, structlog.stdlib.add_logger_name]
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access", "aiohttp"):
        logging.getLogger(name).setLevel(max(level, logging.WARNING))
