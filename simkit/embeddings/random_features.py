"""Random Fourier features as a fixed (untrained) embedding onto the sphere.

``phi(u) = normalise(cos(u W^T + b))`` with ``W`` i.i.d. N(0, 1/bandwidth^2) and ``b`` uniform on
[0, 2 pi), both drawn once from a seed: on the unit sphere, the inner products approximate a Gaussian
kernel of that bandwidth (Rahimi and Recht 2007).
"""

from __future__ import annotations

import functools

import numpy as np
from numpy.typing import NDArray

__all__ = ["fourier_map", "fourier_features"]


@functools.lru_cache(maxsize=8)
def fourier_map(n_features: int, p: int, bandwidth: float, seed: int) -> tuple[NDArray, NDArray]:
    """(W, b) of ``n_features`` random Fourier features of R^p, drawn from ``seed`` (W first, then b)."""
    gen = np.random.default_rng(seed)
    w = gen.standard_normal((n_features, p)) / bandwidth
    b = gen.uniform(0.0, 2.0 * np.pi, n_features)
    return w, b


def fourier_features(u: NDArray, w: NDArray, b: NDArray) -> NDArray[np.float64]:
    """``cos(u W^T + b)`` with its rows normalised onto the sphere (points on the last axis)."""
    out = np.cos(u @ w.T + b)
    norm = np.sqrt(np.einsum("...d,...d->...", out, out))
    if np.any(norm == 0):
        raise ValueError("'random features' has a zero row: it has no direction on the sphere")
    return out / norm[..., None]
