"""InfoNCE losses of embedded tuples for every prefix of their own negatives (studies/bounds.py).

Unlike :func:`simkit.estimators.infonce.infonce_losses` (negatives shared by all anchors, phi = identity),
each tuple here has its own K negatives, already embedded: ``l_k = log(1 + sum_{j<=k} e^{r_j})`` with
``r_j = u.(w_j - v) / tau``, by a running log-sum-exp (stable at any tau).
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = ["prefix_losses"]


def prefix_losses(u: ArrayLike, v: ArrayLike, w: ArrayLike, tau: float, ks: ArrayLike) -> NDArray[np.float64]:
    """Losses ``l_k`` of every tuple at every k of ``ks`` (the first k negatives of each tuple).

    Parameters
    ----------
    u, v : array_like, shape (N, d)
        Embedded anchors and positives (unit vectors).
    w : array_like, shape (N, K, d)
        Each tuple's embedded negatives.
    tau : float
        Temperature, > 0.
    ks : array_like of int
        Numbers of negatives, each in 1..K.

    Returns
    -------
    ndarray, shape (N, len(ks))
        ``l_k = -s(x, x+) + log(e^{s(x, x+)} + sum_{j<=k} e^{s(x, x-_j)})`` in nats.
    """
    u, v, w = (np.asarray(a, dtype=float) for a in (u, v, w))
    if w.ndim != 3 or u.ndim != 2 or u.shape != (w.shape[0], w.shape[2]) or v.shape != u.shape:
        raise ValueError(f"'w' must have shape (N, K, d) with u and v of shape (N, d), got {w.shape}, {u.shape}, "
                         f"{v.shape}")
    if not (isinstance(tau, (int, float, np.floating)) and math.isfinite(tau) and tau > 0):
        raise ValueError(f"'tau' must be a finite number > 0, got {tau!r}")
    idx = np.asarray(ks, dtype=np.int64) - 1
    if idx.ndim != 1 or idx.size == 0 or idx.min() < 0 or idx.max() >= w.shape[1]:
        raise ValueError(f"'ks' must hold numbers of negatives in 1..{w.shape[1]}, got {ks!r}")
    r = np.einsum("nd,nkd->nk", u, w - v[:, None, :]) / tau
    return np.logaddexp(0.0, np.logaddexp.accumulate(r, axis=1)[:, idx])
