"""Import PyTorch before simkit, for the benchmarks that compare against it (import this first).

PyTorch's OpenMP runtime reads ``GOMP_SPINCOUNT`` when it loads, and ``import simkit`` sets that
variable unless it is set. Before 2026-12-04 (evening) simkit set 0, and with PyTorch imported after
simkit ``torch.exp`` on two threads ran 6-13x slower than on one (0.37-0.38 against 2.46-4.8 G/s)
and single-pass PyTorch 1.8-2.7x slower than in a process without simkit, a handicap no PyTorch user
has. simkit now sets 10000, which measured no handicap (simkit/__init__.py), but the benchmarks keep
PyTorch first so that it loads with libgomp's default policy whatever simkit sets. Numba and PyTorch
then share that libgomp (one soname): Numba's OpenMP layer, loaded at its first parallel call, finds
it already initialised. The benchmarks record both names below in their results. ``--no-torch`` on
the command line skips it.
"""

from __future__ import annotations

import os
import sys

__all__ = ["TORCH_FIRST", "SPINCOUNT_AT_TORCH_IMPORT"]

#: GOMP_SPINCOUNT when PyTorch was imported (None: libgomp's default)
SPINCOUNT_AT_TORCH_IMPORT = os.environ.get("GOMP_SPINCOUNT")
_SIMKIT_BEFORE = "simkit" in sys.modules
if "--no-torch" not in sys.argv and not _SIMKIT_BEFORE:
    try:
        import torch  # noqa: F401
    except ImportError:
        pass
#: whether PyTorch was loaded before simkit set GOMP_SPINCOUNT
TORCH_FIRST = "torch" in sys.modules and not _SIMKIT_BEFORE
