"""The exact finite-k curve of claim C2, ``D_k = R_k - E CE(M_k, Q_k)``, at every k (docs/theory.md §11.1).

Given x, with scores ``s_j = x.y_j / tau`` and density ratios ``m_j = dM(x, .)/dpi (y_j)``,

    D_k(x) = [E log(e^{s0} + S_k) - E log S_k] + [E V_k/W_k - mu_s(x)],

``S_k = sum e^{s_j}``, ``W_k = sum m_j``, ``V_k = sum m_j s_j``. The first bracket is two expected
log-sums (:func:`simkit.exact.curve.expected_log_sum_parts`); the second, the self-normalisation
bias, is ``k int_0^inf E[m (s - mu) (e^{-t m} - 1)] L(t)^{k-1} dt`` with ``L(t) = E_pi e^{-t m}``
(from ``1/W = int_0^inf e^{-t W} dt``), integrated in ``log t`` by the trapezoidal rule.

Public functions:

* :func:`positive_term` -- ``E log(e^{S0} + S_k) - E log S_k`` per anchor for finite score laws;
* :func:`snis_bias` -- ``E[V_k/W_k] - E_pi[m s]/E_pi[m]`` per anchor for a finite law of (m, s);
* :func:`discrete_d_curve` -- D_k per anchor when pi and M(x, .) are finite laws;
* :func:`search_d_curve` -- D_k for (pi, vMF kernel, tau) with phi = identity: uniform pi (one
  Gauss rule in the cosine) and single-vMF pi (Gauss rule in the anchor's cosine to pi's mean,
  times a rule on the disk that the database point projects to), both without Monte Carlo.

Why the rules give D_k and not only its moments: the discrete law puts the rule's weights on its
nodes, so the expectation over k i.i.d. draws is the k-fold product rule applied to an analytic
function of the k points; its error is exponentially small in the rule size at every k
(docs/theory.md §11.1; tests/exact/test_search_curve.py checks it against brute force, an
independent tensor rule and the d1/k asymptote).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.special import logsumexp, roots_jacobi

from simkit._checks import check_int, check_scalar
from simkit._jit.special import log_sphere_area, log_vmf_norm
from simkit.distributions.kernels import VMFKernel
from simkit.distributions.sphere import Uniform, VonMisesFisher
from simkit.exact.curve import TRAPEZOID_STEP, _as_ks, expected_log_sum_parts

__all__ = ["positive_term", "snis_bias", "discrete_d_curve", "SearchCurve", "search_d_curve"]

# the t grid of the self-normalisation integral: from k_max E[m] t = e^{-20} (integrand ~ t^2 below)
# to t m_min = 60 + |log m_min| (integrand <= k t e^{-t m_min} there)
_U_LO = -20.0
_T_HI = 60.0
_T_CHUNK = 1 << 21  # (t nodes x atoms) per temporary array


def positive_term(pos: NDArray, pos_w: ArrayLike, neg: NDArray, neg_w: ArrayLike | None, grid: NDArray) -> NDArray:
    """``E log(e^{S0} + S_k) - E log S_k`` per anchor, shape (n_anchor, len(grid)).

    ``pos`` (n_anchor, P) and ``neg`` (n_anchor, N) are the atoms of the positive's and one
    negative's score, with weights (rows summing to 1, or one row for every anchor; ``neg_w`` None:
    equal weights 1/N, a finite population as in :func:`simkit.exact.finite.exact_d_curve`); ``S_k`` is a
    sum of k i.i.d. ``e^{S}``. ``E log S_k`` is the same expectation with a negative-distributed
    "positive" and k - 1 negatives (k >= 2) and ``E S`` at k = 1; each expectation is split as
    log-mean plus centred remainder and the difference taken part by part, so no large terms cancel.
    """
    grid = np.asarray(grid)
    flat = neg_w is None
    if flat:
        neg_w = np.full(neg.shape[1], 1.0 / neg.shape[1])
    lm1, c1 = expected_log_sum_parts(pos, pos_w, neg, neg_w, grid)
    out = np.empty((pos.shape[0], grid.size))
    big = grid > 1
    if np.any(big):
        lm2, c2 = expected_log_sum_parts(neg, neg_w, neg, neg_w, grid[big] - 1)
        out[:, big] = (lm1[:, big] - lm2) + (c1[:, big] - c2)
    if not np.all(big):
        mean_s = neg.mean(axis=1) if flat else np.sum(np.broadcast_to(neg_w, neg.shape) * neg, axis=1)
        out[:, ~big] = lm1[:, ~big] + c1[:, ~big] - mean_s[:, None]
    return out


def snis_bias(m: ArrayLike, s: ArrayLike, w: ArrayLike, ks: ArrayLike) -> NDArray[np.float64]:
    """``E[V_k/W_k] - mu`` per anchor for a finite law of (m, s) under pi, ``mu = E[m s]/E[m]``.

    Parameters
    ----------
    m, s, w : array_like, shape (n_anchor, N)
        Density ratios (> 0), scores and probabilities (rows summing to 1) of the atoms.
    ks : array_like of int
        Database sizes, each >= 1.

    Returns
    -------
    ndarray, shape (n_anchor, len(ks))
        In the units of s (nats for scores).

    Notes
    -----
    V/W is invariant to the scale of m, so m is divided by E m. With ``u(t) = E[m (s - mu)
    (e^{-tm} - 1)]`` (the -1 costs nothing as ``E[m (s - mu)] = 0`` and makes u = O(t) as t -> 0;
    it is dropped where L(t) < 1/2, where it would only add rounding error) the
    bias is ``k int u(t) L(t)^{k-1} dt``, for k >= 2 by the trapezoidal rule in ``log t`` with step
    :data:`simkit.exact.curve.TRAPEZOID_STEP` (the integrand is entire in log t and bounded in the
    strip ``|Im log t| < pi/3``), and ``E s - mu`` at k = 1.
    """
    m = np.atleast_2d(np.asarray(m, dtype=float))
    s = np.atleast_2d(np.asarray(s, dtype=float))
    w = np.atleast_2d(np.asarray(w, dtype=float))
    if m.shape != s.shape or w.shape != m.shape:
        raise ValueError(f"'m', 's' and 'w' must have one shape (n_anchor, N), got {m.shape}, {s.shape}, {w.shape}")
    if not (np.all(np.isfinite(m)) and np.all(m > 0)):
        raise ValueError("'m' must be finite and > 0")
    if not (np.all(np.isfinite(s)) and np.all(np.isfinite(w)) and np.all(w >= 0)):
        raise ValueError("'s' must be finite and 'w' finite and >= 0")
    if np.any(np.abs(w.sum(axis=1) - 1.0) > 1e-9):
        raise ValueError("'w' rows must sum to 1")
    kf = _as_ks(ks)
    out = np.empty((m.shape[0], kf.size))
    for a in range(m.shape[0]):
        ma, sa, wa = m[a] / np.dot(w[a], m[a]), s[a], w[a]
        mu = np.dot(wa, ma * sa)
        dev = ma * (sa - mu) * wa
        keep = wa > 0
        m_min = float(ma[keep].min())
        u_lo = _U_LO - math.log(kf.max())
        u_hi = math.log((_T_HI + max(0.0, -math.log(m_min))) / m_min)
        u = np.arange(u_lo, u_hi + TRAPEZOID_STEP, TRAPEZOID_STEP)
        t = np.exp(u)
        log_l = np.empty(t.size)
        ut = np.empty(t.size)
        step = max(1, _T_CHUNK // ma.size)
        for i in range(0, t.size, step):
            e = np.expm1(-t[i:i + step, None] * ma[None, :])
            mean_e = e @ wa  # L - 1, without cancellation while L is near 1
            near = mean_e > -0.5
            with np.errstate(divide="ignore"):
                log_l[i:i + step] = np.where(near, np.log1p(np.maximum(mean_e, -0.5)), np.log((e + 1.0) @ wa))
            # E[m (s - mu) e^{-tm}]: with the -1 while L is near 1 (u = O(t), no cancellation), without it
            # beyond (there the -1 would leave the rounding of E[m (s - mu)] = 0 times a long range of t)
            ut[i:i + step] = np.where(near, e @ dev, (e + 1.0) @ dev)
        for j, k in enumerate(kf):
            if k == 1:
                out[a, j] = np.dot(wa, sa) - mu
            else:
                out[a, j] = TRAPEZOID_STEP * k * np.sum(ut * t * np.exp((k - 1.0) * log_l))
    return out


def discrete_d_curve(pos: ArrayLike, pos_w: ArrayLike, neg_s: ArrayLike, neg_m: ArrayLike, neg_w: ArrayLike,
                     ks: ArrayLike, mean_pos: ArrayLike | None = None) -> NDArray[np.float64]:
    """D_k per anchor when the positive's score and one database point's (s, m) have finite laws.

    ``pos``, ``pos_w`` (n_anchor, P): the positive's score atoms and weights; ``neg_s``, ``neg_m``,
    ``neg_w`` (n_anchor, N): a database point's score, density ratio and weight. ``mean_pos``: the
    positive's mean score ``mu_s(x)`` per anchor (default ``E[m s]/E[m]`` under the negatives' law,
    which is the same quantity when ``M(x, .) = m pi``). Returns shape (n_anchor, len(ks)), nats.
    """
    pos = np.atleast_2d(np.asarray(pos, dtype=float))
    neg_s = np.atleast_2d(np.asarray(neg_s, dtype=float))
    neg_m = np.atleast_2d(np.asarray(neg_m, dtype=float))
    neg_w = np.broadcast_to(np.atleast_2d(np.asarray(neg_w, dtype=float)), neg_s.shape)
    grid = _as_ks(ks)
    out = positive_term(pos, pos_w, neg_s, neg_w, grid) + snis_bias(neg_m, neg_s, neg_w, grid)
    if mean_pos is not None:
        mu = np.sum(neg_w * neg_m * neg_s, axis=1) / np.sum(neg_w * neg_m, axis=1)
        out += (mu - np.asarray(mean_pos, dtype=float).reshape(-1))[:, None]
    return out


@dataclass(frozen=True)
class SearchCurve:
    """The exact ``D_k`` on a grid: ``ks``, ``d`` (nats), ``n_atoms`` (database atoms per anchor) and
    ``n_anchors`` (anchor nodes of the outer rule)."""

    ks: NDArray[np.float64]
    d: NDArray[np.float64]
    n_atoms: int
    n_anchors: int


def _jacobi(n: int, alpha: float) -> tuple[NDArray, NDArray]:
    """Gauss--Jacobi nodes on [-1, 1] for the weight (1 - z^2)^alpha, weights summing to 1."""
    z, w = roots_jacobi(n, alpha, alpha)
    return z, w / w.sum()


def _tilted(z: NDArray, w: NDArray, kappa: float) -> NDArray:
    """Weights ``w e^{kappa z}`` normalised (a vMF law's cosine to its mean, for the base weight of w)."""
    lw = np.log(w) + kappa * z
    return np.exp(lw - logsumexp(lw))


def search_d_curve(pi, kernel: VMFKernel, tau: float, ks: ArrayLike, *, n_cos: int = 256, n_anchor: int = 32,
                   n_radius: int = 64, n_angle: int = 128) -> SearchCurve:
    """Exact ``D_k = R_k - E CE(M_k, Q_k)`` for phi = identity and a vMF kernel, at every k of ``ks``.

    Parameters
    ----------
    pi : Uniform or VonMisesFisher
        The data distribution on S^{d-1}, d >= 3.
    kernel : VMFKernel
        The positive kernel M(x, .) = vMF(x, kappa_M).
    tau : float
        Temperature (> 0): s(x, y) = x.y / tau.
    ks : array_like of int
        Database sizes, each >= 1.
    n_cos, n_anchor, n_radius, n_angle : int
        Rule sizes: Gauss nodes in a cosine (positive; uniform pi's database point), in the anchor's
        cosine to pi's mean, in the squared radius and trapezoid nodes in the angle of the disk.

    Returns
    -------
    SearchCurve

    Notes
    -----
    Uniform pi: a database point's cosine ``w = x.y`` has weight ``(1 - w^2)^{(d-3)/2}`` for every x,
    ``m = |S^{d-1}| C_d(kappa_M) e^{kappa_M w}``. vMF pi with mean e: D_k(x) depends on ``c = e.x``
    only (weight ``e^{kappa_pi c} (1 - c^2)^{(d-3)/2}``); y projects to ``(p, q) = (e.y, v.y)``, v the
    unit vector of x orthogonal to e, with weight ``e^{kappa_pi p} (1 - p^2 - q^2)^{(d-4)/2}`` on the
    disk, ``x.y = c p + sqrt(1 - c^2) q`` and ``log m = log C_d(kappa_M) + kappa_M x.y - log pi(y)``.
    The positive's cosine has weight ``e^{kappa_M w} (1 - w^2)^{(d-3)/2}`` whatever pi.
    """
    if not isinstance(kernel, VMFKernel):
        raise ValueError(f"'kernel' must be a VMFKernel, got {type(kernel).__name__}")
    if not isinstance(pi, (Uniform, VonMisesFisher)):
        raise ValueError(f"'pi' must be Uniform or VonMisesFisher (no low-dimensional reduction for "
                         f"{type(pi).__name__}), got {type(pi).__name__}")
    d = int(pi.dim)
    if d < 3:
        raise ValueError(f"'pi' must be on S^{{d-1}} with d >= 3, got d = {d}")
    tau = check_scalar("tau", tau, low=0.0, low_inclusive=False)
    n_cos, n_anchor = check_int("n_cos", n_cos, low=8), check_int("n_anchor", n_anchor, low=2)
    n_radius, n_angle = check_int("n_radius", n_radius, low=4), check_int("n_angle", n_angle, low=8)
    grid = _as_ks(ks)
    km = float(kernel.kappa)
    log_cm = float(log_vmf_norm(d, km))
    z, zw = _jacobi(n_cos, (d - 3) / 2)
    pos = z / tau
    pos_w = _tilted(z, zw, km)
    mean_pos = float(np.dot(pos_w, pos))
    if isinstance(pi, Uniform):
        log_m = float(log_sphere_area(d)) + log_cm + km * z
        d_k = discrete_d_curve(pos[None], pos_w, pos[None], np.exp(log_m)[None], zw[None], grid, [mean_pos])
        return SearchCurve(grid, d_k[0], n_cos, 1)
    kp = float(pi.kappa)
    log_cp = float(log_vmf_norm(d, kp))
    c, cw = _jacobi(n_anchor, (d - 3) / 2)
    cw = _tilted(c, cw, kp)
    # the disk: rho = r^2 with weight (1 - rho)^{(d-4)/2} (Gauss--Jacobi), angle by the trapezoidal rule
    zr, wr = roots_jacobi(n_radius, (d - 4) / 2, 0.0)
    r = np.sqrt((1.0 + zr) / 2.0)
    theta = 2.0 * np.pi * np.arange(n_angle) / n_angle
    p = (r[:, None] * np.cos(theta)[None, :]).ravel()
    q = (r[:, None] * np.sin(theta)[None, :]).ravel()
    base = np.repeat(wr / wr.sum(), n_angle) / n_angle
    yw = _tilted(p, base, kp)
    rows = np.empty((n_anchor, grid.size))
    for i, ci in enumerate(c):
        xy = ci * p + math.sqrt(max(0.0, 1.0 - ci * ci)) * q
        log_m = log_cm + km * xy - (log_cp + kp * p)
        rows[i] = discrete_d_curve(pos[None], pos_w, (xy / tau)[None], np.exp(log_m)[None], yw[None], grid,
                                   [mean_pos])[0]
    return SearchCurve(grid, cw @ rows, p.size, n_anchor)
