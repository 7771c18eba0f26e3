"""Logging, configured in one place: structlog, JSON off a TTY (journald), console on a TTY.

Every event passes a per-key rate limiter (`LineLimiter`): past `rate_limit_lines` lines of one
key within `rate_limit_window_s`, lines are counted instead of written, and a
`log_lines_suppressed` line ("suppressed N similar") follows once the window has passed. The
counts by event feed `llmd_log_lines_suppressed_total`. What passes the limiter is offered to the
recent-events list of the Status snapshot (`llmd.events`). A log stream whose reader
has gone (`LogStream`) drops the lines instead of ending the daemon.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import sys
import threading
import time
from collections.abc import Callable, MutableMapping
from typing import Any, TextIO, cast

import structlog

from llmd.config import LoggingConfig
from llmd.events import recent_events

SUPPRESSED_EVENT = "log_lines_suppressed"
LIBRARY_EVENT = "library_logged"
# Fields that tell one kind of event from another; anything else (ids, timings) varies per line.
_KEY_FIELDS = ("code", "reason", "outcome", "status", "level")
_VARYING = re.compile(r"0x[0-9a-fA-F]+|[0-9a-fA-F]{8,}|\d+")

Key = tuple[str, ...]


def rate_key(event: MutableMapping[str, Any]) -> Key | None:
    """The rate-limit key of a log event, or None for events never limited.

    A finished request's line is its own key when it succeeded (one line per request); failures
    share a key per outcome, status and code. Engine output lines and libraries' lines are keyed
    by their text with numbers and hex ids masked (and the library's logger), so repeats of one
    message collapse.
    """
    name = str(event.get("event"))
    if name == SUPPRESSED_EVENT:
        return None
    if name == "request_finished" and event.get("outcome") == "ok":
        return None
    fields = tuple(str(event[f]) for f in _KEY_FIELDS if f in event)
    if name == "engine_output":
        return (name, *fields, _VARYING.sub("#", str(event.get("line", "")))[:200])
    if name == LIBRARY_EVENT:
        masked = _VARYING.sub("#", str(event.get("message", "")))[:200]
        return (name, str(event.get("logger")), *fields, masked)
    return (name, *fields)


class _Window:
    __slots__ = ("lines", "opened", "suppressed")

    def __init__(self, opened: float) -> None:
        self.opened = opened
        self.lines = 0
        self.suppressed = 0


class LineLimiter:
    """A structlog processor passing at most `lines` events per key per `window_s` seconds.

    `suppressed` counts dropped lines by event name since the limiter was made (never reset,
    also across reconfiguration: it backs a Prometheus counter). Summaries are written by the
    next event of the same key after the window, or by `flush()` (the daemon's tick).
    """

    def __init__(
        self, lines: int, window_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.lines = lines
        self.window_s = window_s
        self.clock = clock
        self.suppressed: dict[str, int] = {}
        self._windows: dict[Key, _Window] = {}
        self._lock = threading.Lock()

    def __call__(
        self, logger: Any, method_name: str, event: MutableMapping[str, Any]
    ) -> MutableMapping[str, Any]:
        if self.lines <= 0:
            return event
        key = rate_key(event)
        if key is None:
            return event
        now = self.clock()
        with self._lock:
            window = self._windows.get(key)
            summary = None
            if window is None or now - window.opened >= self.window_s:
                if window is not None and window.suppressed:
                    summary = (key, window.suppressed, now - window.opened)
                window = self._windows[key] = _Window(now)
            window.lines += 1
            if window.lines > self.lines:
                window.suppressed += 1
                self.suppressed[key[0]] = self.suppressed.get(key[0], 0) + 1
        if summary is not None:
            _write_summary(*summary)
        if window.lines > self.lines:
            raise structlog.DropEvent
        return event

    def flush(self, force: bool = False) -> None:
        """Write the summaries of windows that have passed (all of them when `force`: at
        shutdown), and forget idle keys."""
        now = self.clock()
        with self._lock:
            ended = [
                (key, w)
                for key, w in self._windows.items()
                if force or now - w.opened >= self.window_s
            ]
            for key, _ in ended:
                del self._windows[key]
        for key, window in ended:
            if window.suppressed:
                _write_summary(key, window.suppressed, now - window.opened)


def _write_summary(key: Key, count: int, seconds: float) -> None:
    structlog.get_logger("llmd.logs").warning(
        SUPPRESSED_EVENT,
        message=f"suppressed {count} similar",
        similar_to=key[0],
        key=" ".join(key[1:]) or None,
        count=count,
        window_s=round(seconds, 1),
    )


_limiter = LineLimiter(lines=10, window_s=10.0)


def line_limiter() -> LineLimiter:
    """The process's one limiter (kept across `configure_logging` calls)."""
    return _limiter


def configure_logging(config: LoggingConfig, stream: Any = None) -> None:
    """Route structlog and stdlib logging to `stream` (default stderr) at `config.level`.

    Events are data: `log.info("engine_exited", reason=...)`. Records of the standard library's
    logging (uvicorn, aiohttp) become structlog events (`LibraryLogHandler`), so they pass the
    same rate limiter; uvicorn's own loggers are kept at WARNING (llmd logs its requests itself).
    """
    stream = LogStream(stream or sys.stderr)
    _limiter.lines = config.rate_limit_lines
    _limiter.window_s = config.rate_limit_window_s
    level = getattr(logging, config.level.upper())
    console = config.format == "console" or (config.format == "auto" and stream.isatty())
    renderer: Any = (
        structlog.dev.ConsoleRenderer(colors=stream.isatty())
        if console
        else structlog.processors.JSONRenderer(serializer=_json_line)
    )
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    structlog.configure(
        processors=[
            _limiter,
            recent_events(),
            *shared,
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        # One write of the line and its newline, then a flush (PrintLogger's `print` writes
        # the two apart): the same bytes.
        logger_factory=structlog.WriteLoggerFactory(cast(TextIO, stream)),
        cache_logger_on_first_use=False,
    )
    root = logging.getLogger()
    root.handlers[:] = [LibraryLogHandler()]
    root.setLevel(level)
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access", "aiohttp"):
        logging.getLogger(name).setLevel(max(level, logging.WARNING))


class OncePerConfig:
    """A structlog logger named `name`, bound once for each logging configuration in force
    (`get()`), where `structlog.get_logger(name)` binds a new one at each call (llmd
    configures structlog without caching: a reload or a test reconfigures it): about 3 µs
    less a line, for the lines written per request. A new configuration (`configure_logging`,
    structlog's own `configure` or `reset_defaults`) is seen at the next `get()`."""

    __slots__ = ("_config", "_logger", "name")

    def __init__(self, name: str) -> None:
        self.name = name
        self._config: tuple[object, ...] = ()
        self._logger: Any = None

    def get(self) -> Any:
        """The logger bound under the configuration now in force."""
        config = structlog.get_config()
        known = self._config
        if (
            not known
            or config["processors"] is not known[0]
            or config["wrapper_class"] is not known[1]
            or config["logger_factory"] is not known[2]
            or config["context_class"] is not known[3]
        ):
            self._logger = structlog.get_logger(self.name).bind()
            self._config = (
                config["processors"],
                config["wrapper_class"],
                config["logger_factory"],
                config["context_class"],
            )
        return self._logger


_ENCODER = json.JSONEncoder(default=structlog.processors._json_fallback_handler)


def _json_line(event: Any, **_: Any) -> str:
    """`event` as structlog's JSONRenderer writes it (`json.dumps` with its fallback for
    objects JSON has no type for), by one encoder made once: `json.dumps` makes a new
    encoder for each call given a `default`, a tenth of a request log line's cost."""
    return _ENCODER.encode(event)


class LogStream:
    """Where log lines go: `stream`, until its reader has gone (EPIPE: `llmd serve 2>&1 | tee
    log` after Ctrl-C ended tee, a closed journald stream). From then on lines are dropped and
    the stream's descriptor points at /dev/null (Python's recipe, `signal` docs, "Note on
    SIGPIPE"), so every later write and the last flush at exit succeed: llmd drains and stops
    as it would have, with its own exit status. A log line never ends the daemon."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.lost = False

    def write(self, text: str) -> int:
        """Write `text`; its length, written or dropped."""
        if not self.lost:
            try:
                return self.stream.write(text)
            except BrokenPipeError:
                self._lose()
        return len(text)

    def flush(self) -> None:
        """Flush the stream, unless its reader has gone."""
        if not self.lost:
            try:
                self.stream.flush()
            except BrokenPipeError:
                self._lose()

    def isatty(self) -> bool:
        """Whether the stream is a terminal (console format and colours)."""
        return self.stream.isatty()

    def _lose(self) -> None:
        self.lost = True
        with contextlib.suppress(OSError, ValueError):  # no descriptor (a StringIO): just drop
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self.stream.fileno())
            os.close(devnull)


class LibraryLogHandler(logging.Handler):
    """Passes the standard library's log records (uvicorn's, aiohttp's, asyncio's) through
    structlog, as `library_logged` events with the `logger` and its `message` (and the
    exception, if any), so they take the same way as llmd's own: the rate limiter, the
    recent events, one renderer."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            fields: dict[str, Any] = {"logger": record.name, "message": record.getMessage()}
            if record.exc_info:
                fields["exc_info"] = record.exc_info
            structlog.get_logger(record.name).log(record.levelno, LIBRARY_EVENT, **fields)
        except Exception:
            self.handleError(record)
