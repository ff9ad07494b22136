"""Positive-pair Markov kernels M(x, .) on S^{d-1} (docs/theory.md sections 1 and 4).

A kernel draws one positive ``x+ ~ M(x, .)`` per row of ``x`` (shape ``(n, d)`` or ``(d,)``) and,
where exact, gives ``logpdf(x, y)``: the log density of M(x, .) at y w.r.t. surface measure.
Kernels are dimension-agnostic: d is read from ``x``.

* :class:`VMFKernel` -- M(x, .) = vMF(x, kappa); pi-reversible for uniform pi.
* :class:`RotatedVMFKernel` -- M(x, .) = vMF(R x, kappa), R a rotation != I: asymmetric and not
  pi-reversible (claim C7).
* :class:`BrownianKernel` -- spherical Brownian motion (generator Laplacian/2) run for time t;
  exact heat-kernel density and exact sampling, in :mod:`simkit.distributions.heat`.
* :class:`GeodesicRandomWalk` -- ``n_steps`` moves of angle ``step`` along uniform geodesics
  (sampling only).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from simkit._jit.rng import draw_key
from simkit._jit.sampling import sample_vmf, sample_walk
from simkit._jit.special import log_vmf_norm_shifted, mean_resultant_length
from simkit._checks import Frozen, check_dim, check_int, check_points, check_rng, check_scalar

__all__ = ["MarkovKernel", "VMFKernel", "RotatedVMFKernel", "GeodesicRandomWalk"]

KAPPA_MAX = 1e6


class MarkovKernel(Frozen):
    """Base class of positive-pair kernels. Frozen after construction."""

    #: True when the law of x . x+ given x does not depend on x (rotation-invariant kernels).
    isotropic: bool = True

    def sample(self, x: ArrayLike, *, rng=None) -> NDArray[np.float64]:
        """One positive per row: ``x`` of shape ``(n, d)`` or ``(d,)`` -> the same shape."""
        x = check_points("x", x)
        if x.ndim > 2:
            raise ValueError(f"'x' must have shape (n, d) or (d,), got {x.shape}")
        self._check_dim(x.shape[-1])
        rng = check_rng(rng)
        x2 = np.ascontiguousarray(x.reshape(-1, x.shape[-1]))
        x2 = x2 / np.sqrt(np.sum(x2 * x2, axis=1, keepdims=True))
        return self._sample(x2, rng).reshape(x.shape)

    def logpdf(self, x: ArrayLike, y: ArrayLike) -> NDArray[np.float64]:
        """Log density of M(x, .) at y w.r.t. surface measure; x, y broadcast on leading axes."""
        x = check_points("x", x)
        y = check_points("y", y, x.shape[-1])
        self._check_dim(x.shape[-1])
        try:
            np.broadcast_shapes(x.shape, y.shape)
        except ValueError:
            raise ValueError(f"'x' and 'y' must broadcast against each other, got shapes {x.shape} and {y.shape}") from None
        return self._logpdf(x, y)

    def _check_dim(self, d: int) -> None:
        pass

    def _sample(self, x, rng):  # pragma: no cover
        raise NotImplementedError

    def _logpdf(self, x, y):
        raise NotImplementedError(f"{type(self).__name__} has no closed-form density")


class VMFKernel(MarkovKernel):
    """M(x, .) = vMF(x, kappa).

    Parameters
    ----------
    kappa : float
        Concentration in [0, 1e6].
    """

    def __init__(self, kappa: float):
        self.kappa = check_scalar("kappa", kappa, low=0.0, high=KAPPA_MAX)
        self._freeze()

    def __repr__(self):
        return f"VMFKernel(kappa={self.kappa:g})"

    def _sample(self, x, rng):
        out = np.empty_like(x)
        sample_vmf(x, np.full(x.shape[0], self.kappa), draw_key(rng), out)
        return out

    def _logpdf(self, x, y):
        # log C_d + kappa x.y = (log C_d + kappa) - kappa ||y - x||^2 / 2: exact near the mode
        d = x.shape[-1]
        diff = y - x
        return float(log_vmf_norm_shifted(d, self.kappa)) - 0.5 * self.kappa * np.sum(diff * diff, axis=-1)

    def mean_cosine(self, d: int) -> float:
        """``E[x . x+] = A_d(kappa)``."""
        return float(mean_resultant_length(check_dim("d", d), self.kappa))

    def describe(self) -> str:
        return f"vMF kernel (kappa={self.kappa:g})"


class RotatedVMFKernel(MarkovKernel):
    """M(x, .) = vMF(R x, kappa) for a fixed rotation R (asymmetric, not pi-reversible).

    Parameters
    ----------
    rotation : array_like, shape (d, d)
        A rotation: orthogonal (R^T R = I within 1e-8) with determinant +1.
    kappa : float
        Concentration in [0, 1e6].
    """

    isotropic = False

    def __init__(self, rotation: ArrayLike, kappa: float):
        try:
            r = np.asarray(rotation, dtype=float)
        except (TypeError, ValueError):
            raise ValueError("'rotation' must be a real (d, d) array") from None
        if r.ndim != 2 or r.shape[0] != r.shape[1] or r.shape[0] < 2:
            raise ValueError(f"'rotation' must be a square (d, d) array with d >= 2, got shape {r.shape}")
        if not np.all(np.isfinite(r)):
            raise ValueError("'rotation' must be finite (no NaN or inf)")
        err = float(np.max(np.abs(r.T @ r - np.eye(r.shape[0]))))
        if err > 1e-8:
            raise ValueError(f"'rotation' must be orthogonal (R^T R = I within 1e-8), got max error {err:.3g}")
        if np.linalg.det(r) < 0:
            raise ValueError("'rotation' must have determinant +1 (a rotation, not a reflection)")
        self.rotation = r.copy()
        self.kappa = check_scalar("kappa", kappa, low=0.0, high=KAPPA_MAX)
        self.dim = r.shape[0]
        self._freeze()

    def __repr__(self):
        return f"RotatedVMFKernel(dim={self.dim}, kappa={self.kappa:g})"

    @classmethod
    def plane_rotation(cls, dim: int, angle: float, kappa: float, axes: tuple[int, int] = (0, 1)):
        """Rotation by ``angle`` radians in the plane of coordinate axes ``axes``."""
        dim = check_dim("dim", dim)
        angle = check_scalar("angle", angle)
        if (not isinstance(axes, (tuple, list)) or len(axes) != 2
                or not all(isinstance(a, (int, np.integer)) and not isinstance(a, bool) for a in axes)
                or not all(0 <= a < dim for a in axes) or axes[0] == axes[1]):
            raise ValueError(f"'axes' must be two distinct integers in [0, {dim}), got {axes!r}")
        i, j = int(axes[0]), int(axes[1])
        r = np.eye(dim)
        c, s = np.cos(angle), np.sin(angle)
        r[i, i], r[i, j], r[j, i], r[j, j] = c, -s, s, c
        return cls(r, kappa)

    def _check_dim(self, d):
        if d != self.dim:
            raise ValueError(f"'x' must have last axis of length {self.dim} to match 'rotation', got {d}")

    def _sample(self, x, rng):
        mus = x @ self.rotation.T
        mus /= np.sqrt(np.sum(mus * mus, axis=1, keepdims=True))
        out = np.empty_like(x)
        sample_vmf(mus, np.full(x.shape[0], self.kappa), draw_key(rng), out)
        return out

    def _logpdf(self, x, y):
        diff = y - x @ self.rotation.T
        return float(log_vmf_norm_shifted(self.dim, self.kappa)) - 0.5 * self.kappa * np.sum(diff * diff, axis=-1)

    def mean_cosine_at(self, x: ArrayLike) -> NDArray[np.float64]:
        """``E[x . x+ | x] = A_d(kappa) x . R x``."""
        x = check_points("x", x, self.dim)
        return float(mean_resultant_length(self.dim, self.kappa)) * np.sum(x * (x @ self.rotation.T), axis=-1)

    def describe(self) -> str:
        return f"rotated vMF kernel (kappa={self.kappa:g})"


class GeodesicRandomWalk(MarkovKernel):
    """A discrete random walk: ``n_steps`` moves of angle ``step`` along uniform random geodesics.

    Parameters
    ----------
    step : float
        Step angle in radians, 0 < step <= pi.
    n_steps : int
        Number of steps, >= 1.

    Notes
    -----
    Sampling only (no closed-form density). ``E[x . x+] = cos(step)^n_steps`` exactly, since each
    step's tangent direction has mean zero.
    """

    def __init__(self, step: float, n_steps: int):
        self.step = check_scalar("step", step, low=0.0, high=np.pi, low_inclusive=False)
        self.n_steps = check_int("n_steps", n_steps, low=1)
        self._freeze()

    def __repr__(self):
        return f"GeodesicRandomWalk(step={self.step:g}, n_steps={self.n_steps})"

    def _sample(self, x, rng):
        out = np.empty_like(x)
        sample_walk(x, self.step, self.n_steps, draw_key(rng), out)
        return out

    def mean_cosine(self, d: int) -> float:
        """``E[x . x+] = cos(step)^n_steps`` (the same for every d >= 2)."""
        check_dim("d", d)
        return float(np.cos(self.step) ** self.n_steps)

    def describe(self) -> str:
        return f"geodesic walk (step={self.step:g}, n={self.n_steps})"
