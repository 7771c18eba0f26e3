"""The C allocator's setting for a daemon that holds large request bodies for a while: bodies
of 128 KiB or more get their own memory mapping, so a flood of them leaves nothing resident."""

from __future__ import annotations

import ctypes
import ctypes.util
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
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, nbytes))
