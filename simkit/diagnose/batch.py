"""The in-batch constant of a finite data set (docs/theory.md §16) for :func:`simkit.diagnose`.

A batch holds B items drawn from the rows that have a positive, each with a positive drawn from its
positive law M(y, ·) (labels or listed positives). For anchor a the negatives are the other B − 1 items'
pairs (y, y') ("ntxent", k = 2B − 2) or their second views y' ("clip", k = B − 1); y is uniform over the
population rows (without a itself unless the convention is "include_anchor"). Per anchor, with
e = exp(s(a, ·)): Z_π, Z2_π over y; Z_πM, Z2_πM over y'; the pair moment J = E[e_y e_y'] and
C = J − Z_π Z_πM; then ζ, c1 and the limit of §16.2:
``c1_NT = m1/ζ − (Z2_π − Z_π² + Z2_πM − Z_πM² + 2C)/(4ζ²)``, ζ = (Z_π + Z_πM)/2;
``c1_CLIP = m1/ζ − (Z2_πM/ζ² − 1)/2``, ζ = Z_πM; limit ``−E[s(a, a⁺)] + log ζ``.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray
from scipy import sparse

__all__ = ["BATCH_SCHEMES", "batch_anchor_constants"]

BATCH_SCHEMES = ("ntxent", "clip")


def _kernel_means(law, e: NDArray) -> tuple[NDArray, NDArray]:
    """Per row y of the block: E_{y'~M(y)} e_{y'} and E e_{y'}² (each (A, N)), for label and index kernels."""
    if law.lab is not None:
        cnt = law.counts[law.lab].astype(float)
        onehot = sparse.csr_matrix((np.ones(law.n), (np.arange(law.n), law.lab)), shape=(law.n, law.counts.size))
        f, g = (onehot.T @ e.T).T[:, law.lab], (onehot.T @ (e * e).T).T[:, law.lab]
        if law.self_excluded:
            with np.errstate(invalid="ignore", divide="ignore"):
                return (f - e) / (cnt - 1.0), (g - e * e) / (cnt - 1.0)
        return f / cnt, g / cnt
    pos = law.pos
    keep = (pos != np.arange(law.n)[:, None]) if law.self_excluded else np.ones(pos.shape, bool)
    m = keep.sum(axis=1).astype(float)
    ep = e[:, pos] * keep[None]
    with np.errstate(invalid="ignore", divide="ignore"):
        return ep.sum(axis=2) / m, (ep * ep).sum(axis=2) / m


def batch_anchor_constants(phi: NDArray, tau: float, law, rows: NDArray, scheme: str,
                           block: int = 64) -> tuple[NDArray, NDArray]:
    """Per anchor of ``rows``: the scheme's c1 and limit (nats), exactly for the finite set."""
    pop = np.zeros(law.n, bool)
    pop[law.population] = True
    c1, limit = np.empty(rows.size), np.empty(rows.size)
    for b0 in range(0, rows.size, block):
        idx = rows[b0:b0 + block]
        s = phi[idx] @ phi.T / tau
        shift = s.max(axis=1, keepdims=True)
        e = np.exp(s - shift)
        f, g = _kernel_means(law, e)
        w = np.broadcast_to(pop, e.shape).astype(float)
        if law.convention != "include_anchor":
            w[np.arange(idx.size), idx] = 0.0
        w /= w.sum(axis=1, keepdims=True)
        f, g = np.where(w > 0, f, 0.0), np.where(w > 0, g, 0.0)
        z, z2 = (w * e).sum(1), (w * e * e).sum(1)
        zm, z2m = (w * f).sum(1), (w * g).sum(1)
        j = (w * e * f).sum(1)
        m1 = np.empty(idx.size)
        ms = np.empty(idx.size)
        for r, a in enumerate(idx):
            p = law.positive_rows(a)
            m1[r], ms[r] = e[r, p].mean(), s[r, p].mean()
        if scheme == "ntxent":
            zeta = 0.5 * (z + zm)
            c1[b0:b0 + idx.size] = m1 / zeta - (z2 - z * z + z2m - zm * zm + 2.0 * (j - z * zm)) / (4.0 * zeta ** 2)
        else:
            zeta = zm
            c1[b0:b0 + idx.size] = m1 / zeta - 0.5 * (z2m / zeta ** 2 - 1.0)
        limit[b0:b0 + idx.size] = np.log(zeta) + shift[:, 0] - ms
    return c1, limit
