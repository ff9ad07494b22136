"""The exact finite-k InfoNCE gap curve, from a Laplace-transform (Frullani) identity.

For a positive score ``S0`` and i.i.d. negative scores ``S_1, ..., S_k`` (given the anchor), with
``Y_k = e^{S0} + sum_{i<=k} e^{S_i}`` and ``mu_k = E Y_k``, Frullani's integral gives
``E log(Y_k / mu_k) = int_0^inf ( e^{-mu_k t} - L0(t) L(t)^k ) dt / t`` with the Laplace transforms
``L0``, ``L`` of ``e^{S0}``, ``e^{S}`` (derivation: docs/theory.md section 10). Public functions:

* :func:`expected_log_sum` -- that expectation per anchor, for scores with finitely many values
  (the building block; also used by :mod:`simkit.diagnose` for finite data sets);
* :func:`expected_log_sum_parts` -- the same split as ``(log mu_k, E log(Y_k/mu_k))``: the second
  part is the small quantity a gap is made of, computed to full relative accuracy;
* :func:`gap_curve` -- the exact ``gap_k = R_k - log k - CE`` and ``R_k`` on a k grid for
  (pi, M, tau) with phi = identity (or a general embedding for Discrete pi on S^1, S^2): exact for
  uniform and single-vMF pi with isotropic kernels and for Discrete pi, Monte Carlo over x with
  exact inner integrals otherwise (a :class:`GapCurve` with MCSEs and the covariance across k);
* :func:`second_order_constant` -- ``c2`` of ``gap_k = c1/k + c2/k^2 + O(1/k^3)``
  (docs/theory.md §8).

Numerics (see :func:`expected_log_sum_parts`, Notes): scores are shifted by the per-anchor
maximum, the integral is taken in ``w = log t`` with the trapezoidal rule on a fixed step, and the
exponent ``log(L0 L^k) + mu_k t`` is evaluated from centred cumulant functions
``c(t) = log E exp(-t (X - E X))`` summed from non-negative terms only, so no cancellation occurs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.special import gammaln, logsumexp

from simkit.exact import formulas as exact
from simkit._jit.special import log_bessel_iv
from simkit._checks import check_int, check_rng, check_scalar
from simkit.distributions.heat import BrownianKernel
from simkit.distributions.kernels import MarkovKernel, RotatedVMFKernel, VMFKernel
from simkit.distributions.sphere import Discrete, SphereDistribution, Uniform, VonMisesFisher

__all__ = [
    "expected_log_sum",
    "expected_log_sum_parts",
    "TRAPEZOID_STEP",
    "GapCurve",
    "gap_curve",
    "second_order_constant",
    "expansion_constants",
    "needs_monte_carlo",
    "anchor_moments",
    "pool_moments",
    "constants_from_moments",
]

#: step of the trapezoidal rule in w = log t. The integrand is an entire function of w, bounded in
#: the strip |Im w| < pi/2, so the rule's error is O(exp(-2 pi d / h)) for any d < pi/2: with
#: h = 1/8 and d = pi/3 that is ~1e-23 times the integrand's size in the strip (measured: halving h
#: changes results by < 1e-16 absolute; tests/exact/test_exact_curve.py).
TRAPEZOID_STEP = 0.125
# left truncation: the integrand is ~ (u^2 Var(Y/mu)/2) e^{-u} as u = mu t -> 0, so stopping at
# u = e^{-20} drops a relative e^{-40}/2 ~ 2e-18 of E log(Y/mu)
_U_LO = math.exp(-20.0)
# right truncation: beyond t Y_min >= 45 both exp(-mu t) and L0 L^k are below e^{-45}
_TY_HI = 45.0
# largest |z| of the Taylor branch of g(z) = e^z - 1 - z, and its number of terms (0.25^14/16! ~ 2e-22)
_G_SERIES = 0.25
_G_TERMS = 14
# regime switch of the cumulant function: centred form while t E[X] <= this (no overflow of e^z)
_T_MEAN_MAX = 600.0
# largest score range (max - min per anchor) accepted: e^{-range} must stay a normal double
_RANGE_MAX = 700.0
_CHUNK_ELEMENTS = 1 << 22  # (anchors x nodes x atoms) per vectorised chunk
_T_CHUNK_ELEMENTS = 1 << 20  # (nodes x atoms) per temporary array of one anchor's cumulants (8 MiB)


# ----------------------------------------------------------------------------------------------
# validation

def _as_scores(name: str, a) -> NDArray[np.float64]:
    arr = np.asarray(a, dtype=float)
    if arr.ndim != 2 or arr.shape[0] == 0 or arr.shape[1] == 0:
        raise ValueError(f"'{name}' must be a non-empty 2-D array (n_anchor, n_atoms), got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"'{name}' must be finite (no NaN or inf)")
    return arr


def _as_weights(name: str, w, shape: tuple[int, int]) -> NDArray[np.float64]:
    arr = np.asarray(w, dtype=float)
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2 or arr.shape[1] != shape[1] or arr.shape[0] not in (1, shape[0]):
        raise ValueError(f"'{name}' must have shape {shape} or ({shape[1]},), got {np.shape(w)}")
    if not np.all(np.isfinite(arr)) or np.any(arr < 0):
        raise ValueError(f"'{name}' must be finite and >= 0")
    tot = arr.sum(axis=1)
    if np.any(np.abs(tot - 1.0) > 1e-9):
        bad = float(tot[np.argmax(np.abs(tot - 1.0))])
        raise ValueError(f"'{name}' rows must sum to 1, got a row summing to {bad!r}")
    return np.broadcast_to(arr / tot[:, None], shape)


def _as_ks(ks) -> NDArray[np.float64]:
    arr = np.atleast_1d(np.asarray(ks))
    if (arr.ndim != 1 or arr.size == 0 or arr.dtype.kind not in "iuf" or not np.all(np.isfinite(arr))
            or np.any(arr < 1) or np.any(arr != np.round(arr)) or np.any(arr > 2.0**53)):
        raise ValueError(f"'ks' must be a non-empty 1-D array of integers >= 1, got {ks!r}")
    return arr.astype(float)


# ----------------------------------------------------------------------------------------------
# the centred cumulant function c(t) = log E exp(-t (X - m)) >= 0

_G_COEF = np.array([2.0 / math.factorial(n + 2) for n in range(_G_TERMS)])  # g(z) = z^2/2 sum c_n z^n


def _g(z: NDArray) -> NDArray:
    """``g(z) = e^z - 1 - z >= 0`` to full relative accuracy (z <= ~700)."""
    out = np.empty_like(z)
    small = np.abs(z) < _G_SERIES
    zs = z[small]
    poly = np.zeros_like(zs)
    for c in _G_COEF[::-1]:
        poly = poly * zs + c
    out[small] = 0.5 * zs * zs * poly
    zl = z[~small]
    out[~small] = np.expm1(zl) - zl  # |z| >= 1/4: the subtraction loses at most ~3 bits
    return out


def _cumulants(t: NDArray, x: NDArray, w: NDArray, m: NDArray) -> tuple[NDArray, NDArray]:
    """``(c(t), log L(t))`` for atoms ``x`` (b, N) > 0, weights ``w`` (b, N), means ``m`` (b,).

    ``c(t) = log E e^{-t (X - m)} = log1p(E g(-t (X - m)))`` (E[X - m] = 0, g >= 0: a sum of
    non-negative terms) while ``t m <= 600``; beyond, ``log L(t) = logsumexp(log w - t X)`` directly
    and ``c = log L + t m`` (there e^{-mu t} < e^{-600} and only log L0 L^k matters, to absolute
    accuracy). Returns arrays (b, T).
    """
    b, n_t = x.shape[0], t.size
    c = np.empty((b, n_t))
    log_l = np.empty((b, n_t))
    dev = x - m[:, None]  # X - m
    with np.errstate(divide="ignore"):
        log_w = np.log(w)
    prev = None
    for i in range(b):
        if prev is not None and m[i] == m[prev] and np.array_equal(x[i], x[prev]) and np.array_equal(w[i], w[prev]):
            c[i], log_l[i] = c[prev], log_l[prev]  # the same law as the previous anchor (broadcast)
            continue
        prev = i
        tm = t * m[i]
        rows = max(1, _T_CHUNK_ELEMENTS // x.shape[1])  # bounded memory: (rows, N) temporaries
        for lo in range(0, n_t, rows):
            sl = slice(lo, min(n_t, lo + rows))
            cen = tm[sl] <= _T_MEAN_MAX
            tt = t[sl]
            cc, ll = np.empty(tt.size), np.empty(tt.size)
            if np.any(cen):
                z = -np.outer(tt[cen], dev[i])  # (T', N), z <= t m <= 600
                cc[cen] = np.log1p(_g(z) @ w[i])
                ll[cen] = cc[cen] - tm[sl][cen]
            if not np.all(cen):
                ll[~cen] = logsumexp(log_w[i][None, :] - np.outer(tt[~cen], x[i]), axis=1)
                cc[~cen] = ll[~cen] + tm[sl][~cen]
            c[i, sl], log_l[i, sl] = cc, ll
    return c, log_l


def _reduce_atoms(scores: NDArray, weights: NDArray, shift: NDArray) -> tuple[NDArray, NDArray, NDArray, NDArray]:
    """Atoms ``X = e^{S - shift}`` in (0, 1], weights, exact-ish means and log of the smallest atom
    carrying weight."""
    x = np.exp(scores - shift[:, None])
    w = np.asarray(weights, dtype=float)
    m = np.array([math.fsum(row) for row in x * w])
    with np.errstate(divide="ignore"):
        log_min = np.min(np.where(w > 0, scores - shift[:, None], np.inf), axis=1)
    return x, w, m, log_min


def expected_log_sum_parts(pos_scores: ArrayLike, pos_weights: ArrayLike, neg_scores: ArrayLike,
                           neg_weights: ArrayLike, ks: ArrayLike) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """``E log(e^{S0} + sum_{i<=k} e^{S_i})`` split as ``(log mu_k, E log(Y_k / mu_k))`` per anchor.

    Parameters are those of :func:`expected_log_sum`.

    Returns
    -------
    log_mean : ndarray, shape (n_anchor, len(ks))
        ``log E Y_k = log(E e^{S0} + k E e^{S})`` (the scores' per-anchor maximum included).
    centred : ndarray, shape (n_anchor, len(ks))
        ``E log(Y_k / E Y_k) <= 0``, to ~1e-15 absolute and 1e-9 relative (tested for
        k = 1 .. 2^20; for large k it is ``-Var(Y_k)/(2 mu_k^2) + ... = O(1/k)``).

    Notes
    -----
    With ``X = e^{S - M}`` (M the anchor's largest score), ``m = E X``, ``m0 = E X0``, ``mu_k = m0 + k m``
    and the centred cumulant functions ``c(t) = log E e^{-t(X - m)}``, ``c0`` likewise,

        E log(Y_k/mu_k) = int_{-inf}^{inf} e^{b(w)} expm1(-(k c(t) + c0(t))) dw,   t = e^w,
        b = k log L(t) + log L0(t) <= 0.

    The integrand is non-positive, an entire function of w and bounded by 2 in |Im w| < pi/2, so
    the trapezoidal rule with step :data:`TRAPEZOID_STEP` on the whole line converges like
    exp(-2 pi d / h); one grid of t serves every k (a shift of the grid does not affect the rule).
    The grid runs from ``u = mu_{k_max} t = e^{-20}`` (integrand ~u^2) to ``t Y_min = 45`` with
    ``Y_min = X0_min + k_min X_min`` the smallest value of Y (double-exponential decay). ``c`` is a
    log1p of a sum of non-negative terms ``g(z) = e^z - 1 - z`` (Taylor series for |z| < 1/2), so
    the exponent ``k c + c0`` has full relative accuracy even where it is 1e-30: this is what
    makes E log(Y/mu) accurate relative to itself when it is O(1/k).
    """
    pos = _as_scores("pos_scores", pos_scores)
    neg = _as_scores("neg_scores", neg_scores)
    if neg.shape[0] != pos.shape[0]:
        raise ValueError(f"'neg_scores' must have {pos.shape[0]} rows (one per anchor, like 'pos_scores'), "
                         f"got {neg.shape[0]}")
    wp = _as_weights("pos_weights", pos_weights, pos.shape)
    wn = _as_weights("neg_weights", neg_weights, neg.shape)
    kf = _as_ks(ks)
    n_a = pos.shape[0]
    with np.errstate(divide="ignore"):
        smax = np.maximum(np.max(np.where(wp > 0, pos, -np.inf), axis=1),
                          np.max(np.where(wn > 0, neg, -np.inf), axis=1))
        smin = np.minimum(np.min(np.where(wp > 0, pos, np.inf), axis=1),
                          np.min(np.where(wn > 0, neg, np.inf), axis=1))
    if np.any(smax - smin > _RANGE_MAX):
        raise ValueError(f"'pos_scores' and 'neg_scores' must span less than {_RANGE_MAX} per anchor "
                         f"(e^(-range) must be a normal double), got {float(np.max(smax - smin))!r}")
    x0, w0, m0, lmin0 = _reduce_atoms(pos, wp, smax)
    x1, w1, m1, lmin1 = _reduce_atoms(neg, wn, smax)
    k_lo, k_hi = float(kf.min()), float(kf.max())
    # one grid in w = log t for all anchors and all k
    log_mu_hi = np.log(m0 + k_hi * m1)
    log_ymin = np.logaddexp(lmin0, np.log(k_lo) + lmin1)
    w_lo = math.log(_U_LO) - float(np.max(log_mu_hi))
    w_hi = math.log(_TY_HI) - float(np.min(log_ymin))
    h = TRAPEZOID_STEP
    grid = w_lo + h * np.arange(int(math.ceil((w_hi - w_lo) / h)) + 1)
    t = np.exp(grid)
    log_mean = np.log(m0[:, None] + kf[None, :] * m1[:, None]) + smax[:, None]
    centred = np.empty((n_a, kf.size))
    n_atoms = max(pos.shape[1], neg.shape[1])
    step = max(1, _CHUNK_ELEMENTS // (t.size * n_atoms))
    for lo in range(0, n_a, step):
        sl = slice(lo, min(n_a, lo + step))
        c0, ll0 = _cumulants(t, x0[sl], w0[sl], m0[sl])
        c1, ll1 = _cumulants(t, x1[sl], w1[sl], m1[sl])
        for j, k in enumerate(kf):
            b = k * ll1 + ll0
            integrand = np.exp(b) * np.expm1(-(k * c1 + c0))
            centred[sl, j] = h * np.sum(integrand, axis=1)
    if not (np.all(np.isfinite(centred)) and np.all(np.isfinite(log_mean))):  # pragma: no cover
        raise FloatingPointError("expected_log_sum_parts produced a non-finite value")
    return log_mean, centred


def expected_log_sum(pos_scores: ArrayLike, pos_weights: ArrayLike, neg_scores: ArrayLike,
                     neg_weights: ArrayLike, ks: ArrayLike) -> NDArray[np.float64]:
    """``E log(e^{S0} + sum_{i=1..k} e^{S_i})`` per anchor, exactly, for every k.

    Accuracy: ~1e-15 times ``|log E Y_k| + |E log(Y_k/E Y_k)|`` absolute (the two parts of
    :func:`expected_log_sum_parts` can cancel); use that function when the O(1/k) part is needed.

    Parameters
    ----------
    pos_scores : array_like, shape (n_anchor, P)
        Values of the positive score S0 for each anchor.
    pos_weights : array_like, shape (n_anchor, P) or (P,)
        Their probabilities (rows sum to 1; zero weights allowed).
    neg_scores : array_like, shape (n_anchor, N)
        Values of one negative's score S; S_1..S_k are i.i.d. copies, independent of S0.
    neg_weights : array_like, shape (n_anchor, N) or (N,)
        Their probabilities (rows sum to 1).
    ks : array_like of int
        Numbers of negatives, each >= 1 (any order, repeats allowed).

    Returns
    -------
    ndarray, shape (n_anchor, len(ks))

    Notes
    -----
    ``log E Y_k + E log(Y_k / E Y_k)`` from :func:`expected_log_sum_parts` (Frullani's integral of
    the Laplace transforms of e^{S0} and e^{S}, shifted by the anchor's largest score). Cost
    O(n_anchor * (P + N) * T + n_anchor * len(ks) * T) with T ~ 8 (range + 25 + log k_max) nodes,
    range the anchor's score range.
    """
    log_mean, centred = expected_log_sum_parts(pos_scores, pos_weights, neg_scores, neg_weights, ks)
    return log_mean + centred


# argument checks shared with simkit.exact (one wording for every exact formula)
check_pi = exact.check_pi
check_kernel = exact.check_kernel


# ==============================================================================================
# The exact gap curve for (pi, M, tau), phi = identity

@dataclass(frozen=True)
class GapCurve:
    """The finite-k gap ``gap_k = R_k - log k - CE`` and the risk ``R_k`` on a k grid.

    Attributes
    ----------
    ks : ndarray of float
        The numbers of negatives.
    gap, risk : ndarray
        ``gap_k`` and ``R_k`` at every k (nats).
    gap_mcse, risk_mcse : ndarray or None
        Monte Carlo standard errors where the expectation over x is Monte Carlo (vMF mixtures,
        the rotated kernel over a vMF pi); None where the curve is exact.
    cross_entropy : float
        ``CE`` computed on the same rule (or sample) over x.
    exact : bool
        True where no Monte Carlo is involved.
    n_anchors : int
        Number of outer nodes (exact) or Monte Carlo anchors with exact inner integrals.
    cross_entropy_mcse : float
        MCSE of ``cross_entropy`` (0 where exact).
    gap_cov : ndarray or None
        Covariance matrix (n_k, n_k) of the Monte Carlo error of ``gap`` across k (one sample of
        anchors serves every k, so the errors are correlated); pass it to
        :func:`simkit.stats.truth_tests.curve_test` as ``exact_cov``. None where exact.
    """

    ks: NDArray[np.float64]
    gap: NDArray[np.float64]
    risk: NDArray[np.float64]
    gap_mcse: NDArray[np.float64] | None
    risk_mcse: NDArray[np.float64] | None
    cross_entropy: float
    exact: bool
    n_anchors: int
    cross_entropy_mcse: float = 0.0
    gap_cov: NDArray[np.float64] | None = None


_GL16 = np.polynomial.legendre.leggauss(16)  # 16-node rules are accurate to ~1e-16 in numpy


def _theta_rule(n_panels: int) -> tuple[NDArray, NDArray]:
    """Composite 16-node Gauss--Legendre rule on [0, pi]: nodes and weights (sum pi)."""
    x, w = _GL16
    edges = np.linspace(0.0, np.pi, n_panels + 1)
    a, b = edges[:-1, None], edges[1:, None]
    return (0.5 * (b - a) * x + 0.5 * (b + a)).ravel(), (0.5 * (b - a) * w).ravel()


def _log_bessel_ratio(nu: float, b: NDArray) -> NDArray:
    """``log(I_nu(b) / b^nu)`` for b >= 0, continuous at b = 0 (nu >= 0)."""
    out = np.empty(b.shape)
    small = b < 1e-6
    bs = b[small]
    out[small] = -nu * math.log(2.0) - gammaln(nu + 1.0) + np.log1p(bs * bs / (4.0 * (nu + 1.0)))
    bl = b[~small]
    out[~small] = log_bessel_iv(nu, bl) - nu * np.log(bl)
    return out


def _log_cosine_density_vmf(theta: NDArray, d: int, kappa: NDArray, gamma: NDArray) -> NDArray:
    """Unnormalised log density of the angle between x and y, y ~ vMF(nu, kappa), x.nu = gamma.

    ``sin^{d-2} theta e^{kappa gamma cos theta} (I_{(d-3)/2}(b) / b^{(d-3)/2})``, b = kappa
    sqrt(1 - gamma^2) sin theta: the integral over the direction of y around x is a Bessel
    function (for d = 2, cosh b). Shapes: theta (n,), kappa and gamma (b,) -> (b, n).
    """
    kappa = np.asarray(kappa, dtype=float)[:, None]
    gamma = np.clip(np.asarray(gamma, dtype=float), -1.0, 1.0)[:, None]
    st, ct = np.sin(theta)[None, :], np.cos(theta)[None, :]
    sg = np.sqrt(np.maximum(0.0, (1.0 - gamma) * (1.0 + gamma)))
    b = kappa * sg * st
    out = kappa * gamma * ct + ((d - 2) * np.log(st) if d > 2 else 0.0)
    if d == 2:
        return out + b + np.log1p(np.exp(-2.0 * b))
    return out + _log_bessel_ratio(0.5 * (d - 3), b.ravel()).reshape(b.shape)


def _normalise_log(lw: NDArray) -> NDArray:
    return np.exp(lw - logsumexp(lw, axis=-1, keepdims=True))


def _positive_law(kernel: MarkovKernel, x: NDArray, theta: NDArray, base_w: NDArray
                  ) -> tuple[NDArray, NDArray]:
    """Cosines ``x.x+`` (b, n) and probabilities (b, n) of the positive's cosine law at anchors x."""
    d = x.shape[1]
    log_base = np.log(base_w)[None, :]
    ct = np.broadcast_to(np.cos(theta), (x.shape[0], theta.size))
    if isinstance(kernel, VMFKernel):
        lw = _log_cosine_density_vmf(theta, d, np.array([kernel.kappa]), np.array([1.0]))
        return ct, np.broadcast_to(_normalise_log(lw + log_base), ct.shape)
    if isinstance(kernel, RotatedVMFKernel):
        gamma = np.sum(x * (x @ kernel.rotation.T), axis=1)  # x . Rx
        lw = _log_cosine_density_vmf(theta, d, np.full(x.shape[0], kernel.kappa), gamma)
        return ct, _normalise_log(lw + log_base)
    if isinstance(kernel, BrownianKernel):
        dens = kernel.pdf_angle(theta, d)
        if np.any(dens < 0) or not np.all(np.isfinite(dens)):  # pragma: no cover
            raise FloatingPointError("BrownianKernel.pdf_angle returned a negative or non-finite value")
        with np.errstate(divide="ignore"):
            lw = np.log(dens)[None, :] + log_base
        return ct, np.broadcast_to(_normalise_log(lw), ct.shape)
    raise NotImplementedError(f"the positive's score law is implemented for VMFKernel, RotatedVMFKernel and "
                              f"BrownianKernel, not {type(kernel).__name__}")


def _negative_law(pi: SphereDistribution, x: NDArray, theta: NDArray, base_w: NDArray
                  ) -> tuple[NDArray, NDArray]:
    """Cosines ``x.y`` and probabilities of one negative's cosine law at anchors x, y ~ pi."""
    if isinstance(pi, Discrete):
        return x @ pi.points.T, np.broadcast_to(pi.weights, (x.shape[0], pi.weights.size))
    w, mus, kappas = pi.as_mixture()
    d = pi.dim
    log_base = np.log(base_w)[None, :]
    prob = np.zeros((x.shape[0], theta.size))
    for wj, mu, kj in zip(w, mus, kappas):  # every component's law lives on the same angle nodes
        if wj == 0.0:
            continue
        gamma = x @ mu
        lw = _log_cosine_density_vmf(theta, d, np.full(x.shape[0], kj), gamma) + log_base
        prob += wj * _normalise_log(lw)
    return np.broadcast_to(np.cos(theta), prob.shape), prob / prob.sum(axis=1, keepdims=True)


def _per_anchor_gap(pi, kernel, tau, x, kf, theta, base_w) -> tuple[NDArray, NDArray]:
    """``gap_k(x) = log1p(m1/(k Z)) + E log(Y_k/E Y_k)`` (b, n_k) and ``log Z(x) - E[s0 | x]`` (b,)."""
    a = 1.0 / tau
    cp, wp = _positive_law(kernel, x, theta, base_w)
    cn, wn = _negative_law(pi, x, theta, base_w)
    _, centred = expected_log_sum_parts(a * cp, wp, a * cn, wn, kf)
    log_z = exact.log_partition(pi, x, tau)
    log_m1 = exact.log_m1(kernel, x, tau)
    gap = np.log1p(np.exp(log_m1 - log_z)[:, None] / kf[None, :]) + centred
    ell_inf = log_z - exact.mean_score(kernel, x, tau)
    return gap, ell_inf


def _default_panels(tau: float, kappa: float) -> int:
    # 16-node panels of width pi/n resolve analytic integrands whose singularities lie ~pi tau from
    # the real axis (log-sum-exp of scores a cos theta) and peaks of width 1/sqrt(kappa)
    return int(math.ceil(8 + 2.0 / tau + 3.0 * math.sqrt(kappa)))


def _kernel_kappa(kernel) -> float:
    if isinstance(kernel, (VMFKernel, RotatedVMFKernel)):
        return float(kernel.kappa)
    if isinstance(kernel, BrownianKernel):
        return 1.0 / float(kernel.t)  # the heat kernel at time t is roughly vMF(1/t)
    return 0.0


def _discrete_embedded_curve(pi: Discrete, kernel: MarkovKernel, tau: float, kf: NDArray, embedding,
                             n_sphere: int) -> GapCurve:
    """Discrete pi with a general embedding phi on S^{p-1}, p in {2, 3}: negatives exact (the atoms),
    the positive's law by the product rule of :func:`simkit.exact.quadrature.sphere_rule` centred on the
    kernel's mean direction, weighted by the kernel density."""
    from simkit.exact.quadrature import sphere_rule

    p = pi.dim
    if p not in (2, 3):
        raise NotImplementedError(f"'embedding' is supported for Discrete pi on S^1 or S^2 (p = 2, 3), got p = {p}: "
                                  f"the positive's law needs quadrature over S^{{p-1}}")
    keep = pi.weights > 0
    xs, wx = pi.points[keep], pi.weights[keep]
    fx = np.asarray(embedding(xs), dtype=float)
    fy = np.asarray(embedding(pi.points), dtype=float)
    neg = fx @ fy.T / tau  # (b, m) exact negatives
    with np.errstate(divide="ignore"):
        log_wn = np.log(pi.weights)
    log_z = logsumexp(log_wn[None, :] + neg, axis=1)
    n_k = kf.size
    gap_x = np.empty((xs.shape[0], n_k))
    ell_x = np.empty(xs.shape[0])
    for i, x in enumerate(xs):
        pole = x @ kernel.rotation.T if isinstance(kernel, RotatedVMFKernel) else x
        nodes, log_w = sphere_rule(p, n_sphere, pole=pole / np.linalg.norm(pole))
        lw = log_w + kernel.logpdf(np.broadcast_to(x, nodes.shape), nodes)
        prob = _normalise_log(lw)
        big = prob > 1e-22  # atoms below change E log(.) by < 1e-22 x (score range): dropped
        nodes, prob = nodes[big], prob[big] / prob[big].sum()
        pos = (np.asarray(embedding(nodes), dtype=float) @ fx[i]) / tau
        _, centred = expected_log_sum_parts(pos[None, :], prob[None, :], neg[i:i + 1], pi.weights, kf)
        log_m1 = logsumexp(np.log(np.maximum(prob, 1e-300)) + pos)
        gap_x[i] = np.log1p(np.exp(log_m1 - log_z[i]) / kf) + centred[0]
        ell_x[i] = log_z[i] - float(prob @ pos)
    gap = wx @ gap_x
    ce = float(wx @ ell_x)
    return GapCurve(kf, gap, gap + np.log(kf) + ce, None, None, ce, True, int(wx.size))


def gap_curve(pi: SphereDistribution, kernel: MarkovKernel, tau: float, ks: ArrayLike, *, rng=None,
              n_mc: int = 256, n_cv: int = 1 << 18, n_panels: int | None = None,
              n_outer_panels: int | None = None, embedding=None, n_sphere: int = 64) -> GapCurve:
    """The finite-k gap ``gap_k = R_k - log k - CE`` and ``R_k`` at every k, for phi = identity.

    Parameters
    ----------
    pi : SphereDistribution
        Uniform, VonMisesFisher, VMFMixture or Discrete.
    kernel : MarkovKernel
        VMFKernel, RotatedVMFKernel or BrownianKernel.
    tau : float
        Temperature > 0.
    ks : array_like of int
        Numbers of negatives, each >= 1.
    rng : numpy Generator or int, optional
        Required where the expectation over x is Monte Carlo (vMF mixtures with two or more
        components; the rotated kernel over a vMF pi); no default seed.
    n_mc, n_cv : int
        Monte Carlo anchors with exact inner integrals (stratified by mixture component), and the
        anchors of the mean of their control variate ``c1(x)/k + c2(x)/k^2``. The per-anchor terms
        are heavy-tailed where tau is small or pi concentrated: use n_mc of a few hundred or more
        (with n_mc = 32 the MCSE under-stated the error ~3x).
    embedding : callable, optional
        ``phi``: (n, p) -> (n, d) unit vectors, for Discrete pi on S^1 or S^2 only (the positive's
        law uses ``sphere_rule(p, n_sphere)``). Default: phi = identity.
    n_sphere : int
        Size parameter of that rule (2 n^2 nodes on S^2).
    n_panels, n_outer_panels : int, optional
        Panels (16 Gauss--Legendre nodes each) in the angle of the inner cosine laws and of
        ``arccos(mu.x)`` (single vMF pi). Defaults scale with 1/tau and sqrt(kappa); doubling them
        changes gap_k by < 1e-9 relative.

    Returns
    -------
    GapCurve

    Notes
    -----
    Given x, ``R_k(x) - log k - l_inf(x) = log1p(m1/(kZ)) + E log(Y_k / E Y_k)``, the second term by
    Frullani's integral over the cosine laws of the positive and of one negative (docs/theory.md
    section 10), then integrated over x by a rule suited to pi and the kernel, or by stratified Monte
    Carlo for vMF mixtures (details: docs/design.md, "simkit.exact.curve: gap_curve").
    """
    pi = check_pi(pi)
    kernel = check_kernel(kernel)
    tau = check_scalar("tau", tau, low=0.0, low_inclusive=False)
    if isinstance(kernel, RotatedVMFKernel) and kernel.dim != pi.dim:
        raise ValueError(f"'kernel' has dimension {kernel.dim} but 'pi' has dimension {pi.dim}")
    kf = _as_ks(ks)
    n_mc = check_int("n_mc", n_mc, low=2)
    if embedding is not None:
        if not isinstance(pi, Discrete):
            raise ValueError(f"'embedding' is supported for Discrete pi only, got {type(pi).__name__}")
        if not callable(embedding):
            raise ValueError(f"'embedding' must be callable, got {type(embedding).__name__}")
        return _discrete_embedded_curve(pi, kernel, tau, kf, embedding, check_int("n_sphere", n_sphere, low=2))
    theta, base_w = _theta_for(pi, kernel, tau, n_panels)
    log_k = np.log(kf)

    x, wx = _outer_rule(pi, kernel, n_outer_panels)
    if x is not None:
        gap_x, ell_x = _per_anchor_gap(pi, kernel, tau, x, kf, theta, base_w)
        gap = wx @ gap_x
        ce = float(wx @ ell_x)
        return GapCurve(kf, gap, gap + log_k + ce, None, None, ce, True, int(wx.size))
    # Monte Carlo over x with exact inner terms, stratified by component, with the per-anchor
    # expansion c1(x)/k + c2(x)/k^2 as a control variate whose mean comes from a far larger sample
    if rng is None:
        raise ValueError("'rng' is required: the expectation over x is Monte Carlo for this (pi, kernel) "
                         "(pass a numpy Generator or an int seed; there is no default seed)")
    rng = check_rng(rng)
    n_cv = check_int("n_cv", n_cv, low=2)
    res_m, res_s, n_used, res_c = _stratified_mean(
        pi, lambda x: _curve_terms(pi, kernel, tau, x, kf, theta, base_w), n_mc, rng, with_cov=True)
    cv_m, cv_s, _, cv_c = _stratified_mean(pi, lambda x: _cv_terms(*_anchor_constants(pi, kernel, tau, x), kf),
                                           n_cv, rng, with_cov=True)  # independent sample
    return _curve_from_means(kf, res_m, res_s, n_used, res_c, cv_m, cv_s, cv_c)


def _theta_for(pi, kernel, tau, n_panels) -> tuple[NDArray, NDArray]:
    """The product rule in the angle of the inner cosine laws (panels scale with 1/tau, sqrt(kappa))."""
    kap_k = _kernel_kappa(kernel)
    kap_pi = 0.0 if isinstance(pi, Discrete) else float(np.max(pi.as_mixture()[2]))
    n_p = _default_panels(tau, max(kap_k, kap_pi)) if n_panels is None else check_int("n_panels", n_panels, low=1)
    return _theta_rule(n_p)


def _curve_terms(pi, kernel, tau, x, kf, theta, base_w) -> NDArray:
    """Per-anchor terms of the Monte Carlo curve (b, 4 n_k): gap_k(x), its residuals after the
    expansion to 1/k and to 1/k^2, and gap_k(x) + l_inf(x)."""
    k1, k2 = 1.0 / kf, 1.0 / (kf * kf)
    g, ell = _per_anchor_gap(pi, kernel, tau, x, kf, theta, base_w)
    c1x, c2x, _ = _anchor_constants(pi, kernel, tau, x)
    e1 = np.outer(c1x, k1)
    e2 = e1 + np.outer(c2x, k2)
    return np.concatenate([g, g - e1, g - e2, g + ell[:, None]], axis=1)


def _cv_terms(c1x, c2x, ell, kf) -> NDArray:
    """Per-anchor control-variate terms (b, 4 n_k + 1): the expansion to 1/k and to 1/k^2, each
    plus l_inf(x), and l_inf(x)."""
    k1, k2 = 1.0 / kf, 1.0 / (kf * kf)
    e1 = np.outer(c1x, k1)
    e2 = e1 + np.outer(c2x, k2)
    return np.concatenate([e1, e2, e1 + ell[:, None], e2 + ell[:, None], ell[:, None]], axis=1)


def _curve_from_means(kf, res_m, res_s, n_used, res_c, cv_m, cv_s, cv_c) -> GapCurve:
    """The Monte Carlo GapCurve from the stratified means, MCSEs and covariances of the curve terms
    (one sample) and of the control-variate terms (an independent sample)."""
    log_k = np.log(kf)
    n_k = kf.size
    blk = lambda a, i: a[i * n_k:(i + 1) * n_k]  # noqa: E731
    # three unbiased estimators of gap_k: no control variate, c1(x)/k, c1(x)/k + c2(x)/k^2 (far from
    # the asymptotic range the expansion is a poor control); per k the one with the smallest MCSE
    # is reported (a choice by estimated variance among unbiased estimators: any selection effect
    # is O(1/n_mc) relative to the MCSE itself)
    gaps = np.stack([blk(res_m, 0), blk(res_m, 1) + blk(cv_m, 0), blk(res_m, 2) + blk(cv_m, 1)])
    ses = np.stack([blk(res_s, 0), np.hypot(blk(res_s, 1), blk(cv_s, 0)), np.hypot(blk(res_s, 2), blk(cv_s, 1))])
    risks = np.stack([blk(res_m, 3), blk(res_m, 1) + blk(cv_m, 2), blk(res_m, 2) + blk(cv_m, 3)]) + log_k
    rses = np.stack([blk(res_s, 3), np.hypot(blk(res_s, 1), blk(cv_s, 2)), np.hypot(blk(res_s, 2), blk(cv_s, 3))])
    best = np.argmin(ses, axis=0)
    cols = np.arange(n_k)
    # covariance of the reported gap curve across k: the two samples are independent
    res_idx = best * n_k + cols
    cv_idx = np.where(best == 0, -1, (best - 1) * n_k + cols)
    cv_pad = np.zeros((cv_c.shape[0] + 1, cv_c.shape[0] + 1))
    cv_pad[:-1, :-1] = cv_c  # index -1: the zero row of "no control variate"
    gap_cov = res_c[np.ix_(res_idx, res_idx)] + cv_pad[np.ix_(cv_idx, cv_idx)]
    return GapCurve(kf, gaps[best, cols], risks[best, cols], ses[best, cols], rses[best, cols],
                    float(cv_m[-1]), False, int(n_used), float(cv_s[-1]), gap_cov)


def _proportional_counts(w: NDArray, n: int) -> list[int]:
    """Draws per mixture component of a stratified sample of ``n``: ``max(2, round(n w_j))``, 0 for a
    zero weight (proportional allocation)."""
    return [0 if wj == 0.0 else max(2, int(round(n * wj))) for wj in w]


def _stratified_mean(pi: SphereDistribution, h, n: int, rng, *, with_cov: bool = False):
    """Stratified (by mixture component, proportional allocation) Monte Carlo mean of h(x), x ~ pi:
    (mean, mcse, number of draws) and, with ``with_cov``, the covariance matrix of the mean."""
    w, mus, kappas = pi.as_mixture()
    mean, var, cov, n_tot = 0.0, 0.0, 0.0, 0
    for wj, mu, kj, nj in zip(w, mus, kappas, _proportional_counts(w, n)):
        if nj == 0:
            continue
        hj = h(VonMisesFisher(mu, kj).rvs(nj, rng=rng))
        mean = mean + wj * hj.mean(axis=0)
        var = var + wj**2 * hj.var(axis=0, ddof=1) / nj
        if with_cov:
            cov = cov + wj**2 * np.atleast_2d(np.cov(hj, rowvar=False, ddof=1)) / nj
        n_tot += nj
    if with_cov:
        return np.asarray(mean), np.sqrt(np.asarray(var)), n_tot, np.asarray(cov)
    return np.asarray(mean), np.sqrt(np.asarray(var)), n_tot


# ==============================================================================================
# The expansion gap_k = c1/k + c2/k^2 + O(1/k^3)

def _anchor_constants(pi, kernel, tau, x) -> tuple[NDArray, NDArray, NDArray]:
    """Per-anchor ``c1(x)``, ``c2(x)`` (docs/theory.md §8) and ``l_inf(x) = log Z - E[s0|x]``.

    With ``r_j = Z_j / Z^j`` (Z_j = E e^{j s}), ``v2 = r2 - 1``, ``v3 = r3 - 3 r2 + 2`` (the second and
    third central moments of e^s/Z), ``mu1 = m1/Z`` and ``mu2 = m2/Z^2`` (m_j = E e^{j s0}):
    ``c1 = mu1 - v2/2`` and ``c2 = -mu2/2 + mu1 v2 + v3/3 - 3 v2^2/4``.
    """
    c1, c2, ell, _, _, _ = _anchor_terms(pi, kernel, tau, x)
    return c1, c2, ell


def _anchor_terms(pi, kernel, tau, x) -> tuple[NDArray, ...]:
    """``(c1(x), c2(x), l_inf(x), log Z(x), v2(x), mu1(x))`` of :func:`_anchor_constants`, from one
    evaluation of the log-partition functions."""
    lz = exact.log_partition(pi, x, tau)
    lz2 = exact.log_partition(pi, x, tau, scale=2.0)
    lz3 = exact.log_partition(pi, x, tau, scale=3.0)
    lm1 = exact.log_m1(kernel, x, tau)
    lm2 = exact.log_m1(kernel, x, 0.5 * tau)  # E exp(2 x.x+/tau)
    v2 = np.expm1(lz2 - 2.0 * lz)
    r3 = np.exp(lz3 - 3.0 * lz)
    v3 = (r3 - 1.0) - 3.0 * v2
    mu1 = np.exp(lm1 - lz)
    mu2 = np.exp(lm2 - 2.0 * lz)
    c1 = mu1 - 0.5 * v2
    c2 = -0.5 * mu2 + mu1 * v2 + v3 / 3.0 - 0.75 * v2 * v2
    return c1, c2, lz - exact.mean_score(kernel, x, tau), lz, v2, mu1


def second_order_constant(pi: SphereDistribution, kernel: MarkovKernel, tau: float, *, rng=None,
                          n_mc: int = 1 << 18) -> float | exact.Estimate:
    """The 1/k^2 constant ``c2`` of ``gap_k = c1/k + c2/k^2 + O(1/k^3)`` (derived in docs/theory.md §8).

    ``c2 = E_x[ -m2/(2 Z^2) + (m1/Z) v2 + v3/3 - 3 v2^2/4 ]`` with ``v2 = Z2/Z^2 - 1``,
    ``v3 = Z3/Z^3 - 3 Z2/Z^2 + 2``, ``m_j(x) = E e^{j s(x, x+)}``, ``Z_j(x) = E_{y~pi} e^{j s(x, y)}``.

    Parameters
    ----------
    pi, kernel, tau
        As in :func:`gap_curve` (kernels with closed-form m1: VMF, rotated vMF, Brownian).
    rng : numpy Generator or int, optional
        Required where the expectation over x is Monte Carlo (as in :func:`gap_curve`).
    n_mc : int
        Monte Carlo anchors in that case.

    Returns
    -------
    float where exact (uniform; single vMF with an isotropic kernel; Discrete);
    :class:`simkit.exact.Estimate` (value, mcse) otherwise.
    """
    pi = check_pi(pi)
    kernel = check_kernel(kernel)
    tau = check_scalar("tau", tau, low=0.0, low_inclusive=False)
    n_mc = check_int("n_mc", n_mc, low=2)
    if isinstance(kernel, RotatedVMFKernel) and kernel.dim != pi.dim:
        raise ValueError(f"'kernel' has dimension {kernel.dim} but 'pi' has dimension {pi.dim}")

    return expansion_constants(pi, kernel, tau, rng=rng, n_mc=n_mc)["c2"]


def expansion_constants(pi: SphereDistribution, kernel: MarkovKernel, tau: float, *, rng=None,
                        n_mc: int = 1 << 18) -> dict[str, float | exact.Estimate]:
    """``{"c1": ..., "c2": ...}``: both constants of the expansion on the rule over x of :func:`gap_curve`.

    c1 is :func:`simkit.exact.bias_constant`'s quantity, here exact also for the rotated vMF kernel
    over uniform pi (a 1-D rule in x.Rx), where :mod:`simkit.exact` uses Monte Carlo. Floats where
    exact, :class:`simkit.exact.Estimate` otherwise (``rng`` then required; one sample for both).
    """
    pi = check_pi(pi)
    kernel = check_kernel(kernel)
    tau = check_scalar("tau", tau, low=0.0, low_inclusive=False)
    n_mc = check_int("n_mc", n_mc, low=2)
    if isinstance(kernel, RotatedVMFKernel) and kernel.dim != pi.dim:
        raise ValueError(f"'kernel' has dimension {kernel.dim} but 'pi' has dimension {pi.dim}")

    def both(x):
        c1, c2, _ = _anchor_constants(pi, kernel, tau, x)
        return np.stack([c1, c2], axis=1)

    x, wx = _outer_rule(pi, kernel, None)
    if x is not None:
        v = wx @ both(x)
        return {"c1": float(v[0]), "c2": float(v[1])}
    if rng is None:
        raise ValueError("'rng' is required: the expectation over x is Monte Carlo for this (pi, kernel) "
                         "(pass a numpy Generator or an int seed; there is no default seed)")
    mean, se, _ = _stratified_mean(pi, both, n_mc, check_rng(rng))
    return {"c1": exact.Estimate(float(mean[0]), float(se[0])), "c2": exact.Estimate(float(mean[1]), float(se[1]))}


def _outer_rule(pi, kernel, n_outer_panels) -> tuple[NDArray | None, NDArray | None]:
    """Anchors and probabilities of the exact expectation over x, or (None, None) where it is Monte Carlo."""
    d = pi.dim
    if isinstance(pi, Discrete):
        keep = pi.weights > 0
        return pi.points[keep], pi.weights[keep]
    if isinstance(pi, Uniform) and isinstance(kernel, RotatedVMFKernel):
        return _uniform_rotation_rule(d, kernel.rotation, n_outer_panels)
    single = isinstance(pi, (Uniform, VonMisesFisher)) or len(pi.weights) == 1
    if not (single and kernel.isotropic):
        return None, None
    _, mus, kappas = pi.as_mixture()
    mu, kap = mus[0], float(kappas[0])
    e = np.zeros(d)
    e[np.argmin(np.abs(mu))] = 1.0
    perp = e - (e @ mu) * mu
    perp /= np.linalg.norm(perp)
    if kap == 0.0:
        th_x, w_x = np.array([1.2]), np.array([1.0])
    else:
        n_o = (_default_panels(1.0, kap) if n_outer_panels is None
               else check_int("n_outer_panels", n_outer_panels, low=1))
        th_x, bw = _theta_rule(n_o)
        w_x = _normalise_log(_log_cosine_density_vmf(th_x, d, np.array([kap]), np.array([1.0]))[0] + np.log(bw))
    return np.cos(th_x)[:, None] * mu + np.sin(th_x)[:, None] * perp, w_x


def _uniform_rotation_rule(d: int, rotation: NDArray, n_outer_panels) -> tuple[NDArray | None, NDArray | None]:
    """Uniform pi with M(x, .) = vMF(R x, kappa): everything depends on x only through
    ``x.Rx = x' S x``, S = (R + R')/2. When S has two distinct eigenvalues l1 (multiplicity p) and
    l2 (multiplicity q) -- a rotation in one plane: cos(angle) twice and 1 -- ``x' S x = l2 + (l1 - l2) r^2``
    with ``r^2 ~ Beta(p/2, q/2)`` under uniform x: a 1-D rule in phi, ``r = sin phi`` (density
    ``sin^{p-1} phi cos^{q-1} phi`` on [0, pi/2], smooth). Otherwise (None, None): Monte Carlo.
    """
    sym = 0.5 * (rotation + rotation.T)
    lam, vec = np.linalg.eigh(sym)
    groups = []
    for i, v in enumerate(lam):
        if groups and abs(v - lam[groups[-1][0]]) < 1e-12:
            groups[-1].append(i)
        else:
            groups.append([i])
    if len(groups) == 1:  # R = I (or S a multiple of I): x.Rx is constant
        return np.eye(d)[:1], np.array([1.0])
    if len(groups) != 2:
        return None, None
    ea, eb = vec[:, groups[0][0]], vec[:, groups[1][0]]
    p, q = len(groups[0]), len(groups[1])
    n_o = 8 if n_outer_panels is None else check_int("n_outer_panels", n_outer_panels, low=1)
    x16, w16 = _GL16
    edges = np.linspace(0.0, 0.5 * np.pi, n_o + 1)
    a_, b_ = edges[:-1, None], edges[1:, None]
    phi = (0.5 * (b_ - a_) * x16 + 0.5 * (b_ + a_)).ravel()
    bw = (0.5 * (b_ - a_) * w16).ravel()
    lw = np.log(bw) + (p - 1) * np.log(np.sin(phi)) + (q - 1) * np.log(np.cos(phi))
    x = np.sin(phi)[:, None] * ea + np.cos(phi)[:, None] * eb
    return x, _normalise_log(lw)


# ==============================================================================================
# The Monte Carlo over anchors in parts: one sample shared by every constant, split into chunks
# that run as separate tasks (a study's split preparation, simkit.runner.Study.prepare_parts)

def needs_monte_carlo(pi: SphereDistribution, kernel: MarkovKernel) -> bool:
    """True where :func:`gap_curve`'s expectation over x is Monte Carlo (no exact rule over x)."""
    return _outer_rule(check_pi(pi), check_kernel(kernel), None)[0] is None


def _allocation(pi: SphereDistribution, n: int, part: int, n_parts: int) -> list[int]:
    """Draws from each mixture component in part ``part`` of ``n_parts``: the proportional
    allocation of :func:`_stratified_mean` (``max(2, round(n w_j))``, 0 for a zero weight), dealt
    out as evenly as possible over the parts."""
    return [nj // n_parts + (1 if part < nj % n_parts else 0) for nj in _proportional_counts(pi.as_mixture()[0], n)]


def _component_moments(pi: SphereDistribution, h, counts: list[int], rng) -> dict[str, NDArray]:
    """Per component: draws, mean and centred cross-product matrix of h(x) over its draws."""
    w, mus, kappas = pi.as_mixture()
    means, m2s = [], []
    n_f = None
    for nj, mu, kj in zip(counts, mus, kappas):
        if nj == 0:
            means.append(None)
            m2s.append(None)
            continue
        hj = np.asarray(h(VonMisesFisher(mu, kj).rvs(nj, rng=rng)), dtype=float)
        mj = hj.mean(axis=0)
        dev = hj - mj
        means.append(mj)
        m2s.append(dev.T @ dev)
        n_f = hj.shape[1]
    if n_f is None:
        raise ValueError("a part with no anchors: ask for fewer parts or more anchors")
    mean = np.stack([np.zeros(n_f) if m is None else m for m in means])
    m2 = np.stack([np.zeros((n_f, n_f)) if m is None else m for m in m2s])
    return {"n": np.asarray(counts, dtype=float), "mean": mean, "m2": m2}


def anchor_moments(pi: SphereDistribution, kernel: MarkovKernel, tau: float, ks: ArrayLike, part: int,
                   n_parts: int, *, rng, n_mc: int = 256, n_cv: int = 1 << 18,
                   n_panels: int | None = None) -> dict[str, NDArray]:
    """Part ``part`` of ``n_parts`` of the Monte Carlo over anchors behind :func:`gap_curve` and the
    constants c1, c2, CE, ``E[Z2/Z^2]`` and ``E[m1/Z]``: sufficient statistics (per mixture
    component: draws, mean, centred cross-products) of the curve terms on its share of ``n_mc``
    anchors and of the constants' terms on its share of ``n_cv`` further anchors.

    Pool the parts with :func:`pool_moments` and finish with :func:`constants_from_moments`: the
    estimators are those of :func:`gap_curve` (``n_mc``, ``n_cv``), :func:`simkit.exact.bias_constant`,
    :func:`simkit.exact.cross_entropy`, :func:`simkit.exact.expansion_scales` and
    :func:`second_order_constant` (``n_cv`` anchors each), except that all the constants share
    one sample of ``n_cv`` anchors (the log-partition functions are evaluated once per anchor) and
    that the draws come from each part's own generator. Kernels with closed-form m1 only (VMF,
    rotated vMF, Brownian).
    """
    pi = check_pi(pi)
    kernel = check_kernel(kernel)
    tau = check_scalar("tau", tau, low=0.0, low_inclusive=False)
    kf = _as_ks(ks)
    n_parts = check_int("n_parts", n_parts, low=1)
    part = check_int("part", part, low=0, high=n_parts - 1)
    n_mc = check_int("n_mc", n_mc, low=2)
    n_cv = check_int("n_cv", n_cv, low=2)
    if not needs_monte_carlo(pi, kernel):
        raise ValueError("'pi' and 'kernel' have an exact rule over x: use gap_curve (no Monte Carlo to split)")
    rng = check_rng(rng)
    theta, base_w = _theta_for(pi, kernel, tau, n_panels)

    def const_terms(x):
        c1x, c2x, ell, lz, v2, mu1 = _anchor_terms(pi, kernel, tau, x)
        return np.concatenate([_cv_terms(c1x, c2x, ell, kf),
                               np.stack([c1x, c2x, lz, 1.0 + v2, mu1], axis=1)], axis=1)

    curve = _component_moments(pi, lambda x: _curve_terms(pi, kernel, tau, x, kf, theta, base_w),
                               _allocation(pi, n_mc, part, n_parts), rng)
    const = _component_moments(pi, const_terms, _allocation(pi, n_cv, part, n_parts), rng)
    return {**{f"curve_{k}": v for k, v in curve.items()}, **{f"const_{k}": v for k, v in const.items()}}


def _pool_pair(a: dict, b: dict, prefix: str) -> dict:
    """Chan et al.'s pairwise update of per-component counts, means and centred cross-products."""
    na, nb = a[f"{prefix}_n"], b[f"{prefix}_n"]
    n = na + nb
    safe = np.where(n > 0, n, 1.0)
    delta = b[f"{prefix}_mean"] - a[f"{prefix}_mean"]
    mean = a[f"{prefix}_mean"] + delta * (nb / safe)[:, None]
    m2 = (a[f"{prefix}_m2"] + b[f"{prefix}_m2"]
          + np.einsum("ci,cj->cij", delta, delta) * (na * nb / safe)[:, None, None])
    return {f"{prefix}_n": n, f"{prefix}_mean": mean, f"{prefix}_m2": m2}


def pool_moments(parts: list[dict]) -> dict[str, NDArray]:
    """The moments of all parts' anchors together (in part order: deterministic)."""
    if not parts:
        raise ValueError("'parts' must hold at least one part's moments")
    out = {k: np.asarray(v, dtype=float) for k, v in parts[0].items()}
    for p in parts[1:]:
        p = {k: np.asarray(v, dtype=float) for k, v in p.items()}
        out = {**_pool_pair(out, p, "curve"), **_pool_pair(out, p, "const")}
    return out


def _stratified_from_moments(w: NDArray, n: NDArray, mean: NDArray, m2: NDArray):
    keep = w > 0
    if np.any(n[keep] < 2):
        raise ValueError("every mixture component needs at least 2 anchors in all the parts together")
    wk, nk = w[keep], n[keep]
    m = np.einsum("c,ci->i", wk, mean[keep])
    cov = np.einsum("c,cij->ij", wk**2 / ((nk - 1.0) * nk), m2[keep])
    return m, np.sqrt(np.diag(cov)), int(nk.sum()), cov


def constants_from_moments(pi: SphereDistribution, kernel: MarkovKernel, tau: float, ks: ArrayLike,
                           moments: dict) -> dict:
    """``{"curve": GapCurve, "c1", "c2", "ce": Estimate, "rho", "mbar": float}`` from pooled
    :func:`anchor_moments` (stratified means, their MCSEs and the curve's covariance across k)."""
    pi = check_pi(pi)
    kernel = check_kernel(kernel)
    tau = check_scalar("tau", tau, low=0.0, low_inclusive=False)
    kf = _as_ks(ks)
    w = pi.as_mixture()[0]
    res_m, res_s, n_used, res_c = _stratified_from_moments(w, moments["curve_n"], moments["curve_mean"],
                                                           moments["curve_m2"])
    c_m, c_s, _, c_c = _stratified_from_moments(w, moments["const_n"], moments["const_mean"], moments["const_m2"])
    n_cv = 4 * kf.size + 1
    if res_m.size != 4 * kf.size or c_m.size != n_cv + 5:
        raise ValueError(f"the moments are not those of {kf.size} values of k")
    curve = _curve_from_means(kf, res_m, res_s, n_used, res_c, c_m[:n_cv], c_s[:n_cv], c_c[:n_cv, :n_cv])
    e_s = exact._e_mean_cosine(pi, kernel) / tau
    i = n_cv
    return {"curve": curve, "c1": exact.Estimate(float(c_m[i]), float(c_s[i])),
            "c2": exact.Estimate(float(c_m[i + 1]), float(c_s[i + 1])),
            "ce": exact.Estimate(float(c_m[i + 2]) - e_s, float(c_s[i + 2])),
            "rho": float(c_m[i + 3]), "mbar": float(c_m[i + 4])}
