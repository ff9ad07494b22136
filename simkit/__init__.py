"""simkit: Monte Carlo evidence for the InfoNCE / similarity-search theory of contrastive learning.

Public API (THEORY.md defines every object):

* distributions on S^{d-1}: :class:`Uniform`, :class:`VonMisesFisher`, :class:`VMFMixture`,
  :class:`Discrete`;
* positive-pair kernels M: :class:`VMFKernel`, :class:`RotatedVMFKernel`, :class:`BrownianKernel`,
  :class:`GeodesicRandomWalk`;
* exact formulas: :mod:`simkit.exact`;
* the InfoNCE estimator: :mod:`simkit.infonce`;
* studies, analysis and reports: :mod:`simkit.engine`, :mod:`simkit.analysis`, :mod:`simkit.report`.
"""

from __future__ import annotations

import os as _os

# libgomp's spin count: how long an idle OpenMP thread busy-waits before it sleeps. libgomp reads it
# when it loads (Numba's OpenMP layer loads it at the first parallel call), and Numba and PyTorch share
# one libgomp in a process (same soname), so the value simkit sets holds for PyTorch too if it is
# imported after simkit. 10000 (a few microseconds of spinning; libgomp's default is 300000):
# - 2026-11-30 host: libgomp's default made every Numba parallel region cost ~15 ms (9 us with 0);
# - 2026-12-04, AMD EPYC 2-vCPU host: an empty region 1.4 us with 10000, 1.5 us with the default,
#   43-49 us with 0 (the 0 of earlier versions); `simkit run rate_k --quick` 4.97-5.06 s with 10000
#   against 5.27-5.43 s with 0 (three runs each); PyTorch's two-thread torch.exp (imported after
#   simkit) 2.19 G/s with 10000, 1.99-2.22 G/s with the default, 0.83 G/s with 0;
# - 2026-12-04, Intel AVX-512 host: an empty region 3.4 us with the default, 6.3 us with 0.
# A value set before simkit is imported is kept.
_os.environ.setdefault("GOMP_SPINCOUNT", "10000")

from simkit.heat import BrownianKernel
from simkit.kernels import GeodesicRandomWalk, MarkovKernel, RotatedVMFKernel, VMFKernel
from simkit.sphere import Discrete, SphereDistribution, Uniform, VMFMixture, VonMisesFisher

__version__ = "0.1.0"

__all__ = [
    "Uniform",
    "VonMisesFisher",
    "VMFMixture",
    "Discrete",
    "SphereDistribution",
    "MarkovKernel",
    "VMFKernel",
    "RotatedVMFKernel",
    "BrownianKernel",
    "GeodesicRandomWalk",
    "__version__",
    "diagnose",
    "Diagnosis",
    "calibrate",
]


def __getattr__(name):  # lazy: simkit.diagnose (issue 12) imports xarray and statsmodels
    if name == "diagnose":
        from simkit.diagnose import diagnose
        globals()["diagnose"] = diagnose  # the function, not the submodule of the same name
        return diagnose
    if name == "Diagnosis":
        from simkit.diagnose import Diagnosis
        globals()["Diagnosis"] = Diagnosis
        return Diagnosis
    if name == "calibrate":  # lazy too (issue 13): the runner, xarray, scipy
        from simkit.calibrate import calibrate
        globals()["calibrate"] = calibrate  # the function, not the submodule of the same name
        return calibrate
    raise AttributeError(f"module 'simkit' has no attribute {name!r}")
