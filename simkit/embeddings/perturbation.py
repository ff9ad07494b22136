"""Perturbations of an embedding: its parameters moved in a random direction (:func:`perturb`), or the
embedding displaced only on a small spherical cap of the input sphere (:class:`CapBump`, with the cap's
cosine radius for a given mass from :func:`cap_cosine`), or its output layer collapsed to nearly rank one
(:func:`collapse_output`, a far start for training). Used to compare the loss-difference bounds of
:mod:`simkit.exact.loss_bounds` on parametric and on localised changes (claim C4).
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import special

from simkit.embeddings.embedding import LinearEmbedding, TwoLayerEmbedding

__all__ = ["perturb", "collapse_output", "cap_cosine", "CapBump"]


def perturb(phi, eps: float, *, rng):
    """psi = phi with parameters ``theta + eps ||theta|| e``, e uniform on the unit sphere of R^{n_params}
    drawn from ``rng`` (a seed or a numpy Generator; required: no hidden default seed)."""
    if not (isinstance(eps, (int, float, np.floating)) and math.isfinite(eps) and eps >= 0):
        raise ValueError(f"'eps' must be a finite number >= 0, got {eps!r}")
    if rng is None:
        raise ValueError("'rng' is required: pass a seed or a numpy Generator (e.g. the study task's rng)")
    rng = np.random.default_rng(rng)
    e = rng.standard_normal(phi.n_params)
    e /= np.linalg.norm(e)
    return phi.with_params(phi.params + eps * np.linalg.norm(phi.params) * e)


def collapse_output(phi, noise: float, *, rng):
    """phi with its output layer W (``W`` of a linear, ``W2`` of a two-layer embedding) replaced by
    ``u a^T + noise W``: u a uniform random unit vector, a i.i.d. N(0, 1/columns), drawn in that order
    from ``rng``. Nearly rank one: most points map near +u or -u, a far start for training."""
    if not (isinstance(noise, (int, float, np.floating)) and math.isfinite(noise) and noise >= 0):
        raise ValueError(f"'noise' must be a finite number >= 0, got {noise!r}")
    if not isinstance(phi, (LinearEmbedding, TwoLayerEmbedding)):
        raise ValueError(f"'phi' must be a LinearEmbedding or a TwoLayerEmbedding, got {type(phi).__name__}")
    w = phi.W if isinstance(phi, LinearEmbedding) else phi.W2
    u = rng.standard_normal(w.shape[0])
    a = rng.standard_normal(w.shape[1]) / math.sqrt(w.shape[1])
    out = np.outer(u / np.linalg.norm(u), a) + noise * w
    return LinearEmbedding(out) if isinstance(phi, LinearEmbedding) else TwoLayerEmbedding(phi.W1, phi.b1, out)


def cap_cosine(p: int, fraction: float) -> float:
    """The cosine t of the spherical cap {x : x.c >= t} of S^{p-1} that holds ``fraction`` (in (0, 1/2])
    of the uniform measure: P(x.c >= t) = I_{1 - t^2}((p - 1)/2, 1/2) / 2 for t >= 0 (t = 1 - 2 fraction
    for p = 3)."""
    if not (isinstance(fraction, (int, float, np.floating)) and 0 < fraction <= 0.5):
        raise ValueError(f"'fraction' must be a number in (0, 0.5], got {fraction!r}")
    if not (isinstance(p, (int, np.integer)) and p >= 2):
        raise ValueError(f"'p' must be an integer >= 2, got {p!r}")
    return float(math.sqrt(1.0 - special.betaincinv((p - 1) / 2.0, 0.5, 2.0 * fraction)))


class CapBump:
    """psi(x) = normalise(phi(x) + a b(x) e): phi displaced by a bump on a small spherical cap of the input sphere.

    Parameters
    ----------
    phi : callable
        The embedding S^{p-1} -> S^{d-1} (points on the last axis; an :class:`simkit.embeddings.embedding.Embedding`).
    centre : array_like, shape (p,)
        Unit vector c, the centre of the cap C = {x : x.c >= t}.
    cos_radius : float
        t in (-1, 1).
    amplitude : float
        a >= 0.
    direction : array_like, shape (d,)
        Unit vector e.

    Notes
    -----
    The bump profile b(x) = ((x.c - t)_+ / (1 - t))^2 is 1 at the centre and 0 outside C, so psi = phi
    off the cap: only the negatives that land in the cap (probability = its pi-mass) are displaced, a
    max over k negatives picks such a rare displacement up once k ~ 1 / mass, a softmax average weighs
    it by its mass. psi belongs to no parametric family and need not: the bounds of docs/theory.md
    section 12 use only unit vectors and the convexity of G, so they hold for it as proved (details:
    docs/design.md, "studies/continuity: CapBump").
    """

    def __init__(self, phi, centre: ArrayLike, cos_radius: float, amplitude: float, direction: ArrayLike):
        c = np.asarray(centre, dtype=float)
        e = np.asarray(direction, dtype=float)
        if c.ndim != 1 or abs(np.linalg.norm(c) - 1.0) > 1e-12:
            raise ValueError(f"'centre' must be a unit vector of shape (p,), got shape {c.shape}")
        if e.ndim != 1 or abs(np.linalg.norm(e) - 1.0) > 1e-12:
            raise ValueError(f"'direction' must be a unit vector of shape (d,), got shape {e.shape}")
        if not (isinstance(cos_radius, (int, float, np.floating)) and -1 < cos_radius < 1):
            raise ValueError(f"'cos_radius' must be a number in (-1, 1), got {cos_radius!r}")
        if not (isinstance(amplitude, (int, float, np.floating)) and math.isfinite(amplitude) and amplitude >= 0):
            raise ValueError(f"'amplitude' must be a finite number >= 0, got {amplitude!r}")
        self.phi, self.centre, self.cos_radius, self.amplitude, self.direction = phi, c, float(cos_radius), \
            float(amplitude), e

    def profile(self, x: ArrayLike) -> NDArray[np.float64]:
        """b(x) = ((x.c - t)_+ / (1 - t))^2 for points x of shape (..., p)."""
        z = (np.asarray(x, dtype=float) @ self.centre - self.cos_radius) / (1.0 - self.cos_radius)
        return np.square(np.maximum(z, 0.0))

    def __call__(self, x: ArrayLike) -> NDArray[np.float64]:
        """psi(x), unit vectors of shape (n, d) for points x of shape (n, p)."""
        f = self.phi(x)
        h = f + (self.amplitude * self.profile(x))[..., None] * self.direction
        norm = np.linalg.norm(h, axis=-1, keepdims=True)
        if np.any(norm < 1e-12):
            raise ValueError("psi is undefined where phi(x) + a b(x) e = 0; choose e orthogonal to phi(centre)")
        return h / norm

    @classmethod
    def random(cls, phi, p: int, fraction: float, amplitudes, *, rng) -> list[CapBump]:
        """One bump per amplitude sharing a centre c uniform on S^{p-1} and a direction e uniform among
        unit vectors orthogonal to phi(c) (drawn in that order from ``rng``, required)."""
        if rng is None:
            raise ValueError("'rng' is required: pass a seed or a numpy Generator (e.g. the study task's rng)")
        rng = np.random.default_rng(rng)
        c = rng.standard_normal(p)
        c /= np.linalg.norm(c)
        f = phi(c[None, :])[0]
        e = rng.standard_normal(f.size)
        e -= (e @ f) * f
        e /= np.linalg.norm(e)
        t = cap_cosine(p, fraction)
        return [cls(phi, c, t, float(a), e) for a in amplitudes]
