"""The exact finite-k InfoNCE gap curve, from a Laplace-transform (Frullani) identity.

For a positive score ``S0`` and i.i.d. negative scores ``S_1, ..., S_k`` (given the anchor),

    E log(e^{S0} + sum_{i<=k} e^{S_i}) = log mu_k + E log(Y_k / mu_k),
    Y_k = e^{S0} + sum_{i<=k} e^{S_i},   mu_k = E Y_k = m0 + k m,

and, since ``log y = int_0^inf (e^{-t} - e^{-y t}) dt / t``,

    E log(Y_k / mu_k) = int_0^inf ( e^{-mu_k t} - L0(t) L(t)^k ) dt / t,

with ``L0(t) = E e^{-t e^{S0}}`` and ``L(t) = E e^{-t e^{S}}`` (independence of the negatives).
Public functions:

* :func:`expected_log_sum` -- that expectation per anchor, for scores with finitely many values
  (the building block; also used by :mod:`simkit.diagnose` for finite data sets);
* :func:`expected_log_sum_parts` -- the same split as ``(log mu_k, E log(Y_k/mu_k))``: the second
  part is the small quantity a gap is made of, computed to full relative accuracy.

Numerics (see :func:`expected_log_sum_parts`, Notes): scores are shifted by the per-anchor
maximum, the integral is taken in ``w = log t`` with the trapezoidal rule on a fixed step, and the
exponent ``log(L0 L^k) + mu_k t`` is evaluated from centred cumulant functions
``c(t) = log E exp(-t (X - E X))`` summed from non-negative terms only, so no cancellation occurs.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.special import logsumexp

__all__ = [
    "expected_log_sum",
    "expected_log_sum_parts",
    "TRAPEZOID_STEP",
]

#: step of the trapezoidal rule in w = log t. The integrand is an entire function of w, bounded in
#: the strip |Im w| < pi/2, so the rule's error is O(exp(-2 pi d / h)) for any d < pi/2: with
#: h = 1/8 and d = pi/3 that is ~1e-23 times the integrand's size in the strip (measured: halving h
#: changes results by < 1e-16 absolute; tests/test_exact_curve.py).
TRAPEZOID_STEP = 0.125
# left truncation: the integrand is ~ (u^2 Var(Y/mu)/2) e^{-u} as u = mu t -> 0, so stopping at
# u = e^{-20} drops a relative e^{-40}/2 ~ 2e-18 of E log(Y/mu)
_U_LO = math.exp(-20.0)
# right truncation: beyond t Y_min >= 45 both exp(-mu t) and L0 L^k are below e^{-45}
_TY_HI = 45.0
# largest |z| of the Taylor branch of g(z) = e^z - 1 - z, and its number of terms (0.5^24/26! ~ 0)
_G_SERIES = 0.5
_G_TERMS = 24
# regime switch of the cumulant function: centred form while t E[X] <= this (no overflow of e^z)
_T_MEAN_MAX = 600.0
# largest score range (max - min per anchor) accepted: e^{-range} must stay a normal double
_RANGE_MAX = 700.0
_CHUNK_ELEMENTS = 1 << 22  # (anchors x nodes x atoms) per vectorised chunk


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
    out[~small] = np.expm1(zl) - zl  # |z| >= 1/2: the subtraction loses at most ~3.5 bits
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
    for i in range(b):
        tm = t * m[i]
        cen = tm <= _T_MEAN_MAX
        tc = t[cen]
        if tc.size:
            z = -np.outer(tc, dev[i])  # (T', N), z <= t m <= 600
            c[i, cen] = np.log1p(_g(z) @ w[i])
            log_l[i, cen] = c[i, cen] - tm[cen]
        td = t[~cen]
        if td.size:
            log_l[i, ~cen] = logsumexp(log_w[i][None, :] - np.outer(td, x[i]), axis=1)
            c[i, ~cen] = log_l[i, ~cen] + tm[~cen]
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
