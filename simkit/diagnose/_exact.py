"""The exact finite-set gap curve of one anchor at every k, from stored cumulant functions.

For an anchor with positive scores ``S0`` (uniform over P values) and i.i.d. negative scores ``S``
(uniform over n values), with ``X = e^{S - M}`` (M the anchor's largest score), ``m = E X``,
``m0 = E X0`` and the centred cumulant functions ``c(t) = log E e^{-t(X - m)}`` (``c0`` likewise),

    gap(k) = E log(Y_k / (k m)) = log1p(m0 / (k m)) + int e^{k log L(t) + log L0(t)} expm1(-(k c(t) + c0(t))) dw,

``t = e^w``, ``Y_k = X0 + sum_{i<=k} X_i`` (the identity of :mod:`simkit.exact.curve`). The four
functions ``c0, log L0, c, log L`` are evaluated once per anchor on the nodes of the trapezoidal
rule in ``w`` (step :data:`simkit.exact.curve.TRAPEZOID_STEP`, on the lattice ``w = h i``), which
covers every ``1 <= k <= k_max``; the curve at any integer k then costs O(nodes).

The jitted routine evaluates ``E g(t(m - X))``, ``g(z) = e^z - 1 - z >= 0``, without cancellation:
by the Taylor series in the central power sums while ``t max|X - m| < 1/4``; as ``E e^{t(m - X)} - 1``
(minus ``t E[m - X]``) once that mean exceeds 1 + 2^-10 (at most 10 bits lost), summed over the
atoms in increasing X and stopped when the rest is below 1e-17 of the sum; term by term otherwise.
Where ``t m > 600``, ``log L(t)`` is taken directly as a log-sum-exp over the smallest atoms.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange
from numpy.typing import NDArray

from simkit.exact.curve import TRAPEZOID_STEP

__all__ = ["AnchorCurves", "anchor_cumulants", "N_POWERS"]

_U_LO = math.exp(-20.0)  # left truncation, as in simkit.exact.curve
_TY_HI = 45.0  # right truncation: t Y_min >= 45
_SERIES = 0.25
# E g = E e^z - 1 directly once E e^z >= 1 + 2^-10: at most 10 of 53 bits lost (relative error of
# c(t) ~1e-13, far below what a gap of size 1/k_max needs); term by term below
_DIRECT = 1.0 + 2.0**-10
N_POWERS = 16
_PARALLEL_WORK = 1 << 22  # atoms x nodes from which one anchor's cumulants use threads  # central power sums p = 0..15 (series to z^15: 0.25^16/16! ~ 2e-23 relative)
_INV_FACT = np.array([1.0 / math.factorial(p) for p in range(N_POWERS)])


@njit(cache=True, inline="always")
def _g(z, inv_fact):
    if abs(z) < _SERIES:
        acc = 0.0
        for p in range(N_POWERS - 1, 1, -1):
            acc = acc * z + inv_fact[p]
        return acc * z * z
    return math.expm1(z) - z


@njit(cache=True, inline="always")
def _node(ti, xs, m, dsum, psum, inv_fact, spread, log_n):
    """``(c(t), log L(t))`` at one node ``t = ti``."""
    n = xs.size
    tm = ti * m
    if ti * spread < _SERIES:
        acc = 0.0
        for p in range(N_POWERS - 1, 1, -1):
            acc = acc * ti + psum[p] * inv_fact[p]
        c = math.log1p(acc * ti * ti / n)
        return c, c - tm
    if tm > 600.0:
        acc = 0.0
        for j in range(n):
            z = ti * (xs[j] - xs[0])
            if z > 60.0:
                break
            acc += math.exp(-z)
        ll = -ti * xs[0] + math.log(acc) - log_n
        return ll + tm, ll
    acc = 0.0
    for j in range(n):
        e = math.exp(ti * (m - xs[j]))
        acc += e
        if (n - j) * e < 1e-17 * acc:
            break
    s = acc / n
    if s >= _DIRECT:
        eg = s - 1.0 - ti * dsum / n
    else:
        acc = 0.0
        for j in range(n):
            acc += _g(ti * (m - xs[j]), inv_fact)
        eg = acc / n
    c = math.log1p(eg)
    return c, c - tm


@njit(cache=True, parallel=True)
def _cumulants_parallel(t, xs, m, dsum, psum, inv_fact, c_out, ll_out):
    spread = max(m - xs[0], xs[xs.size - 1] - m)
    log_n = math.log(xs.size)
    for i in prange(t.size):
        c_out[i], ll_out[i] = _node(t[i], xs, m, dsum, psum, inv_fact, spread, log_n)


@njit(cache=True)
def _cumulants_serial(t, xs, m, dsum, psum, inv_fact, c_out, ll_out):
    spread = max(m - xs[0], xs[xs.size - 1] - m)
    log_n = math.log(xs.size)
    for i in range(t.size):
        c_out[i], ll_out[i] = _node(t[i], xs, m, dsum, psum, inv_fact, spread, log_n)


def _cumulants(t, xs, m, dsum, psum, inv_fact, c_out, ll_out):
    """``c(t)`` and ``log L(t)`` at the nodes ``t`` for atoms ``xs`` sorted ascending, mean ``m``,
    ``dsum = sum(m - x)`` and ``psum[p] = sum (m - x)^p``; threads only where the work pays for a
    parallel region (its start costs milliseconds when another OpenMP user shares the process)."""
    fn = _cumulants_parallel if xs.size * t.size >= _PARALLEL_WORK else _cumulants_serial
    fn(t, xs, m, dsum, psum, inv_fact, c_out, ll_out)


@njit(cache=True)
def _power_sums(xs, m, out):
    for p in range(out.size):
        out[p] = 0.0
    for j in range(xs.size):
        d = m - xs[j]
        v = 1.0
        for p in range(out.size):
            out[p] += v
            v *= d


def _atoms(scores: NDArray, shift: float):
    xs = np.sort(np.exp(scores - shift))
    m = float(np.mean(xs))
    psum = np.empty(N_POWERS)
    _power_sums(xs, m, psum)
    return xs, m, float(psum[1]), psum


def anchor_cumulants(pos_scores: NDArray, neg_scores: NDArray, k_max: int,
                     h: float = TRAPEZOID_STEP) -> tuple[int, NDArray, float, float]:
    """The stored form of one anchor's exact curve for ``1 <= k <= k_max``.

    ``pos_scores`` (P,) and ``neg_scores`` (n,) are the positive and negative score values, each
    uniform (repeat a value to weight it). Returns ``(i_lo, F, m0, m)``: the lattice index of the
    first node, ``F`` (4, T) holding ``c0, log L0, c, log L`` at ``w = h (i_lo + j)``, and the means
    ``m0 = E e^{S0 - M}``, ``m = E e^{S - M}``.
    """
    pos = np.asarray(pos_scores, dtype=float)
    neg = np.asarray(neg_scores, dtype=float)
    shift = float(max(pos.max(), neg.max()))
    x0, m0, d0, p0 = _atoms(pos, shift)
    x1, m1, d1, p1 = _atoms(neg, shift)
    w_lo = math.log(_U_LO) - math.log(m0 + float(k_max) * m1)
    w_hi = math.log(_TY_HI) - math.log(x0[0] + x1[0])
    i_lo = int(math.floor(w_lo / h))
    i_hi = int(math.ceil(w_hi / h))
    t = np.exp(h * np.arange(i_lo, i_hi + 1))
    f = np.empty((4, t.size))
    _cumulants(t, x0, m0, d0, p0, _INV_FACT, f[0], f[1])
    _cumulants(t, x1, m1, d1, p1, _INV_FACT, f[2], f[3])
    return i_lo, f, m0, m1


@njit(cache=True, parallel=True)
def _evaluate(f, ratio, kf, h, out):
    for a in prange(f.shape[0]):
        for q in range(kf.size):
            k = kf[q]
            acc = 0.0
            for j in range(f.shape[2]):
                b = k * f[a, 3, j] + f[a, 1, j]
                if b > -745.0:
                    acc += math.exp(b) * math.expm1(-(k * f[a, 2, j] + f[a, 0, j]))
            out[a, q] = math.log1p(ratio[a] / k) + h * acc


class AnchorCurves:
    """Exact gap curves of a set of anchors, each evaluable at any integer ``1 <= k <= k_max``."""

    def __init__(self, k_max: int, h: float = TRAPEZOID_STEP):
        self.k_max = int(k_max)
        self.h = h
        self._parts: list[NDArray] = []
        self._ratio: list[float] = []  # m0 / m
        self._packed = None

    def __len__(self) -> int:
        return len(self._parts)

    def add(self, pos_scores: NDArray, neg_scores: NDArray) -> None:
        _, f, m0, m1 = anchor_cumulants(pos_scores, neg_scores, self.k_max, self.h)
        self._parts.append(f)
        self._ratio.append(m0 / m1)
        self._packed = None

    def _pack(self):
        if self._packed is None:
            width = max(f.shape[1] for f in self._parts)
            arr = np.zeros((len(self._parts), 4, width))
            arr[:, 1::2, :] = -np.inf  # padding: log L = -inf, no contribution
            for a, f in enumerate(self._parts):
                arr[a, :, :f.shape[1]] = f
            self._packed = (arr, np.array(self._ratio))
        return self._packed

    def values(self, ks) -> NDArray[np.float64]:
        """Per-anchor exact gap, shape (anchors, len(ks)); every k must be an integer in [1, k_max]."""
        kf = np.asarray(ks, dtype=float).reshape(-1)
        if kf.size and (kf.min() < 1 or kf.max() > self.k_max):
            raise ValueError(f"k must be in [1, {self.k_max}], got {kf.min():g}..{kf.max():g}")
        f, ratio = self._pack()
        out = np.empty((f.shape[0], kf.size))
        _evaluate(f, ratio, kf, self.h, out)
        return out
