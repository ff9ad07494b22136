"""The empirical Rademacher complexity of a loss class (Theorem 1's complexity term, claim C3).

``hat R_n = E_sigma sup_theta (1/n) sum_i sigma_i l_i(theta)`` for a class of embeddings phi_theta:
:func:`rademacher_sup` finds the supremum for one sign vector by box-constrained L-BFGS-B with
restarts (a LOWER bound: the optimiser may miss the global maximum), centred at theta_0 (same
expectation, less noise). :class:`PairwiseSumRisk` is a loss class whose complexity grows with k
(the pairwise logistic loss summed over the negatives): the negative control of the InfoNCE class.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray
from scipy import optimize
from scipy.special import expit

from simkit.embeddings.training import TrainingSample

__all__ = ["PairwiseSumRisk", "box_bounds", "rademacher_sup", "OPTIMISER"]

#: L-BFGS-B settings of every run (projected-gradient tolerance, relative reduction, iterations)
OPTIMISER = {"gtol": 1e-7, "ftol": 1e-10, "maxiter": 300}


class PairwiseSumRisk:
    """``(1/n) sum_i w_i L_i`` with ``L_i = sum_{j<=k} log(1 + e^{s_ij - s_i0})`` (negative control).

    The same interface as :class:`simkit.embeddings.training.EmpiricalRisk` where this study needs it
    (``losses``, ``value``, ``objective``); NumPy, gradient through :meth:`Embedding.vjp`.
    ``dL/ds_j = sigmoid(s_j - s_0)``, ``dL/ds_0 = -sum_j sigmoid(s_j - s_0)``.
    """

    def __init__(self, sample: TrainingSample, tau: float, *, weights=None):
        if not isinstance(sample, TrainingSample) or sample.shared:
            raise ValueError("'sample' must be a TrainingSample with one set of negatives per tuple")
        if not (isinstance(tau, (int, float, np.floating)) and math.isfinite(tau) and tau > 0):
            raise ValueError(f"'tau' must be a finite number > 0, got {tau!r}")
        self.sample, self.tau = sample, float(tau)
        w = np.ones(sample.n) if weights is None else np.asarray(weights, dtype=float)
        if w.shape != (sample.n,) or not np.all(np.isfinite(w)):
            raise ValueError(f"'weights' must be a finite array of shape ({sample.n},), got shape {w.shape}")
        self.weights = w

    @staticmethod
    def _embed(phi, pts):
        """phi at validated points with what the backward pass needs (Embedding's own forward pieces;
        the sample was validated once at construction, so the per-call input checks are skipped)."""
        h, cache = phi._hidden(pts)
        out = phi._normalise(h)  # keeps the domain guard (raises where h = 0)
        norm = np.sqrt(np.einsum("nd,nd->n", h, h))[:, None]
        return out, (pts, cache, out, norm)

    @staticmethod
    def _pullback(phi, saved, g):
        """``sum_i (d phi(x_i)/d theta)^T g_i`` (as :meth:`Embedding.vjp`, from the saved forward pass)."""
        pts, cache, out, norm = saved
        g_h = (g - np.einsum("nd,nd->n", out, g)[:, None] * out) / norm
        return phi._backward(pts, cache, g_h)

    def _parts(self, phi):
        s = self.sample
        n, k, p = s.n, s.k, s.p
        u, su = self._embed(phi, s.x)
        v, sv = self._embed(phi, s.x_pos)
        w, sw = self._embed(phi, s.negatives.reshape(-1, p))
        w = w.reshape(n, k, -1)
        r = (np.einsum("nd,nkd->nk", u, w) - np.einsum("nd,nd->n", u, v)[:, None]) / self.tau
        return u, v, w, r, (su, sv, sw)

    def losses(self, phi) -> NDArray[np.float64]:
        """Per-tuple losses ``L_i`` (unweighted), shape (n,)."""
        return np.sum(np.logaddexp(0.0, self._parts(phi)[3]), axis=1)

    def value(self, phi) -> float:
        return float(np.mean(self.weights * self.losses(phi)))

    def value_and_grad(self, phi) -> tuple[float, NDArray[np.float64]]:
        n = self.sample.n
        u, v, w, r, (su, sv, sw) = self._parts(phi)
        a = self.weights / n
        g = expit(r) * a[:, None]  # w_i/n dL_i/ds_ij
        g0 = -g.sum(axis=1)  # w_i/n dL_i/ds_i0
        g_u = (g0[:, None] * v + np.einsum("nk,nkd->nd", g, w)) / self.tau
        g_v = g0[:, None] * u / self.tau
        g_w = (g[:, :, None] * u[:, None, :]).reshape(-1, u.shape[1]) / self.tau
        grad = self._pullback(phi, su, g_u) + self._pullback(phi, sv, g_v) + self._pullback(phi, sw, g_w)
        return float(np.mean(self.weights * np.sum(np.logaddexp(0.0, r), axis=1))), grad

    def objective(self, template):
        def fun(theta):
            return self.value_and_grad(template.with_params(theta))
        return fun


# ----------------------------------------------------------------------------------------------
# the supremum of the Rademacher process

def box_bounds(p: int, radius: float) -> tuple[NDArray, NDArray]:
    """Lower and upper bounds of the flat parameters of ``W = I + A``, ``|A_ij| <= radius``."""
    eye = np.eye(p).ravel()
    return eye - radius, eye + radius


def rademacher_sup(risk, template, starts: list[NDArray], lo: NDArray, hi: NDArray
                   ) -> tuple[NDArray[np.float64], float, int, int]:
    """Best-of-r excess ``sup_theta (1/n) sum_i sigma_i [l_i(theta) - l_i(theta_0)]`` for r = 1..R.

    Parameters
    ----------
    risk : EmpiricalRisk or PairwiseSumRisk
        With weights ``-sigma``, so that its minimum is minus the supremum.
    template : Embedding
        theta_0 (the centring point and the family).
    starts : list of ndarray
        Starting parameter vectors, the first normally ``template.params``.
    lo, hi : ndarray
        The box.

    Returns
    -------
    best, ref, n_evaluations, n_not_converged
        ``best[r-1]`` = largest excess over the first r starts (non-decreasing; >= 0 when the first
        start is theta_0, as L-BFGS-B never ends above its start); ``ref`` =
        ``(1/n) sum_i sigma_i l_i(theta_0)`` (mean zero over sigma: the uncentred supremum is
        ``best + ref``). Every value is a lower bound on the true supremum.
    """
    fun = risk.objective(template)
    f0 = float(fun(template.params)[0])
    bounds = list(zip(lo, hi))
    vals, nfev, bad = [], 0, 0
    for th in starts:
        res = optimize.minimize(fun, np.clip(th, lo, hi), jac=True, method="L-BFGS-B", bounds=bounds,
                                options=dict(OPTIMISER))
        vals.append(f0 - float(res.fun))
        nfev += int(res.nfev)
        bad += int(not res.success)
    return np.maximum.accumulate(np.array(vals)), -f0, nfev, bad
