"""Distributions pi on the unit sphere S^{d-1} in R^d (docs/theory.md section 1, "pi_data").

Frozen, immutable objects validated once at construction (scipy.stats style). Points are on the
last axis: ``rvs(size)`` returns shape ``(size, d)`` (or ``(*size, d)``) and ``logpdf(x)`` takes
``(..., d)`` and returns ``(...)``. Densities are with respect to the surface measure of S^{d-1}.

Sampling runs in Numba (:mod:`simkit._jit.sampling`), reproducible from ``rng`` whatever the thread
count.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.special import logsumexp

from simkit._jit.rng import draw_key
from simkit._jit.sampling import sample_uniform, sample_vmf
from simkit._jit.special import log_sphere_area, log_vmf_norm, log_vmf_norm_shifted, mean_resultant_length
from simkit._checks import (Frozen, check_dim, check_int, check_points, check_rng, check_scalar,
                                check_unit_vectors, check_weights)

__all__ = ["SphereDistribution", "Uniform", "VonMisesFisher", "VMFMixture", "Discrete"]

KAPPA_MAX = 1e6  # the documented and tested range of concentrations


def _check_size(size) -> tuple[int, ...]:
    if isinstance(size, (tuple, list)):
        return tuple(check_int("size", s, low=0) for s in size)
    return (check_int("size", size, low=0),)


def _check_kappa(name: str, kappa) -> float:
    return check_scalar(name, kappa, low=0.0, high=KAPPA_MAX)


class SphereDistribution(Frozen):
    """Base class: a frozen probability distribution on S^{d-1}.

    Subclasses implement ``_rvs(n, rng) -> (n, d)`` and ``_logpdf(x) -> (...)`` on validated input.
    """

    dim: int

    def rvs(self, size: int | tuple[int, ...] = 1, *, rng=None) -> NDArray[np.float64]:
        """Draw ``size`` points; returns shape ``(*size, d)`` (``(size, d)`` for an int)."""
        shape = _check_size(size)
        rng = check_rng(rng)
        n = int(np.prod(shape))
        return self._rvs(n, rng).reshape(*shape, self.dim)

    def logpdf(self, x: ArrayLike) -> NDArray[np.float64]:
        """Log density w.r.t. surface measure at points ``x`` of shape ``(..., d)``."""
        x = check_points("x", x, self.dim)
        return self._logpdf(x)

    def pdf(self, x: ArrayLike) -> NDArray[np.float64]:
        """Density w.r.t. surface measure, ``exp(logpdf(x))``."""
        return np.exp(self.logpdf(x))

    def _rvs(self, n: int, rng: np.random.Generator) -> NDArray[np.float64]:  # pragma: no cover
        raise NotImplementedError

    def _logpdf(self, x: NDArray) -> NDArray[np.float64]:  # pragma: no cover
        raise NotImplementedError

    # As a vMF mixture: (weights, mus, kappas). Exact formulas in simkit.exact use this view.
    def as_mixture(self) -> tuple[NDArray, NDArray, NDArray]:
        raise TypeError(f"{type(self).__name__} is not a von Mises-Fisher mixture")


class Uniform(SphereDistribution):
    """The uniform distribution on S^{d-1}.

    Parameters
    ----------
    dim : int
        Ambient dimension d >= 2 (the sphere S^{d-1} in R^d).
    """

    def __init__(self, dim: int):
        self.dim = check_dim("dim", dim)
        self._freeze()

    def __repr__(self):
        return f"Uniform(dim={self.dim})"

    def _rvs(self, n, rng):
        out = np.empty((n, self.dim))
        sample_uniform(draw_key(rng), out)
        return out

    def _logpdf(self, x):
        return np.full(x.shape[:-1], -float(log_sphere_area(self.dim)))

    def as_mixture(self):
        mu = np.zeros((1, self.dim))
        mu[0, 0] = 1.0
        return np.ones(1), mu, np.zeros(1)

    def describe(self) -> str:
        return "uniform"


class VonMisesFisher(SphereDistribution):
    """von Mises--Fisher distribution vMF(mu, kappa) on S^{d-1}: density C_d(kappa) exp(kappa mu.x).

    Parameters
    ----------
    mu : array_like, shape (d,)
        Mean direction, a unit vector (norm 1 within 1e-6), d >= 2.
    kappa : float
        Concentration, 0 <= kappa <= 1e6; kappa = 0 is the uniform distribution.

    Notes
    -----
    Sampling: Wood's (1994) algorithm (exact inverse CDF of mu.x for d = 3), then a uniform
    direction orthogonal to mu. ``log C_d`` is stable for d up to 4096 and kappa up to 1e6.
    """

    def __init__(self, mu: ArrayLike, kappa: float):
        mu = check_unit_vectors("mu", mu)
        if mu.ndim != 1:
            raise ValueError(f"'mu' must be a 1-D unit vector, got shape {mu.shape}")
        self.mu = mu
        self.kappa = _check_kappa("kappa", kappa)
        self.dim = mu.shape[0]
        self.log_norm = float(log_vmf_norm(self.dim, self.kappa))
        self._log_mode = float(log_vmf_norm_shifted(self.dim, self.kappa))  # log C_d + kappa
        self._freeze()

    def __repr__(self):
        return f"VonMisesFisher(mu=<unit vector in R^{self.dim}>, kappa={self.kappa:g})"

    def _rvs(self, n, rng):
        out = np.empty((n, self.dim))
        sample_vmf(self.mu[None, :], np.array([self.kappa]), draw_key(rng), out)
        return out

    def _logpdf(self, x):
        # log C_d + kappa mu.x = (log C_d + kappa) - kappa ||x - mu||^2 / 2: exact near the mode
        diff = x - self.mu
        return self._log_mode - 0.5 * self.kappa * np.sum(diff * diff, axis=-1)

    def mean_resultant_length(self) -> float:
        """``A_d(kappa) = E[mu . x]``."""
        return float(mean_resultant_length(self.dim, self.kappa))

    def as_mixture(self):
        return np.ones(1), self.mu[None, :].copy(), np.array([self.kappa])

    def describe(self) -> str:
        return f"vMF(kappa={self.kappa:g})"


class VMFMixture(SphereDistribution):
    """Finite mixture sum_j w_j vMF(mu_j, kappa_j) on S^{d-1}.

    Parameters
    ----------
    weights : array_like, shape (m,)
        Non-negative, summing to 1.
    mus : array_like, shape (m, d)
        Unit mean directions.
    kappas : array_like, shape (m,)
        Concentrations in [0, 1e6].
    """

    def __init__(self, weights: ArrayLike, mus: ArrayLike, kappas: ArrayLike):
        mus = check_unit_vectors("mus", mus)
        if mus.ndim != 2:
            raise ValueError(f"'mus' must have shape (m, d), got {mus.shape}")
        m = mus.shape[0]
        self.weights = check_weights("weights", weights, m)
        try:
            kap = None if isinstance(kappas, str) else np.asarray(kappas)
            if kap is not None and kap.dtype.kind not in "iuf":
                kap = None
            elif kap is not None:
                kap = kap.astype(float)
        except (TypeError, ValueError):
            kap = None
        if kap is None or kap.ndim != 1 or kap.size != m:
            raise ValueError(f"'kappas' must be a 1-D array of real numbers of length {m} (one per component), "
                             f"got {kappas!r}")
        for j, k in enumerate(kap):
            _check_kappa(f"kappas[{j}]", k)
        self.mus = mus
        self.kappas = kap.copy()
        self.dim = mus.shape[1]
        self.log_norms = log_vmf_norm(self.dim, self.kappas)
        self._log_modes = log_vmf_norm_shifted(self.dim, self.kappas)
        self._freeze()

    def __repr__(self):
        return f"VMFMixture(m={len(self.weights)}, dim={self.dim}, kappas={np.round(self.kappas, 4).tolist()})"

    def _rvs(self, n, rng):
        comp = rng.choice(len(self.weights), size=n, p=self.weights)
        out = np.empty((n, self.dim))
        sample_vmf(self.mus[comp], self.kappas[comp], draw_key(rng), out)
        return out

    def _logpdf(self, x):
        sq = np.sum((x[..., None, :] - self.mus) ** 2, axis=-1)  # ||x - mu_j||^2
        with np.errstate(divide="ignore"):
            terms = np.log(self.weights) + self._log_modes - 0.5 * self.kappas * sq
            return logsumexp(terms, axis=-1)

    def as_mixture(self):
        return self.weights.copy(), self.mus.copy(), self.kappas.copy()

    def describe(self) -> str:
        return f"vMF mixture (m={len(self.weights)})"


class Discrete(SphereDistribution):
    """A finite distribution on S^{d-1}: atoms ``points[j]`` with probabilities ``weights[j]``.

    Every expectation under a discrete pi is a finite sum, so Z(x), cross-entropies and the
    bias constant are exact for any embedding in any dimension (docs/theory.md section 4).

    Parameters
    ----------
    points : array_like, shape (m, d)
        Unit vectors.
    weights : array_like, shape (m,), optional
        Probabilities summing to 1; uniform over atoms by default.
    """

    def __init__(self, points: ArrayLike, weights: ArrayLike | None = None):
        pts = check_unit_vectors("points", points)
        if pts.ndim != 2 or pts.shape[0] == 0:
            raise ValueError(f"'points' must have shape (m, d) with at least one point, got {pts.shape}")
        m = pts.shape[0]
        if weights is None:
            weights = np.full(m, 1.0 / m)
        self.weights = check_weights("weights", weights, m)
        self.points = pts
        self.dim = pts.shape[1]
        self._freeze()

    def __repr__(self):
        return f"Discrete(m={len(self.weights)}, dim={self.dim})"

    def _rvs(self, n, rng):
        idx = rng.choice(len(self.weights), size=n, p=self.weights)
        return self.points[idx].copy()

    def logpdf(self, x):
        raise TypeError("Discrete has no density w.r.t. surface measure; use logpmf(x)")

    def logpmf(self, x: ArrayLike) -> NDArray[np.float64]:
        """Log probability of each point of ``x`` (shape ``(..., d)``): the log weight of the atom
        it equals exactly, ``-inf`` if it is not an atom."""
        x = check_points("x", x, self.dim)
        flat = x.reshape(-1, self.dim)
        out = np.full(flat.shape[0], -np.inf)
        with np.errstate(divide="ignore"):
            logw = np.log(self.weights)
        for j, p in enumerate(self.points):
            hit = np.all(flat == p, axis=1)
            out[hit] = np.logaddexp(out[hit], logw[j])
        return out.reshape(x.shape[:-1])

    def describe(self) -> str:
        return f"discrete (m={len(self.weights)})"
