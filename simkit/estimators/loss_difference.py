"""Block means of the InfoNCE loss difference |l_k(psi) - l_k(phi)| and its bounds (claim C4).

:func:`loss_difference_means` evaluates, for one anchor sample and several perturbations psi of one
embedding phi, the per-tuple loss difference and the three proved bounds of
:func:`simkit.exact.loss_bounds.loss_difference_bounds` at every k of a grid (the first k of K negatives
per tuple: common random numbers across k), and returns their means over the tuples, the number of
tuples violating each bound and the largest tightness ratio.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray
from threadpoolctl import threadpool_limits

from simkit.exact.loss_bounds import BOUNDS, bound_tallies, loss_difference_bounds

__all__ = ["MEANS", "loss_difference_means"]

#: per-tuple quantities averaged by :func:`loss_difference_means`
MEANS = ("dl", "bound_score", "bound_avg", "bound_max", "neg_avg", "neg_max")


def loss_difference_means(phi: Callable, psis: Sequence[Callable], x: ArrayLike, x_pos: ArrayLike,
                          negatives: Callable[[int], NDArray], k_max: int, tau: float, ks: ArrayLike, *,
                          chunk: int = 8) -> dict[str, NDArray[np.float64]]:
    """Means over N tuples of the loss difference and its bounds, for each psi of ``psis`` and each k of ``ks``.

    Parameters
    ----------
    phi, psis : callable
        The embedding and its perturbations (points on the last axis).
    x, x_pos : array_like, shape (N, p)
        Anchors and positives.
    negatives : callable
        ``negatives(n)`` draws n negatives, shape (n, p); called chunk by chunk in anchor order
        (``chunk`` anchors, ``chunk * k_max`` negatives at a time), so memory stays at chunk x k_max x d.
    k_max, tau, ks : int, float, array_like
        Negatives per tuple K, temperature, and the grid of k (each <= K).

    Returns
    -------
    dict
        Over (len(psis), len(ks)): the means of :data:`MEANS`, ``viol_<t>`` (counts) and ``tight_<t>``
        (largest ratio) for t in score, avg, max (:func:`simkit.exact.loss_bounds.bound_tallies`); over
        (len(psis),): the means of ``anchor_term`` and ``neg_plain``.
    """
    x, x_pos = np.asarray(x), np.asarray(x_pos)
    n = x.shape[0]
    shape = (len(psis), np.size(ks))
    sums = {name: np.zeros(shape) for name in MEANS}
    counts = {f"viol_{t}": np.zeros(shape) for t in BOUNDS}
    tight = {f"tight_{t}": np.zeros(shape) for t in BOUNDS}
    anchor, plain = np.zeros(len(psis)), np.zeros(len(psis))
    with threadpool_limits(limits=1, user_api="blas"):  # skinny products: threads only add overhead
        for lo in range(0, n, chunk):
            hi = min(n, lo + chunk)
            y = negatives((hi - lo) * k_max)
            u, v = phi(x[lo:hi]), phi(x_pos[lo:hi])
            w = phi(y).reshape(hi - lo, k_max, -1)
            for i, psi in enumerate(psis):
                w2 = psi(y).reshape(hi - lo, k_max, -1)
                t = bound_tallies(loss_difference_bounds(u, v, w, psi(x[lo:hi]), psi(x_pos[lo:hi]), w2, tau, ks),
                                  w, w2)
                for name in sums:
                    sums[name][i] += t[name]
                for tag in BOUNDS:
                    counts[f"viol_{tag}"][i] += t[f"viol_{tag}"]
                    tight[f"tight_{tag}"][i] = np.maximum(tight[f"tight_{tag}"][i], t[f"tight_{tag}"])
                anchor[i] += t["anchor_term"]
                plain[i] += t["neg_plain"]
    out = {name: s / n for name, s in sums.items()}
    out.update(counts)
    out.update(tight)
    out["anchor_term"] = anchor / n
    out["neg_plain"] = plain / n
    return out
