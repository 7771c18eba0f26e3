"""The local tokenizer's lanes: one for short jobs, one for long ones (by the request's bytes),
each a thread with a tokenizer of its own, so that a long tokenization never holds up a short
one (a 3.8 MB prompt takes the tiny model's tokenizer about 3.7 s).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable
from typing import Any, TypeVar

# A request of more bytes than this is counted on the long lane: the tokenizer takes about 1 µs a
# byte (3.8 MB in 3.7 s, the tiny model's byte-level BPE on this machine), so a short job waits
# at most some 60 ms behind another short one, and never behind a long one.
LONG_BYTES = 64 * 1024

T = TypeVar("T")


class Lane:
    """One thread and the tokenizer only it uses, besides a caller on another thread that holds
    `lock` (`inline`, `now`). `make` gives the tokenizer, once, at the lane's first job."""

    def __init__(self, name: str, make: Callable[[], Any]) -> None:
        self.name = name
        self.lock = threading.Lock()
        self._make = make
        self._tokenizer: Any = None
        self._executor = concurrent.futures.ThreadPoolExecutor(1, name)
        self._closed = False

    def now(self, call: Callable[[Any], T]) -> T:
        """`call(tokenizer)` on the calling thread, holding the lane (blocking)."""
        with self.lock:
            return call(self._own())

    def inline(self, call: Callable[[Any], T]) -> tuple[T] | None:
        """`(call(tokenizer),)` on the calling thread, or None at once when the lane is in use."""
        if not self.lock.acquire(blocking=False):
            return None
        try:
            return (call(self._own()),)
        finally:
            self.lock.release()

    async def run(self, call: Callable[[Any], T]) -> T:
        """`call(tokenizer)` on the lane's thread (a thread of its own once closed), awaited."""
        if self._closed:
            return await asyncio.to_thread(self.now, call)
        return await asyncio.get_running_loop().run_in_executor(self._executor, self.now, call)

    def close(self) -> None:
        """Release the thread once the jobs queued on it are done."""
        self._closed = True
        self._executor.shutdown(wait=False)

    def _own(self) -> Any:
        """The lane's tokenizer (made at first use); call it holding `lock`."""
        if self._tokenizer is None:
            self._tokenizer = self._make()
        return self._tokenizer
