"""The empirical InfoNCE risk minimiser over a linear score class on a finite π (docs/theory.md §17).

For a :class:`simkit.exact.minimiser.ScoreClass` (``s_θ = Σ_p θ_p F_p``, π on N atoms, positives from a
row-stochastic kernel M): :func:`sample_tuples` draws n i.i.d. InfoNCE tuples (anchor x ~ π, positive
x⁺ ~ M(x, ·), k negatives ~ π) with the caller's ``rng``; :func:`empirical_risk` is
``R̂_{n,k}(θ) − log k`` with its gradient and Hessian (closed form: a mean of log-sum-exps of linear
functions, so convex); :func:`empirical_minimiser` finds its minimiser θ̂_{n,k} by damped Newton.
The study compares CE(θ̂_{n,k}) − min CE (of order tr(H⁻¹Σ)/(2n) from sampling plus the exact k-bias
½gᵀH⁻¹g/k² of :func:`simkit.exact.minimiser.minimise`) over n and k.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.special import logsumexp

from simkit.exact.minimiser import ScoreClass

__all__ = ["Tuples", "sample_tuples", "tuple_features", "empirical_risk", "empirical_minimiser"]

#: smallest Hessian eigenvalue of a minimum: the class's curvature at θ_k is of order 1e-4 or more; a
#: runaway's Hessian shrinks with its gradient (both e^{-θ·margin})
_FLAT = 1e-8


@dataclass(frozen=True)
class Tuples:
    """n InfoNCE tuples as atom indices: ``anchor`` (n,), ``candidates`` (n, k + 1), positive first."""

    anchor: NDArray[np.int64]
    candidates: NDArray[np.int64]

    @property
    def k(self) -> int:
        return self.candidates.shape[1] - 1


def sample_tuples(c: ScoreClass, n: int, k: int, rng: np.random.Generator) -> Tuples:
    """n i.i.d. tuples: x ~ π, x⁺ ~ M(x, ·), k negatives ~ π (inverse-CDF sampling of atom indices)."""
    if int(n) != n or n < 1:
        raise ValueError(f"'n' must be an integer >= 1, got {n!r}")
    if int(k) != k or k < 1:
        raise ValueError(f"'k' must be an integer >= 1, got {k!r}")
    n, k = int(n), int(k)
    cum_pi = np.cumsum(c.pi)
    cum_pi[-1] = 1.0
    anchor = np.searchsorted(cum_pi, rng.random(n), side="right")
    cum_m = np.cumsum(c.kernel, axis=1)
    cum_m[:, -1] = 1.0
    pos = np.sum(rng.random(n)[:, None] >= cum_m[anchor], axis=1)
    neg = np.searchsorted(cum_pi, rng.random((n, k)), side="right")
    return Tuples(anchor, np.concatenate([pos[:, None], neg], axis=1))


def tuple_features(c: ScoreClass, t: Tuples) -> NDArray[np.float64]:
    """The features of every tuple's candidates, (P, n, k + 1): ``F[p, x_i, y_ij]`` (free of θ)."""
    return c.features[:, t.anchor[:, None], t.candidates]


def empirical_risk(c: ScoreClass, t: Tuples, theta: ArrayLike, features: NDArray[np.float64] | None = None
                   ) -> tuple[float, NDArray[np.float64], NDArray[np.float64]]:
    """``R̂_{n,k}(θ) − log k``, its gradient (P,) and Hessian (P, P).

    ``R̂ = mean_i [−s(x_i, y_i0) + log Σ_j e^{s(x_i, y_ij)}]``; with w the per-tuple softmax over the
    k + 1 candidates, ``∇R̂ = mean[−F_0 + Σ_j w_j F_j]`` and ``∇²R̂ = mean Cov_w(F)``. ``features``:
    :func:`tuple_features` of ``(c, t)`` when the caller evaluates many θ on the same tuples.
    """
    s = c.scores(theta)[t.anchor[:, None], t.candidates]  # (n, k + 1)
    lse = logsumexp(s, axis=1)
    w = np.exp(s - lse[:, None])
    f = tuple_features(c, t) if features is None else features  # (P, n, k + 1)
    ef = np.einsum("pij,ij->pi", f, w)
    n = s.shape[0]
    val = float(np.mean(lse - s[:, 0])) - math.log(t.k)
    grad = np.mean(ef - f[:, :, 0], axis=1)
    dev = f - ef[:, :, None]
    hess = np.einsum("pij,ij,rij->pr", dev, w, dev) / n
    return val, grad, hess


def empirical_minimiser(c: ScoreClass, t: Tuples, theta0: ArrayLike, *, tol: float = 1e-10,
                        max_iter: int = 100) -> tuple[NDArray[np.float64], bool]:
    """θ̂ = argmin R̂_{n,k} by damped Newton from ``theta0``; returns (θ̂, converged).

    Converged means ``max |∇R̂(θ̂)| <= tol`` or a Newton decrement ``∇R̂ᵀ(∇²R̂)⁻¹∇R̂`` below 1e-24 (the
    risk is then flat to rounding). The empirical risk can have no minimiser (its infimum at
    infinity when the positives separate from the negatives in a direction of F); then the iterates run
    away, where the gradient and the Hessian both vanish: a point whose Hessian has an eigenvalue below
    1e-8 is not a minimum, ``converged`` is False and θ̂ NaN.
    """
    f = tuple_features(c, t)
    th = np.atleast_1d(np.asarray(theta0, dtype=float)).copy()
    here = empirical_risk(c, t, th, f)
    for _ in range(max_iter):
        val, grad, hess = here  # the line search's last evaluation is the accepted point's
        if not np.all(np.isfinite(grad)) or np.max(np.abs(th)) > 1e6:
            break
        try:
            step = np.linalg.solve(hess, grad)
        except np.linalg.LinAlgError:
            break
        if np.max(np.abs(grad)) <= tol or 0.0 <= float(grad @ step) < 1e-24:
            if np.min(np.linalg.eigvalsh(hess)) < _FLAT:
                break  # flat to rounding: the iterates ran away (no minimiser), not a minimum
            return th, True
        lam = 1.0
        while True:
            trial = th - lam * step
            here = empirical_risk(c, t, trial, f)
            if not (here[0] > val + 1e-15 * abs(val) and lam > 1e-10):
                break
            lam *= 0.5
        th = trial
    return np.full(th.shape, np.nan), False
