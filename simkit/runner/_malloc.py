"""glibc malloc thresholds for simkit's tasks on Dask workers.

Dask's nanny starts every worker process with ``MALLOC_TRIM_THRESHOLD_=65536``
(``distributed.nanny.pre-spawn-environ``), to return freed memory to the operating system early.
Setting any of glibc's malloc thresholds turns off its dynamic mmap threshold, so every allocation
above 128 KiB becomes a fresh ``mmap`` (and page faults on first touch), and every free of one an
``munmap``. simkit's preparations allocate many NumPy temporaries of that size: rate_k's vmf-d8
preparation took 2.6 times as long with that setting (docs/performance.md). :func:`tune_malloc` sets
the thresholds to the values that glibc's dynamic rule reaches for such a program (mmap above 32 MiB,
trim above 64 MiB), which restores the speed. Results do not change (allocation never changes a computed value); a worker keeps
up to 64 MiB of freed memory at the top of its heap.
"""

from __future__ import annotations

import ctypes
import ctypes.util

__all__ = ["MMAP_THRESHOLD", "TRIM_THRESHOLD", "tune_malloc"]

#: bytes: allocations at or above this are mmap'd (glibc's dynamic rule caps its threshold here on 64-bit)
MMAP_THRESHOLD = 32 * 1024 * 1024
#: bytes of free memory at the top of the heap above which glibc returns it (twice the mmap threshold)
TRIM_THRESHOLD = 2 * MMAP_THRESHOLD

_M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters (malloc.h)
_M_MMAP_THRESHOLD = -3

#: whether :func:`tune_malloc` succeeded in this process
TUNED = False


def tune_malloc() -> bool:
    """Set glibc's mmap and trim thresholds of this process (see the module docstring). Returns True
    if both were set, False where there is no glibc ``mallopt`` (macOS, musl, Windows): a no-op there."""
    global TUNED
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    TUNED = bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    return TUNED
