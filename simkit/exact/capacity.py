"""Complexity of an embedding class and the log-d margin of the capacity test of claim C6.

docs/theory.md section 19. The Theorem-1-type bound of section 13 has no explicit d: its complexity
term is ``D sqrt(2 P log(1 + 4 rho / eps) / n)``, whose leading factor is ``sqrt(P / n)`` with P the
dimension of the class. For the linear class ``phi_W(x) = W x / |W x|``, ``W in R^{d x p}``, every score
``phi(x).phi(y) = x^T G y / sqrt(x^T G x y^T G y)`` depends on W only through ``G = W^T W`` up to scale, so
the class has the dimension of the rank-<=min(d, p) p x p positive semi-definite matrices modulo scale
(:func:`linear_class_dimension`), not the d p of its parametrisation. A design that keeps
``P / n`` fixed while d grows (:func:`iso_complexity_n`) holds the complexity term fixed; an explicit
``log d`` factor would then make E[G] grow with d at the slope :func:`log_factor_slope` over the grid.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray

from simkit._checks import check_int

__all__ = ["linear_class_dimension", "complexity_term", "iso_complexity_n", "log_factor_slope"]


def linear_class_dimension(p: int, d: int) -> int:
    """Dimension of the score class of ``phi_W(x) = W x / |W x|``, ``W in R^{d x p}``.

    ``r p - r (r - 1) / 2 - 1`` with ``r = min(d, p)``: the rank-r positive semi-definite p x p matrices
    ``G = W^T W`` (a manifold of dimension ``r p - r (r - 1) / 2``) modulo the scale ``G -> c G``, which
    leaves every score unchanged. For d >= p this is ``p (p + 1) / 2 - 1`` at every d.
    """
    p, d = check_int("p", p, low=2), check_int("d", d, low=2)
    r = min(d, p)
    return r * p - r * (r - 1) // 2 - 1


def complexity_term(n_params: ArrayLike, n: ArrayLike) -> NDArray[np.float64]:
    """``sqrt(P / n)``: the factor of the complexity term of docs/theory.md section 13 that carries the
    class (P its dimension) and the sample size n; the rest (``D = 4/tau``, the log of the net) is fixed at
    fixed tau, Lipschitz constant and radius."""
    p, m = np.asarray(n_params, dtype=float), np.asarray(n, dtype=float)
    if np.any(~np.isfinite(p)) or np.any(p <= 0) or np.any(~np.isfinite(m)) or np.any(m <= 0):
        raise ValueError(f"'n_params' and 'n' must be positive and finite, got {n_params!r} and {n!r}")
    return np.sqrt(p / m)


def iso_complexity_n(n_params: ArrayLike, ratio: float) -> NDArray[np.int64]:
    """Training-set sizes ``round(ratio P)`` that hold ``P / n`` (the complexity term) at ``1 / ratio``."""
    p = np.asarray(n_params, dtype=float)
    if not (isinstance(ratio, (int, float)) and math.isfinite(ratio) and ratio > 0):
        raise ValueError(f"'ratio' must be a positive finite number, got {ratio!r}")
    if np.any(~np.isfinite(p)) or np.any(p < 1):
        raise ValueError(f"'n_params' must be finite and >= 1, got {n_params!r}")
    return np.maximum(1, np.rint(ratio * p)).astype(np.int64)


def log_factor_slope(levels: ArrayLike) -> float:
    """OLS slope of ``log2 ln d`` on ``log2 d`` over the grid ``levels`` (all > 1, two or more distinct).

    The slope b that a factor ``ln d`` alone gives the log-log curve of E[G] against d on this grid (the
    same for ``log_2 d`` or any fixed base): the margin of a rule that must tell ``E[G] ~ complexity`` from
    ``E[G] ~ complexity x log d``.
    """
    d = np.asarray(levels, dtype=float)
    if d.ndim != 1 or np.any(~np.isfinite(d)) or np.any(d <= 1) or np.unique(d).size < 2:
        raise ValueError(f"'levels' must be a 1-D array of numbers > 1 with at least two distinct values, got {levels!r}")
    x = np.log2(d) - np.log2(d).mean()
    y = np.log2(np.log(d))
    return float(np.dot(x, y - y.mean()) / np.dot(x, x))
