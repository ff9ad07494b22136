"""Chunked kernels on threads, without Numba's parallel compiler.

A sampler whose rows fall into independent chunks (see :mod:`simkit._jit.rng`) is a jitted
``nogil`` kernel ``kernel(*args, c0, c1)`` that fills chunks ``c0`` to ``c1 - 1``;
:func:`run_chunks` runs it over all chunks on ``numba.get_num_threads()`` threads (the caller's
thread and pool workers, pieces of a few chunks taken in turn). Each chunk has its own random
stream, so the output is the same bits whatever the number of threads or their order.

Why not ``prange``: the parallel compiler's passes (parfor conversion, fusion, lowering of the
gufunc, which re-optimises the inlined loop body) cost seconds of a first run's compile, more than
the one-line loop they would parallelise (docs/performance.md, "Cold start").
"""

from __future__ import annotations

import itertools
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numba

__all__ = ["run_chunks"]

#: pieces per thread: a few, so that an uneven cost per chunk (mixed kappas) still balances
PIECES_PER_THREAD = 4

_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def _forget_pool() -> None:
    """In a forked child: the parent's pool threads do not exist there; make a new pool on demand."""
    global _POOL, _POOL_LOCK
    _POOL = None
    _POOL_LOCK = threading.Lock()


os.register_at_fork(after_in_child=_forget_pool)


def _pool() -> ThreadPoolExecutor:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(max_workers=max(numba.config.NUMBA_NUM_THREADS - 1, 1),
                                       thread_name_prefix="simkit-chunks")
        return _POOL


def run_chunks(kernel, n_chunks: int, *args) -> None:
    """Call ``kernel(*args, c0, c1)`` over consecutive ranges covering chunks ``0 .. n_chunks - 1``,
    on up to ``numba.get_num_threads()`` threads; returns when all are done (the first error, if
    any, is raised after every piece has finished)."""
    n_threads = min(numba.get_num_threads(), n_chunks)
    if n_threads <= 1:
        kernel(*args, 0, n_chunks)
        return
    n_pieces = min(n_chunks, PIECES_PER_THREAD * n_threads)
    bounds = [n_chunks * k // n_pieces for k in range(n_pieces + 1)]
    counter = itertools.count()  # next() on it is atomic under the GIL

    def work():
        while (k := next(counter)) < n_pieces:
            kernel(*args, bounds[k], bounds[k + 1])

    futures = [_pool().submit(work) for _ in range(n_threads - 1)]
    try:
        work()
    finally:
        for f in futures:
            f.result()
