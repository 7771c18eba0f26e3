"""A streamed completion read in a background thread, for tests that act while it runs."""

from __future__ import annotations

import json
import threading
from typing import Any

import httpx

from tests.support.llmd_process import LlmdProcess

# With the simulator at `--step-base-ms 20` (SLOW), 300 tokens take about 6 s: long enough to
# drain, cancel or restart while the stream is live.
SLOW = ("--step-base-ms", "20")
STREAM = {"model": "tiny", "prompt": "Go", "max_tokens": 300, "ignore_eos": True, "stream": True}


class Stream(threading.Thread):
    """A streamed completion read in a thread; `lines` (non-empty SSE lines) once done,
    `first` set at its first event."""

    def __init__(
        self, llmd: LlmdProcess, request_id: str = "", body: dict[str, Any] | None = None
    ) -> None:
        super().__init__(daemon=True)
        self.url = llmd.base_url + "/v1/completions"
        self.body = body or STREAM
        self.headers = {"x-request-id": request_id} if request_id else {}
        self.lines: list[str] = []
        self.first = threading.Event()
        self.error: httpx.TransportError | None = None

    def run(self) -> None:
        try:
            with httpx.stream(
                "POST", self.url, json=self.body, headers=self.headers, timeout=60
            ) as response:
                for line in response.iter_lines():
                    if line:
                        self.lines.append(line)
                        self.first.set()
        except httpx.TransportError as exc:  # a hanging request outlives its test's daemon
            self.error = exc

    def last_event(self) -> Any:
        """The JSON of the last event before `[DONE]`."""
        assert self.lines[-1] == "data: [DONE]", self.lines[-3:]
        return json.loads(self.lines[-2].removeprefix("data: "))
