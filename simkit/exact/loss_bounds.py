"""Bounds on the change of the InfoNCE loss when the embedding moves (claim C4, docs/theory.md section 12).

For a tuple (x, x+, x-_1..K) embedded by phi and by psi, :func:`loss_difference_bounds` evaluates, for
every k, ``|l_k(psi) - l_k(phi)|`` and three proved bounds on it: the score-level averaging bound (1),
the averaging bound AVG (a softmax-weighted average of ``|phi(x-_j) - psi(x-_j)|`` over the negatives,
which does not grow with k) and the max bound MAX (the largest displacement among the first k negatives,
which does). :func:`violations` flags tuples where a bound fails beyond rounding; :func:`bound_tallies`
sums a batch of tuples per k (means, violation counts, tightness).
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = ["loss_difference_bounds", "violations", "bound_tallies", "TOL_ABS", "TOL_REL", "BOUNDS"]

#: a bound counts as violated when |dl| > B + TOL_ABS + TOL_REL |l_k| (rounding of the loss difference
#: is ~1e-15 |l_k|; the allowance is ~1000 times that)
TOL_ABS, TOL_REL = 1e-12, 1e-12


def _running_lse(a: NDArray) -> NDArray:
    """log sum_{j<=k} e^{a_j} for every prefix along the last axis (stable for any magnitudes)."""
    return np.logaddexp.accumulate(a, axis=-1)


def loss_difference_bounds(u: ArrayLike, v: ArrayLike, w: ArrayLike, u2: ArrayLike, v2: ArrayLike, w2: ArrayLike,
                           tau: float, ks: ArrayLike | None = None) -> dict[str, NDArray[np.float64]]:
    """|l_k(psi) - l_k(phi)| and its averaging and max bounds for every tuple and every k (docs/theory.md section 12).

    Parameters
    ----------
    u, v : array_like, shape (N, d)
        phi of the anchors and of the positives (unit vectors, last axis).
    w : array_like, shape (N, K, d)
        phi of each tuple's K negatives.
    u2, v2, w2 : array_like
        The same under psi.
    tau : float
        Temperature, > 0.
    ks : array_like of int, optional
        Numbers of negatives k (1 <= k <= K); the first k negatives of each tuple are used.
        Default: every k = 1..K.

    Returns
    -------
    dict of ndarray, each (N, G) unless stated
        ``loss`` (l_k under phi), ``delta`` (signed l_k(psi) - l_k(phi)), ``bound_score`` (1),
        ``bound_avg`` (AVG), ``bound_max`` (MAX), ``neg_avg`` (the softmax average of |dw| over
        the negatives, larger of the two endpoints), ``neg_max`` (max_{j<=k} |dw_j|), and
        ``anchor_term`` (N,), ``2 |du| + |dv|``.

    Notes
    -----
    Everything is computed with running log-sum-exp over the negatives, so any tau is safe.
    The proofs are in docs/theory.md section 12; tests/exact/test_loss_bounds.py checks them against direct
    evaluations and on adversarial pairs.
    """
    u, v, u2, v2 = (np.asarray(a, dtype=float) for a in (u, v, u2, v2))
    w, w2 = np.asarray(w, dtype=float), np.asarray(w2, dtype=float)
    if w.ndim != 3 or u.shape != (w.shape[0], w.shape[2]):
        raise ValueError(f"'w' must have shape (N, K, d) with u of shape (N, d), got {w.shape} and {u.shape}")
    for name, a, b in (("v", v, u), ("u2", u2, u), ("v2", v2, u), ("w2", w2, w)):
        if a.shape != b.shape:
            raise ValueError(f"'{name}' must have shape {b.shape}, got {a.shape}")
    if not (isinstance(tau, (int, float, np.floating)) and math.isfinite(tau) and tau > 0):
        raise ValueError(f"'tau' must be a finite number > 0, got {tau!r}")
    K = w.shape[1]
    idx = np.arange(K) if ks is None else np.asarray(ks, dtype=np.int64) - 1
    if idx.ndim != 1 or idx.size == 0 or idx.min() < 0 or idx.max() >= K:
        raise ValueError(f"'ks' must hold numbers of negatives in 1..{K}, got {ks!r}")

    r = np.einsum("nd,nkd->nk", u, w - v[:, None, :]) / tau  # s_j - s_0
    r2 = np.einsum("nd,nkd->nk", u2, w2 - v2[:, None, :]) / tau
    dw = np.sqrt(np.sum((w2 - w) ** 2, axis=-1))  # (N, K)
    anchor = 2.0 * np.sqrt(np.sum((u2 - u) ** 2, axis=-1)) + np.sqrt(np.sum((v2 - v) ** 2, axis=-1))
    with np.errstate(divide="ignore"):  # log 0 = -inf is exact here: a zero term of a sum
        log_dw, log_dr = np.log(dw), np.log(np.abs(r2 - r))
    lse, lse2 = _running_lse(r)[:, idx], _running_lse(r2)[:, idx]  # log sum_{j<=k} e^{r_j}
    loss, loss2 = np.logaddexp(0.0, lse), np.logaddexp(0.0, lse2)  # l_k = log(1 + sum e^{r_j})
    # softmax averages: over the negatives only (q) for AVG, including the positive (P) for (1)
    neg_avg = np.maximum(np.exp(_running_lse(r + log_dw)[:, idx] - lse),
                         np.exp(_running_lse(r2 + log_dw)[:, idx] - lse2))
    score = np.maximum(np.exp(_running_lse(r + log_dr)[:, idx] - loss),
                       np.exp(_running_lse(r2 + log_dr)[:, idx] - loss2))
    neg_max = np.maximum.accumulate(dw, axis=-1)[:, idx]
    return {"loss": loss, "delta": loss2 - loss, "bound_score": score,
            "bound_avg": (anchor[:, None] + neg_avg) / tau, "bound_max": (anchor[:, None] + neg_max) / tau,
            "neg_avg": neg_avg, "neg_max": neg_max, "anchor_term": anchor}


def violations(delta: NDArray, bound: NDArray, loss: NDArray) -> NDArray[np.bool_]:
    """True where |delta| exceeds ``bound`` by more than the rounding allowance TOL_ABS + TOL_REL |loss|."""
    return np.abs(delta) > bound + TOL_ABS + TOL_REL * np.abs(loss)


#: the three bounds of :func:`loss_difference_bounds`: score-level averaging (1), AVG and MAX
BOUNDS = ("score", "avg", "max")


def bound_tallies(b: dict, w: ArrayLike, w2: ArrayLike) -> dict[str, NDArray[np.float64]]:
    """Per-k tallies over a batch of tuples from :func:`loss_difference_bounds` (``b``; ``w``, ``w2`` the
    negatives' embeddings under phi and psi, shape (N, K, d)).

    Returns sums over the tuples of ``dl`` (= |delta|), ``bound_<t>``, ``neg_avg`` and ``neg_max`` (shape (G,)),
    ``viol_<t>`` the number of tuples violating bound t (:func:`violations`), ``tight_<t>`` the largest
    ``(|dl| - rounding allowance)_+ / B_t`` (at most 1 exactly when the bound holds; 0 where B_t = 0: rounding
    over rounding is no information), and the scalars ``anchor_term`` (its sum) and ``neg_plain`` (the sum over
    tuples of the mean over all K negatives of ``|phi(x-) - psi(x-)|``).
    """
    dl = np.abs(b["delta"])
    out = {name: b[name].sum(axis=0) for name in ("bound_score", "bound_avg", "bound_max", "neg_avg", "neg_max")}
    out["dl"] = dl.sum(axis=0)
    slack = np.maximum(dl - TOL_ABS - TOL_REL * np.abs(b["loss"]), 0.0)
    for tag in BOUNDS:
        bound = b[f"bound_{tag}"]
        out[f"viol_{tag}"] = violations(b["delta"], bound, b["loss"]).sum(axis=0)
        with np.errstate(invalid="ignore", divide="ignore"):
            out[f"tight_{tag}"] = np.where(bound > 0, slack / bound, 0.0).max(axis=0)
    out["anchor_term"] = b["anchor_term"].sum()
    out["neg_plain"] = np.sqrt(np.sum((np.asarray(w2) - np.asarray(w)) ** 2, axis=-1)).mean(axis=1).sum()
    return out
