"""One BLAS thread inside simkit's parallel Numba regions, at a negligible cost per call.

Numba's ``np.dot`` calls SciPy's BLAS (``scipy.linalg.cython_blas``); inside a ``prange`` loop
that runs on every core, a multi-threaded BLAS would oversubscribe them. ``threadpoolctl
.threadpool_limits`` does the limiting but enumerates the loaded libraries on every call (~1 ms,
10% of a 10 ms estimator call); a :class:`threadpoolctl.ThreadpoolController` built once and
reused costs ~0.02 ms.
"""

from __future__ import annotations

import threading

from threadpoolctl import ThreadpoolController

__all__ = ["single_threaded_blas"]

_LOCK = threading.Lock()
_CONTROLLER: ThreadpoolController | None = None


def single_threaded_blas():
    """Context manager limiting every loaded BLAS to one thread (restored on exit)."""
    global _CONTROLLER
    if _CONTROLLER is None:
        with _LOCK:
            if _CONTROLLER is None:
                import scipy.linalg.cython_blas  # noqa: F401  (the BLAS Numba's np.dot calls: load it first)
                _CONTROLLER = ThreadpoolController()
    return _CONTROLLER.limit(limits=1, user_api="blas")
