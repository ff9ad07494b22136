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

# libgomp's default spin-then-sleep policy makes every Numba parallel region cost ~15 ms on the
# 2-core machines simkit targets (measured: an empty region takes 15 ms; 9 us with a zero spin
# count). libgomp reads this at load time, which happens at the first parallel call, after this.
_os.environ.setdefault("GOMP_SPINCOUNT", "0")

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
    "calibrate",
]


def __getattr__(name):  # lazy: simkit.diagnose (issue 12) imports xarray and statsmodels
    if name == "diagnose":
        from simkit.diagnose import diagnose
        globals()["diagnose"] = diagnose  # the function, not the submodule of the same name
        return diagnose
    if name == "calibrate":  # lazy too (issue 13): the runner, xarray, scipy
        from simkit.calibrate import calibrate
        globals()["calibrate"] = calibrate  # the function, not the submodule of the same name
        return calibrate
    raise AttributeError(f"module 'simkit' has no attribute {name!r}")
