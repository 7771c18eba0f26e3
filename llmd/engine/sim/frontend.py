"""The API server in front of the engine core, as one first-come-first-served worker.

vLLM's OpenAI server is one Python process: it takes each new request (parse, tokenize, hand it
to the engine core) and each step's outputs (detokenize, hand them to the requests' handlers,
which build and send a chunk per token of a streaming request) one at a time, in the order they
came. A burst of C requests so reaches the engine core over C times the per-request cost, and
the first tokens of the early ones wait behind the rest of the burst; the engine core does not
wait for it and keeps stepping (vllm/v1/engine/async_llm.py, 0.32).
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Callable


class Frontend:
    """A FIFO worker in simulated time: work posted with a cost runs (its callback is called)
    when the worker has done everything posted before it plus this cost. Costs in seconds."""

    def __init__(
        self,
        request_s: float,
        token_s: float,
        step_s: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
        stream_token_s: float = 0.0,
    ) -> None:
        self.request_s = request_s
        self.token_s = token_s
        self.step_s = step_s
        self.stream_token_s = stream_token_s
        self.clock = clock
        self.free_at = 0.0
        self._due: collections.deque[tuple[float, Callable[[], None]]] = collections.deque()
        self._posted = asyncio.Event()

    def take_request(self, handed_over: Callable[[], None]) -> None:
        """A new request: `handed_over()` runs once the server has passed it to the engine."""
        self._post(self.request_s, handed_over)

    def take_outputs(self, tokens: int, delivered: Callable[[], None], streamed: int = 0) -> None:
        """A step's `tokens` new tokens, `streamed` of them for streaming requests: `delivered()`
        runs once the server has handed them to their requests (a cost per step's outputs, per
        token, and per streamed token's chunk)."""
        cost = self.step_s + self.token_s * tokens + self.stream_token_s * streamed
        self._post(cost, delivered)

    def _post(self, cost: float, done: Callable[[], None]) -> None:
        now = self.clock()
        self.free_at = max(now, self.free_at) + cost
        if not self._due and self.free_at <= now:
            done()  # no cost and nothing ahead of it (the zero-latency simulator)
            return
        self._due.append((self.free_at, done))
        self._posted.set()

    async def run(self) -> None:
        """Call each posted callback at its time, in the order posted; runs until cancelled."""
        while True:
            if not self._due:
                self._posted.clear()
                await self._posted.wait()
                continue
            at, done = self._due[0]
            delay = at - self.clock()
            if delay > 0:
                await asyncio.sleep(delay)
                continue
            self._due.popleft()
            done()
