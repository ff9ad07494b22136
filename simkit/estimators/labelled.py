"""Block estimators of gap_k and D_k on a finite labelled population with the same-class kernel.

pi is uniform over N embedded points with labels; the positive of x is uniform over the points of
x's class (x included), so Z(x), m1/Z and CE are finite sums. Negatives are row indices drawn
uniformly (the anchor included), nested over a grid of k (common random numbers across k).

* :func:`class_positive_scores`: r positives per anchor from its class;
* :func:`gap_block`: the gap with and without its exactly centred control variate, and l_inf;
* :func:`class_d_block`: D_k = R_k - E CE(M_k, Q_k) with the positive Rao-Blackwellised over the class,
  with and without the self-normalised term (docs/theory.md, claim C2);
* :func:`class_first_order`: E_x[m1/Z] (d1 of D_k) and E_x E_y[(e^s / Z)^2];
* :func:`exact_d_two_phase`: the exact D_k curve on a random subset of anchors, as a difference estimator;
* :func:`class_cross_entropy`: CE(M, Q) of the same-class kernel, exact;
* :func:`positive_scores`, :func:`population_risk`: positives from the class or from sampled views, and the
  risk R_k of an embedding on the population; :func:`diagnosed_constants`: CE, c1, c2, the exact gap
  and retrieval by :func:`simkit.diagnose.diagnose`.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

from simkit.estimators.finite import gap_terms, ratio_block, scores_and_log_z
from simkit.exact.finite import exact_d_curve

__all__ = ["class_positive_scores", "gap_block", "class_d_block", "class_first_order", "exact_d_two_phase",
           "class_cross_entropy", "positive_scores", "population_risk", "diagnosed_constants"]


def class_positive_scores(s: NDArray, idx: NDArray, mask: NDArray, r: int, rng) -> NDArray[np.float64]:
    """Scores s(x, x+) of r positives per anchor, each uniform over x's class (``idx``, ``mask`` from
    :func:`simkit.exact.finite.class_members`); shape (N, r); one ``rng.random((N, r))`` draw."""
    n = s.shape[0]
    cnt = mask.sum(axis=1)
    pick = idx[np.arange(n)[:, None], (rng.random((n, r)) * cnt[:, None]).astype(np.int64)]
    return np.take_along_axis(s, pick, axis=1)


def gap_block(s: NDArray, log_z: NDArray, s_pos: NDArray, neg: NDArray, grid: NDArray) -> dict[str, NDArray]:
    """Block means over anchors and tuples: ``gap`` (with the control variate S_k/(kZ) - 1, exactly centred),
    ``gap_plain`` (without) at every grid k, and ``ell_inf`` = mean of log Z(x) - s(x, x+).

    ``s`` (N, N) scores, ``log_z`` (N,), ``s_pos`` (N, r) positive scores, ``neg`` (N, r, K) negative rows."""
    t_k = ratio_block(s, log_z, neg, grid)
    plain, cv = gap_terms(np.exp(s_pos - log_z[:, None]), t_k, grid)
    return {"gap": cv.mean(axis=(0, 1)), "gap_plain": plain.mean(axis=(0, 1)),
            "ell_inf": np.array(np.mean(log_z[:, None] - s_pos))}


def class_d_block(s: NDArray, log_z: NDArray, labels: NDArray, idx: NDArray, mask: NDArray, neg: NDArray,
                  grid: NDArray) -> dict[str, NDArray]:
    """Block means of D_k for the same-class kernel, the database of a query being its tuple's negatives.

    ``d``: mean over queries of E_{x+}[log(1 + e^{s+}/S_k)] with the positive averaged over the class
    (Rao-Blackwell; log1p(W0 / T_k), W0 = e^{s+}/Z, T_k = S_k/Z); ``d_plain``: that plus the
    self-normalised estimate V_k/W_k of E_M s(x, x+) minus its exact value (zero mean term, the exact
    per-database CE); ``no_match``: share of databases without an item of the query's class (V_k/W_k := E_M s).
    """
    n = s.shape[0]
    cnt = mask.sum(axis=1)
    t_k = ratio_block(s, log_z, neg, grid)
    s_mem = np.take_along_axis(s, idx, axis=1)
    w_mem = np.where(mask, np.exp(s_mem - log_z[:, None]), 0.0)  # (n, C)
    pos_term = np.zeros_like(t_k)
    for c in range(idx.shape[1]):  # loop over class members keeps memory at O(n r G)
        pos_term += np.where(mask[:, c, None, None], np.log1p(w_mem[:, c, None, None] / t_k), 0.0)
    pos_term /= cnt[:, None, None]
    mean_s = np.where(mask, s_mem, 0.0).sum(axis=1) / cnt  # E_M s(x, x+), exact
    same = labels[neg] == labels[:, None, None]
    s_neg = np.take_along_axis(s, neg.reshape(n, -1), axis=1).reshape(neg.shape)
    v_k = np.cumsum(np.where(same, s_neg, 0.0), axis=2)[:, :, grid - 1]
    w_k = np.cumsum(same, axis=2)[:, :, grid - 1]
    with np.errstate(invalid="ignore", divide="ignore"):
        snis = np.where(w_k > 0, v_k / np.maximum(w_k, 1), mean_s[:, None, None])
    return {"d": pos_term.mean(axis=(0, 1)), "d_plain": (pos_term + snis - mean_s[:, None, None]).mean(axis=(0, 1)),
            "no_match": (w_k == 0).mean(axis=(0, 1)).astype(float)}


def class_first_order(s: NDArray, log_z: NDArray, idx: NDArray, mask: NDArray) -> tuple[NDArray, float]:
    """Per anchor m1(x)/Z(x) = mean over x's class of e^{s(x, y)} / Z(x) (shape (N,)), and E_x E_y[(e^s/Z)^2]
    over all pairs (the ratio whose mean is E[Z2/Z^2] for a uniform pi)."""
    w = np.where(mask, np.exp(np.take_along_axis(s, idx, axis=1) - log_z[:, None]), 0.0)
    return w.sum(axis=1) / mask.sum(axis=1), float(np.mean(np.mean(np.exp(2 * (s - log_z[:, None])), axis=1)))


def exact_d_two_phase(s: NDArray, m1_over_z: NDArray, idx: NDArray, mask: NDArray, grid: NDArray, n_anchors: int,
                      rng) -> tuple[NDArray, NDArray]:
    """The exact D_k curve averaged over anchors, from ``n_anchors`` of them drawn without replacement.

    Difference estimator with the first-order prediction (m1/Z)/k, known at every anchor (unbiased under
    simple random sampling): mean prediction + mean of (exact D_k(x) - prediction) over the sample, with
    its finite-population-corrected standard error (NaN for fewer than 2 anchors).
    """
    n = s.shape[0]
    n_d = min(n_anchors, n)
    anchors = np.sort(rng.choice(n, size=n_d, replace=False))
    pred = m1_over_z[:, None] / grid[None, :]
    resid = exact_d_curve(s, idx, mask, anchors, grid) - pred[anchors]
    mcse = (np.sqrt(max(1.0 - n_d / n, 0.0) * resid.var(axis=0, ddof=1) / n_d) if n_d >= 2
            else np.full(grid.size, np.nan))
    return pred.mean(axis=0) + resid.mean(axis=0), mcse


def class_cross_entropy(s: NDArray, log_z: NDArray, idx: NDArray, mask: NDArray) -> float:
    """CE(M, Q) = E_x[log Z(x) - mean over x's class of s(x, y)] of the same-class kernel (exact)."""
    s_mem = np.where(mask, np.take_along_axis(s, idx, axis=1), 0.0)
    return float(np.mean(log_z - s_mem.sum(axis=1) / mask.sum(axis=1)))


def positive_scores(s: NDArray, emb: NDArray, idx: NDArray, mask: NDArray, r: int, tau: float, rng,
                    views=None) -> NDArray[np.float64]:
    """Scores of r positives per anchor, shape (N, r): from the anchor's class (:func:`class_positive_scores`)
    when ``views`` is None, else ``emb . views(r) / tau`` with ``views(r)`` the (N, r, d) embeddings of r
    sampled views of each anchor (a kernel without a density, e.g. augmentation)."""
    if views is None:
        return class_positive_scores(s, idx, mask, r, rng)
    return np.einsum("nd,nrd->nr", emb, views(r)) / tau


def population_risk(emb: NDArray, idx: NDArray, mask: NDArray, k: int, r: int, tau: float, rng,
              views=None) -> tuple[float, float]:
    """``(R_k, CE)`` of embeddings ``emb`` of a labelled population: R_k = log k + CE + the mean of the
    control-variate gap estimator over r tuples per anchor with k uniform negatives; CE exact for the
    same-class kernel (``views`` None), else the Monte Carlo mean of log Z - s(x, x+) over the views'
    positives (:func:`positive_scores`)."""
    s, log_z = scores_and_log_z(emb, tau)
    s_pos = positive_scores(s, emb, idx, mask, r, tau, rng, views)
    ce = class_cross_entropy(s, log_z, idx, mask) if views is None else float(np.mean(log_z[:, None] - s_pos))
    n = emb.shape[0]
    kk = np.array([k])
    _, cv = gap_terms(np.exp(s_pos - log_z[:, None]), ratio_block(s, log_z, rng.integers(0, n, size=(n, r, k)), kk), kk)
    return math.log(k) + ce + float(cv.mean()), ce


def diagnosed_constants(emb: NDArray, labels: NDArray, tau: float, grid: NDArray, n_exact_anchors: int, rng,
                        views=None) -> dict[str, NDArray]:
    """The constants :func:`simkit.diagnose.diagnose` computes for a labelled population (negatives i.i.d.
    over all rows, the anchor included): ``ce``, ``c1``, ``c2``, ``gap_exact`` (each with ``_mcse``) and
    ``scale`` (the expansion scale) of the same-class kernel, or, with ``views`` (a call returning the
    (N, r, d) embeddings of sampled views, made after the first diagnosis), of that kernel; ``top1``,
    ``recall10`` (and ``_mcse``) of retrieval against the same class in both cases."""
    from simkit.diagnose import diagnose
    common = dict(tau=tau, k_grid=grid, n_exact_anchors=n_exact_anchors, n_tuples=1, n_blocks=3,
                  convention="include_anchor", rng=rng)
    lab = diagnose(emb, labels=labels, **(common if views is None else {**common, "n_exact_anchors": 1,
                                                                          "k_grid": grid[:4]}))
    dg = lab if views is None else diagnose(emb, positive_embeddings=views(), **common)
    out = {name: np.asarray(dg[name].values, dtype=float) for name in ("ce", "ce_mcse", "c1", "c1_mcse", "c2",
                                                                       "c2_mcse", "gap_exact", "gap_exact_mcse")}
    out["scale"] = np.asarray(dg["expansion_scale"].values, dtype=float)
    for name in ("top1", "top1_mcse", "recall10", "recall10_mcse"):
        out[name] = np.asarray(lab[name].values, dtype=float)
    return out
