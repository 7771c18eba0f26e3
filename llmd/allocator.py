"""The C allocator's settings for a daemon that holds large request bodies for a while: bodies
of 128 KiB or more get their own memory mapping, and the heap's free pages go back to the
system once a flood has drained, so a flood leaves nothing resident."""

from __future__ import annotations

import asyncio
import ctypes
import functools
import os

# mallopt(3) parameter number of M_MMAP_THRESHOLD in glibc's <malloc.h>.
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 128 * 1024


def fix_mmap_threshold(nbytes: int = MMAP_THRESHOLD_BYTES) -> bool:
    """Have glibc serve each allocation of `nbytes` or more from its own mapping, unmapped when
    freed. True when set; False where the C library is not glibc, or when the operator set
    `MALLOC_MMAP_THRESHOLD_` (that value stands).

    glibc starts at 128 KiB but raises the threshold to the size of each mapped block freed (up
    to 32 MiB on 64-bit; mallopt(3), M_MMAP_THRESHOLD), so after the first large body is freed
    the next ones come from the heap, whose free pages stay resident: measured with
    `scripts/bench_memory.py`, llmd stayed about 580 MiB above idle after each flood of 500 KB
    bodies, 240 MiB with the threshold fixed in two rounds of three (README, "Memory").
    Setting it disables that raising.
    """
    if "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return False
    mallopt = getattr(_libc(), "mallopt", None)
    if mallopt is None:
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, nbytes))


def trim_heap() -> bool:
    """Give the free pages of every glibc heap back to the system (malloc_trim(3) with pad 0:
    since glibc 2.8 it releases free pages inside each arena, not only at its top). True when
    memory was released; False when none was, or where the C library is not glibc.

    Blocks for a few milliseconds per hundred MiB of heap and releases the GIL (ctypes): call it
    off the event loop. Smaller pieces of a body (uvicorn's read chunks, the parsed object's
    strings) still come from the heap under the mmap threshold, and freed they stay resident
    until trimmed.
    """
    malloc_trim = getattr(_libc(), "malloc_trim", None)
    return bool(malloc_trim(0)) if malloc_trim is not None else False


@functools.cache
def _libc() -> ctypes.CDLL:
    # The running program's own symbols (dlopen(NULL)), the C library's among them: no search
    # for the library's file (`ctypes.util.find_library` runs `ldconfig -p` in a subprocess,
    # about 50 ms of a daemon's start). Where that C library is not glibc, it has no `mallopt`
    # or `malloc_trim` and the callers do nothing.
    return ctypes.CDLL(None)


# A flood smaller than this leaves too little on the heap to be worth a trim.
TRIM_AFTER_BYTES = 32 * 1024 * 1024


class HeapTrimmer:
    """`on_drained` of the body budget (llmd/admission/bodies.py): once a flood of at least
    `after_bytes` of bodies has drained, trim the heap on a worker thread, one trim at a time.
    Measured with `scripts/bench_memory.py` (README, "Memory")."""

    def __init__(self, after_bytes: int = TRIM_AFTER_BYTES) -> None:
        self.after_bytes = after_bytes
        self.trims = 0
        self._running: asyncio.Future[bool] | None = None

    def __call__(self, peak: int) -> None:
        """The budget emptied after holding `peak` bytes. Needs a running event loop (none:
        nothing is done)."""
        if peak < self.after_bytes or self._running is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self.trims += 1
        self._running = loop.run_in_executor(None, trim_heap)
        self._running.add_done_callback(self._done)

    def _done(self, _: asyncio.Future[bool]) -> None:
        self._running = None
