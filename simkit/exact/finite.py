"""Exact constants of a finite population: pi_N uniform over N atoms, M_N a row-stochastic matrix.

For any embedding of the atoms, Z, Z2, m1, CE, the constants c1 and c2 of the finite-k expansion and
the exact gap curve are finite sums (docs/theory.md sections 2-4), so a trained embedding can be
checked against exact values. :func:`log_weights` builds log M_N from a continuous kernel by importance
weights against the law the atoms were drawn from; :func:`exact_constants` evaluates the constants.
For a label kernel (M(x, .) uniform over the atoms of x's class, :func:`class_members`),
:func:`exact_d_curve` gives the exact D_k of claim C2 per anchor.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray
from scipy.special import logsumexp

from simkit.exact.curve import expected_log_sum_parts
from simkit.exact.search_curve import positive_term

__all__ = ["log_weights", "exact_constants", "class_members", "exact_d_curve"]


def log_weights(pi, kernel, atoms: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
    """log w_ij of M_N for anchors ``atoms[rows]`` (all by default) over every atom j: rows sum to 1.

    w_ij is proportional to f_M(x_i, x_j) / f_pi(x_j) (importance weights of the kernel's density
    against the law the atoms were drawn from), normalised over j.
    """
    x = atoms if rows is None else atoms[rows]
    lw = kernel.logpdf(x[:, None, :], atoms[None, :, :]) - pi.logpdf(atoms)[None, :]
    return lw - logsumexp(lw, axis=1, keepdims=True)


def exact_constants(f: np.ndarray, log_w: np.ndarray, tau: float, ks: np.ndarray | None = None) -> dict:
    """Exact per-atom and population constants of (pi_N uniform over the rows, M_N = exp(log_w)).

    Parameters
    ----------
    f : (N, d) embedded atoms (unit rows); log_w : (N, N) log M_N(x_i, x_j), rows summing to 1;
    tau : temperature; ks : grid of k for the exact gap curve (optional: it costs
    ~N x (nodes x N) per curve).

    Returns
    -------
    dict with per-atom ``log_z``, ``log_z2``, ``log_m1`` and population ``ce``, ``c1``, ``c2``,
    ``rho`` = E[Z2/Z^2], ``mbar`` = E[m1/Z] and (with ks) ``gap_exact`` over ks.

    Notes
    -----
    Z = mean_j e^{s_ij}, Z2, Z3 with 2s, 3s; m1 = sum_j w_ij e^{s_ij}; CE = mean_i(-sum_j w_ij s_ij
    + log Z_i); c1 = E[m1/Z - (Z2/Z^2 - 1)/2]; per anchor c2 = -E[W0^2]/2 + k3/3 + v E[W0] - 3 v^2/4
    with W0 = e^{s0}/Z, v = Z2/Z^2 - 1, k3 = Z3/Z^3 - 3 Z2/Z^2 + 2 (simkit.diagnose); the exact
    gap per anchor is log1p(m1/(kZ)) + E log(Y_k / E Y_k) (simkit.exact.curve.expected_log_sum_parts).
    """
    n = f.shape[0]
    s = f @ f.T / tau
    log_n = math.log(n)
    log_z = logsumexp(s, axis=1) - log_n
    log_z2 = logsumexp(2 * s, axis=1) - log_n
    log_z3 = logsumexp(3 * s, axis=1) - log_n
    log_m1 = logsumexp(log_w + s, axis=1)
    log_e_w0sq = logsumexp(log_w + 2 * s, axis=1) - 2 * log_z
    w = np.exp(log_w)
    ce_i = -np.sum(w * s, axis=1) + log_z
    e_w0 = np.exp(log_m1 - log_z)
    v = np.expm1(log_z2 - 2 * log_z)
    k3 = np.exp(log_z3 - 3 * log_z) - 3 * np.exp(log_z2 - 2 * log_z) + 2
    c1_i = e_w0 - v / 2
    c2_i = -np.exp(log_e_w0sq) / 2 + k3 / 3 + v * e_w0 - 0.75 * v * v
    out = {"log_z": log_z, "log_z2": log_z2, "log_m1": log_m1, "ce": float(np.mean(ce_i)), "c1": float(np.mean(c1_i)),
           "c2": float(np.mean(c2_i)), "rho": float(np.mean(np.exp(log_z2 - 2 * log_z))), "mbar": float(np.mean(e_w0))}
    if ks is not None:
        kf = np.asarray(ks, dtype=float)
        neg_w = np.full(n, 1.0 / n)
        gap = np.zeros(kf.size)
        step = 16
        for lo in range(0, n, step):
            sl = slice(lo, min(n, lo + step))
            _, centred = expected_log_sum_parts(s[sl], w[sl], s[sl], np.broadcast_to(neg_w, s[sl].shape), kf)
            gap += np.sum(np.log1p(np.exp(log_m1[sl] - log_z[sl])[:, None] / kf[None, :]) + centred, axis=0)
        out["gap_exact"] = gap / n
    return out


def class_members(labels: NDArray) -> tuple[NDArray, NDArray]:
    """Per row, the padded indices of the rows with its label (itself included) and their mask."""
    counts = np.bincount(labels)
    width = int(counts.max())
    idx = np.zeros((labels.size, width), dtype=np.int64)
    mask = np.zeros((labels.size, width), dtype=bool)
    for c in np.unique(labels):
        rows = np.flatnonzero(labels == c)
        idx[rows, : rows.size] = rows
        mask[rows, : rows.size] = True
    return idx, mask


def exact_d_curve(s: NDArray, idx: NDArray, mask: NDArray, anchors: NDArray, grid: NDArray) -> NDArray:
    """Exact D_k(x) = E log(e^{S0} + S_k) - E log S_k of the label kernel for the given anchors,
    shape (len(anchors), G), by simkit.exact.search_curve.positive_term.

    S0 ~ M(x) (uniform over x's class), S_k = sum of k i.i.d. e^{s(x, y)}, y ~ pi. With the
    convention V_k/W_k := E_M s the self-normalised term of R_k - E CE(M_k, Q_k) has mean exactly 0,
    so D_k is this difference. E log S_k is the same expectation with a pi-distributed "positive"
    and k - 1 negatives (k >= 2) and E_pi s(x, y) at k = 1; each part is split as log-mean plus
    centred remainder, whose difference is taken part by part (no cancellation of large terms).
    """
    rows = s[anchors]
    pos = np.take_along_axis(rows, idx[anchors], axis=1)
    pos = np.where(mask[anchors], pos, pos[:, :1])  # zero-weight padding
    pw = mask[anchors] / mask[anchors].sum(axis=1, keepdims=True)
    return positive_term(pos, pw, rows, None, grid)
