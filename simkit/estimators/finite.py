"""Monte Carlo estimators on a finite population (pi_N uniform over N atoms, M_N a row-stochastic
matrix; :mod:`simkit.exact.finite`): per-block means of the C1 and C2 estimators with exactly centred
control variates (:func:`block_terms`), retrieval quality at a database of atoms (:func:`retrieval_terms`),
positives drawn from the rows of M_N (:func:`sample_rows`); and the pieces of the gap estimator on
a finite set of embedded points (:func:`scores_and_log_z`, :func:`ratio_block`, :func:`gap_terms`).
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray
from scipy.special import logsumexp

__all__ = ["sample_rows", "block_terms", "retrieval_terms", "scores_and_log_z", "ratio_block", "gap_terms"]


def sample_rows(log_w_rows: np.ndarray, rng) -> np.ndarray:
    """One index per row from the categorical laws exp(log_w_rows) (inverse CDF)."""
    cdf = np.cumsum(np.exp(log_w_rows), axis=1)
    u = rng.random(log_w_rows.shape[0]) * cdf[:, -1]
    return np.minimum(np.sum(cdf < u[:, None], axis=1), log_w_rows.shape[1] - 1)


def block_terms(f: np.ndarray, log_w_rows: np.ndarray, anchors: np.ndarray, pos: np.ndarray, neg: np.ndarray,
                log_z: np.ndarray, log_z2: np.ndarray, log_m1: np.ndarray, tau: float, grid: np.ndarray) -> dict:
    """Per-block means of the C1 and C2 estimators at one embedding (scores f_i . f_j / tau).

    ``log_w_rows``: log M_N rows of the anchors; ``pos``: positive atom per anchor; ``neg``: the
    block's k_max shared negative atoms; ``log_z`` etc.: exact per-atom constants (indexed by atom).
    Returns block means over anchors of gap_cv, gap_plain, loss, dgap, dgap_cv (over the grid),
    d2 (the C2 difference l_k - CE(M_hat_k, Q_hat_k)) and ell_inf.
    """
    fa = f[anchors]
    s0 = np.sum(fa * f[pos], axis=1) / tau
    sn = fa @ f[neg].T / tau  # (B, K)
    lz, lz2, lm1 = log_z[anchors], log_z2[anchors], log_m1[anchors]
    kf = grid.astype(float)
    idx = grid - 1
    e_n = np.exp(sn - lz[:, None])
    cum = np.cumsum(e_n, axis=1)  # S_k / Z
    sk = cum[:, idx]
    e0 = np.exp(s0 - lz)
    a = sk / kf - 1.0
    u = sk / kf + e0[:, None] / kf
    near = np.abs(u - 1.0) < 0.5
    d_k = np.log(np.where(near, 1.0, u))
    d_k[near] = np.log1p((a + e0[:, None] / kf)[near])  # log1p where A_k carries the digits
    v = np.expm1(lz2 - 2.0 * lz)
    c = a * a - v[:, None] / kf
    b = (e0 - np.exp(lm1 - lz))[:, None] / kf
    g = d_k - a - b + 0.5 * c  # Taylor coefficients (1, 1, -1/2) of simkit.estimators.infonce
    loss = np.log(e0[:, None] + sk) + (lz - s0)[:, None]
    n_g = grid.size
    dd = np.full((anchors.size, n_g), np.nan)
    e = np.full((anchors.size, n_g), np.nan)
    dd[:, :-1] = d_k[:, :-1] - d_k[:, 1:]
    k_all = kf[-1]
    for i in range(n_g - 2):  # Z_rest from negatives 2k+1..K: independent of the first 2k given x
        z_rest = (sk[:, -1] - sk[:, i + 1]) / (k_all - kf[i + 1])
        e[:, i] = (sk[:, i] / kf[i] - sk[:, i + 1] / kf[i + 1]) / z_rest
    # C2: CE(M_hat_k, Q_hat_k) = -sum_j M_j s_j / sum_j M_j + log sum_j e^{s_j} (prefix sums over the database)
    lwn = np.take_along_axis(log_w_rows, np.broadcast_to(neg, sn.shape), axis=1)
    mw = np.exp(lwn - lwn.max(axis=1, keepdims=True))
    cm = np.cumsum(mw, axis=1)[:, idx]
    cms = np.cumsum(mw * sn, axis=1)[:, idx]
    ce_k = -cms / cm + np.log(sk) + lz[:, None]
    # control variates with exactly zero mean given x: (i) E_{M_N(x)}[s] - s0 (s_bar = sum_j w_xj s_xj exact);
    # (ii) the linearised ratio term (1/k) sum_{j<=k} m(x, y_j) (s_j - s_bar), m = N w the density of M_N
    # w.r.t. pi_N (E_pi m (s - s_bar) = E_M s - s_bar = 0); (iii) B_k = (e^{s0} - m1)/(k Z)
    s_bar = np.sum(np.exp(log_w_rows) * (fa @ f.T), axis=1) / tau
    dens = np.exp(lwn + math.log(log_w_rows.shape[1]))
    f_k = np.cumsum(dens * (sn - s_bar[:, None]), axis=1)[:, idx] / kf
    d2 = loss - ce_k - (s_bar - s0)[:, None] - f_k - b
    with np.errstate(invalid="ignore"):
        dgap = np.mean(dd, axis=0)
        dgap_cv = np.mean(dd - e, axis=0)
    out = {"gap_cv": g.mean(axis=0), "gap_plain": d_k.mean(axis=0), "loss": loss.mean(axis=0), "dgap": dgap,
           "dgap_cv": dgap_cv, "d2": d2.mean(axis=0), "ell_inf": np.array(float(np.mean(lz - s0)))}
    for name, val in out.items():
        finite = np.isfinite(val)
        if name in ("dgap", "dgap_cv"):
            finite = finite[: n_g - 2]
        if not np.all(finite):
            raise FloatingPointError(f"block estimator {name!r} is not finite")
    return out


def retrieval_terms(f: np.ndarray, log_w_rows: np.ndarray, anchors: np.ndarray, db: np.ndarray, tau: float) -> dict:
    """Block means of CE(M_hat, Q_hat), top-1 agreement and recall@10 at a database ``db`` of atoms."""
    sc = f[anchors] @ f[db].T / tau
    lw = np.take_along_axis(log_w_rows, np.broadcast_to(db, sc.shape), axis=1)
    lq = sc - logsumexp(sc, axis=1, keepdims=True)
    m = np.exp(lw - logsumexp(lw, axis=1, keepdims=True))
    ce = -np.sum(m * lq, axis=1)
    ideal = np.argmax(lw, axis=1)
    top1 = np.argmax(sc, axis=1) == ideal
    s_ideal = np.take_along_axis(sc, ideal[:, None], axis=1)[:, 0]
    rank = np.sum(sc > s_ideal[:, None], axis=1)  # points scoring above the ideal one
    return {"ce": float(np.mean(ce)), "top1": float(np.mean(top1)), "recall10": float(np.mean(rank < 10))}


def scores_and_log_z(emb: NDArray, tau: float) -> tuple[NDArray, NDArray]:
    """Scores s = e.e'/tau (N, N) and log Z(x) = log mean_y e^{s(x, y)} (log-sum-exp, exact)."""
    s = emb @ emb.T / tau
    smax = s.max(axis=1)
    log_z = np.log(np.mean(np.exp(s - smax[:, None]), axis=1)) + smax
    return s, log_z


def ratio_block(s: NDArray, log_z: NDArray, neg: NDArray, grid: NDArray) -> NDArray:
    """T_k = S_k / Z(x) = sum_{i <= k} e^{s(x, y_i)} / Z(x) at every grid k, shape (N, r, G), for
    negatives ``neg`` (N, r, K) (row indices; nested over the grid)."""
    n, r, kk = neg.shape
    e = np.exp(np.take_along_axis(s, neg.reshape(n, r * kk), axis=1).reshape(n, r, kk) - log_z[:, None, None])
    return np.cumsum(e, axis=2)[:, :, grid - 1]


def gap_terms(w_pos: NDArray, t_k: NDArray, grid: NDArray) -> tuple[NDArray, NDArray]:
    """Per tuple: log((e^{s+} + S_k)/(k Z)) and the same minus the control variate S_k/(kZ) - 1.

    ``w_pos`` = e^{s+}/Z (N, r), ``t_k`` = S_k/Z (N, r, G)."""
    kf = grid.astype(float)
    plain = np.log(w_pos[:, :, None] + t_k) - np.log(kf)
    return plain, plain - (t_k / kf - 1.0)
