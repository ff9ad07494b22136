"""simkit: Monte Carlo evidence for the InfoNCE / similarity-search theory of contrastive learning.

The objects and claims C1–C7 are defined in ``docs/theory.md``. The public API, by concern:

Distributions on S^{d-1} and Markov kernels (:mod:`simkit.distributions`)
    Uniform, VonMisesFisher, VMFMixture, Discrete -- data distributions π;
    VMFKernel, RotatedVMFKernel, BrownianKernel, GeodesicRandomWalk -- positive-pair kernels M
Exact quantities (:mod:`simkit.exact`)
    cross_entropy, log_partition, bias_constant, gap_exact -- closed forms for φ = identity;
    simkit.exact.curve (the exact finite-k gap curve, c1, c2), simkit.exact.in_batch, simkit.exact.minimiser
Estimators with Monte Carlo standard errors (:mod:`simkit.estimators`)
    GapEstimator -- the InfoNCE gap R_k − log k − CE over k (C1); SearchEstimator -- similarity search (C2)
Embeddings and training (:mod:`simkit.embeddings`)
    LinearEmbedding, TwoLayerEmbedding, FourierEmbedding, train
Statistics (:mod:`simkit.stats`)
    mean_mcse, jackknife, fit_rate, trend_test, growth_non_inferiority, curve_test, max_t_test
Studies, claims and reports (:mod:`simkit.runner`, :mod:`simkit.claims`, :mod:`simkit.report`)
    simkit.runner.run_study, simkit.claims.validate.run_validation, calibrate
Your own embeddings (:mod:`simkit.diagnose`)
    diagnose, Diagnosis -- how many negatives does a model need for a tolerated finite-k bias?
"""

from __future__ import annotations

import os as _os

# libgomp (shared by Numba's OpenMP layer and PyTorch) reads its spin count once, when it loads: a
# short busy-wait keeps Numba's many small parallel regions cheap without idle threads spinning for
# long (measurements in docs/performance.md). A value set before simkit is imported is kept.
_os.environ.setdefault("GOMP_SPINCOUNT", "10000")

from simkit.distributions import (BrownianKernel, Discrete, GeodesicRandomWalk, MarkovKernel,  # noqa: E402
                                  RotatedVMFKernel, SphereDistribution, Uniform, VMFKernel, VMFMixture,
                                  VonMisesFisher)

from simkit.version import __version__  # noqa: E402

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


def __getattr__(name):
    """``simkit.diagnose``, ``simkit.Diagnosis`` and ``simkit.calibrate`` load on first use: they bring in
    xarray, statsmodels and the runner, which ``import simkit`` alone does not need."""
    if name == "diagnose":
        from simkit.diagnose import diagnose
        globals()["diagnose"] = diagnose  # the function, not the submodule of the same name
        return diagnose
    if name == "Diagnosis":
        from simkit.diagnose import Diagnosis
        globals()["Diagnosis"] = Diagnosis
        return Diagnosis
    if name == "calibrate":
        from simkit.claims.calibrate import calibrate
        globals()["calibrate"] = calibrate
        return calibrate
    raise AttributeError(f"module 'simkit' has no attribute {name!r}")
