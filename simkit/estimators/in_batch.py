"""The in-batch InfoNCE loss and a streaming Monte Carlo estimator of its finite-batch gap.

docs/theory.md §16. An anchor x with positive x⁺ ~ M(x, ·) meets, in a batch of B items, the other
items' views. Given x these are n = B − 1 i.i.d. *pairs* (y, y'), y ~ π, y' ~ M(y, ·), independent of
(x, x⁺). One stream of K pairs, shared by a block's anchors (each anchor's loss stays unbiased, as in
:mod:`simkit.estimators.infonce`), gives for every n of a grid and the three schemes of
:mod:`simkit.exact.in_batch`:

* ``"ntxent"`` -- negatives {y_j, y'_j : j ≤ n}, k = 2n (SimCLR's NT-Xent, one direction);
* ``"clip"`` -- negatives {y'_j : j ≤ n}, k = n (CLIP-style: the other modality's views);
* ``"iid"`` -- negatives {y_j : j ≤ n}, k = n (the paper's i.i.d. draws from π).

With the scheme's per-negative mean ζ(x), ``D_k = ℓ_k − log k − ℓ_∞^ζ = log((e^{s0} + S_k)/(kζ))``, and
the control variates of the i.i.d. estimator carry over with units in place of negatives (§16.1):
``A = S_k/(kζ) − 1``, ``Bp = (e^{s0} − m1)/(kζ)``, ``C = A² − w2/n_units``, each of conditional mean
exactly 0 given x when log ζ, log m1 and w2 are exact; ``G = D − A − Bp + C/2``.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray

from simkit._checks import (check_anchor_pairs, check_int, check_point_set, check_points, check_rng, check_scalar,
                            check_weights)
from simkit._jit.blas import single_threaded_blas
from simkit._jit.in_batch import pair_prefix_sums
from simkit._jit.infonce import tile_negatives
from simkit.estimators.infonce import TAU_MIN, _check_grid
from simkit.exact.in_batch import SCHEMES

__all__ = ["pair_sums", "in_batch_losses", "in_batch_block", "BLOCK_STATS", "negatives_on_grid", "draw_finite_pairs"]

#: the per-block statistics of :func:`in_batch_block` (means over the block's anchors), per scheme
BLOCK_STATS = {
    "gap_cv": "mean of D_k - A_k - Bp_k + C_k/2 (control variates with exact conditional means 0)",
    "gap_plain": "mean of D_k = l_k - log k - l_inf (the exact per-anchor limit subtracted only)",
    "risk": "mean of l_k - log k + s0 - E[s0 | x] (zeta-free; the positive's centred score added)",
    "ell_inf": "mean of l_inf = -s(x, x+) + log zeta(x)",
}


def negatives_on_grid(scheme: str, n_grid: ArrayLike) -> NDArray[np.int64]:
    """Negatives k per anchor at each number of pairs n: 2n (ntxent), n (clip, iid)."""
    if scheme not in SCHEMES:
        raise ValueError(f"'scheme' must be one of {', '.join(SCHEMES)}, got {scheme!r}")
    n = np.asarray(n_grid, dtype=np.int64)
    return 2 * n if scheme == "ntxent" else n


def _check_pairs(x, x_pos, first, second, tau, n_grid):
    x, x_pos = check_anchor_pairs(x, x_pos)
    y = check_point_set("first", first, x.shape[1])
    yp = check_points("second", second, x.shape[1])
    if yp.shape != y.shape:
        raise ValueError(f"'second' must have the shape of 'first' {y.shape}, got {yp.shape}")
    tau = check_scalar("tau", tau, low=TAU_MIN)
    return x, x_pos, y, yp, tau, _check_grid(n_grid, y.shape[0])


def _sums(x, y, yp, tau, shift, grid) -> NDArray:
    out = np.empty((x.shape[0], grid.size, 2))
    with single_threaded_blas():
        pair_prefix_sums(np.ascontiguousarray(x), tile_negatives(y), tile_negatives(yp), y.shape[0], 1.0 / tau,
                         np.ascontiguousarray(shift, dtype=float), grid, out)
    return out


def pair_sums(x: ArrayLike, first: ArrayLike, second: ArrayLike, tau: float, n: ArrayLike,
              shift: ArrayLike | None = None) -> NDArray[np.float64]:
    """``out[i, g, m] = Σ_{j < n[g]} exp(x_i·v_j/τ − shift_i)``, v = ``first`` (m = 0) or ``second`` (m = 1).

    ``x`` (B, d), ``first`` and ``second`` (K, d) unit vectors, τ >= 0.005, ``n`` strictly increasing
    integers <= K; ``shift`` (B,) defaults to 0 (keep every ``x·v/τ − shift`` within ±700).
    """
    x, _, y, yp, tau, grid = _check_pairs(x, x, first, second, tau, n)
    sh = np.zeros(x.shape[0]) if shift is None else np.asarray(shift, dtype=float)
    if sh.shape != (x.shape[0],) or not np.all(np.isfinite(sh)):
        raise ValueError(f"'shift' must be a finite array of shape ({x.shape[0]},)")
    return _sums(x, y, yp, tau, sh, grid)


def in_batch_losses(x: ArrayLike, x_pos: ArrayLike, first: ArrayLike, second: ArrayLike, tau: float,
                    n: ArrayLike) -> dict[str, NDArray[np.float64]]:
    """In-batch InfoNCE losses ``ℓ = −s0 + log(e^{s0} + Σ_negatives e^{s})`` for every anchor and n.

    Parameters
    ----------
    x, x_pos : array_like, shape (B, d)
        Anchors and their positives (unit vectors, φ = identity, s = x·y/τ).
    first, second : array_like, shape (K, d)
        The pairs (y_j, y'_j); loss at n uses pairs j < n.
    tau : float
        Temperature, >= 0.005.
    n : array_like of int
        Strictly increasing numbers of pairs, each <= K (batch size B = n + 1).

    Returns
    -------
    dict
        ``{scheme: ndarray (B, len(n))}`` in nats; k per scheme is :func:`negatives_on_grid`.
    """
    x, x_pos, y, yp, tau, grid = _check_pairs(x, x_pos, first, second, tau, n)
    s0 = np.einsum("ij,ij->i", x, x_pos) / tau
    s = _sums(x, y, yp, tau, s0, grid)  # shifted by the positive's score: its term is exactly 1
    return {"iid": np.log1p(s[:, :, 0]), "ntxent": np.log1p(s[:, :, 0] + s[:, :, 1]), "clip": np.log1p(s[:, :, 1])}


def _anchor_array(name, v, n_anchor) -> NDArray:
    a = np.broadcast_to(np.asarray(v, dtype=float), (n_anchor,))
    if not np.all(np.isfinite(a)):
        raise ValueError(f"'{name}' must be finite, with one value or one per anchor ({n_anchor})")
    return a


def in_batch_block(x: ArrayLike, x_pos: ArrayLike, first: ArrayLike, second: ArrayLike, tau: float, n: ArrayLike,
                   terms: dict[str, dict[str, ArrayLike]], mean_s0: ArrayLike) -> dict[str, dict[str, NDArray]]:
    """Per-block statistics (:data:`BLOCK_STATS`, means over anchors, arrays over the n grid) per scheme.

    ``terms[scheme]`` holds the exact per-anchor ``log_zeta``, ``log_m1`` and ``w2`` (the unit's
    relative variance, §16.1) of each scheme to estimate; ``mean_s0`` is E[s(x, x⁺) | x] per anchor.
    Every statistic is unbiased for its target when these are exact; ``risk`` does not use them.
    """
    x, x_pos, y, yp, tau, grid = _check_pairs(x, x_pos, first, second, tau, n)
    if not terms or not set(terms) <= set(SCHEMES):
        raise ValueError(f"'terms' keys must be among {', '.join(SCHEMES)}, got {sorted(terms)!r}")
    n_a = x.shape[0]
    s0 = np.einsum("ij,ij->i", x, x_pos) / tau
    ms0 = _anchor_array("mean_s0", mean_s0, n_a)
    prepared = {}
    for scheme, t in terms.items():
        prepared[scheme] = {key: _anchor_array(f"terms['{scheme}']['{key}']", t[key], n_a)
                            for key in ("log_zeta", "log_m1", "w2")}
    shift = prepared[next(iter(prepared))]["log_zeta"]
    s = _sums(x, y, yp, tau, shift, grid)
    nf = grid.astype(float)
    out = {}
    for scheme, t in prepared.items():
        size = 2.0 if scheme == "ntxent" else 1.0
        kf = size * nf
        raw = s[:, :, 0] + s[:, :, 1] if scheme == "ntxent" else s[:, :, 1 if scheme == "clip" else 0]
        rel = np.exp(shift - t["log_zeta"])[:, None]  # S_k/ζ = raw · e^{shift − log ζ}
        a = raw * rel / kf - 1.0
        e0 = np.exp(s0 - t["log_zeta"])[:, None] / kf  # e^{s0}/(kζ)
        u = raw * rel / kf + e0  # (e^{s0} + S_k)/(kζ) > 0
        near = np.abs(u - 1.0) < 0.5  # log1p where A carries the digits, log where A would round to -1
        d_k = np.log(np.where(near, 1.0, u))
        d_k[near] = np.log1p((a + e0)[near])
        bp = e0 - np.exp(t["log_m1"] - t["log_zeta"])[:, None] / kf
        c = a * a - t["w2"][:, None] / nf
        g = d_k - a - bp + 0.5 * c
        ell_inf = t["log_zeta"] - s0
        risk = d_k + (ell_inf + s0 - ms0)[:, None]
        out[scheme] = {"gap_cv": g.mean(axis=0), "gap_plain": d_k.mean(axis=0), "risk": risk.mean(axis=0),
                       "ell_inf": np.array(float(ell_inf.mean()))}
    return out


def draw_finite_pairs(pi: ArrayLike, kernel: ArrayLike, n: int, rng) -> tuple[NDArray, NDArray]:
    """``n`` i.i.d. pairs of atom indices (a, b) of a finite π: a ~ π, b ~ M(a, ·).

    ``pi`` (N,) probabilities, ``kernel`` (N, N) row-stochastic. An (anchor, positive) pair has the
    same law as a negative pair (y, y').
    """
    w = check_weights("pi", pi)
    m = np.asarray(kernel, dtype=float)
    if m.shape != (w.size,) * 2 or not np.all(np.isfinite(m)) or np.any(m < 0) \
            or np.any(np.abs(m.sum(axis=1) - 1.0) > 1e-9):
        raise ValueError(f"'kernel' must be row-stochastic of shape {(w.size,) * 2}")
    n = check_int("n", n, low=1)
    rng = check_rng(rng)
    a = rng.choice(w.size, size=n, p=w)
    cdf = np.cumsum(m, axis=1)
    cdf /= cdf[:, -1:]
    # inverse CDF on the rows offset by 2 x row index (each row's values in (2r, 2r + 1])
    shifted = (cdf + 2.0 * np.arange(w.size)[:, None]).ravel()
    b = np.searchsorted(shifted, rng.random(n) + 2.0 * a, side="right") - a * w.size
    return a, np.minimum(b, w.size - 1)
