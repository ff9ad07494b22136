"""Rates of exactly computed curves: local log-log slopes and Richardson limits.

For a curve y_k known without Monte Carlo error (e.g. the excess cross-entropy of the R_k minimiser,
:func:`simkit.exact.minimiser.minimise`), a rate is read off deterministically. If
``y_k = C k^a (1 + b/k + O(k⁻²))``, the local slope between neighbouring grid points is
``a + O(1/k)``, and ``k^{-a} y_k = C + O(1/k)``: one Richardson step on the two largest k removes
the 1/k term of either (:func:`richardson_limit`). :func:`loglog_slope` gives the least-squares slope
over a fit range with the range of local slopes there (the curve's slope lies in it on that range)
and the extrapolated limit of the local slope.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = ["local_slopes", "richardson_limit", "loglog_slope"]


def _grid(k: ArrayLike, y: ArrayLike) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    kk, yy = np.asarray(k, dtype=float), np.asarray(y, dtype=float)
    if kk.ndim != 1 or kk.shape != yy.shape[-1:] or kk.size < 2 or np.any(np.diff(kk) <= 0) or np.any(kk <= 0):
        raise ValueError(f"'k' must be an increasing 1-D grid of positive numbers matching y's last axis, got "
                         f"shapes {np.shape(k)} and {np.shape(y)}")
    return kk, yy


def local_slopes(k: ArrayLike, y: ArrayLike) -> NDArray[np.float64]:
    """``Δ log|y| / Δ log k`` between neighbouring grid points (length G − 1); NaN where y changes
    sign or is zero (no power law there)."""
    kk, yy = _grid(k, y)
    with np.errstate(divide="ignore", invalid="ignore"):
        ly = np.log(np.abs(yy))
        s = np.diff(ly) / np.diff(np.log(kk))
    ok = (np.sign(yy[1:]) == np.sign(yy[:-1])) & (yy[1:] != 0) & np.isfinite(s)
    return np.where(ok, s, np.nan)


def richardson_limit(k: ArrayLike, y: ArrayLike) -> float | NDArray[np.float64]:
    """The limit of ``y_k = L + b/k + O(k⁻²)`` from the two largest grid points:
    ``(k2 y2 − k1 y1)/(k2 − k1)`` (error O(1/k²)). ``y`` may carry leading axes."""
    kk, yy = _grid(k, y)
    k1, k2 = kk[-2], kk[-1]
    out = (k2 * yy[..., -1] - k1 * yy[..., -2]) / (k2 - k1)
    return float(out) if np.ndim(out) == 0 else out


def loglog_slope(k: ArrayLike, y: ArrayLike, k_min: float) -> dict[str, float]:
    """Slope of log y on log k over ``k >= k_min`` for an exact, positive curve.

    Returns ``slope`` (ordinary least squares on the fit range), ``low`` and ``high`` (smallest and
    largest local slope on the fit range), ``limit`` (Richardson limit of the local slopes, at the
    geometric midpoints of the last two intervals) and ``n_points``; NaN everywhere when fewer than 3
    grid points are in the range or y is not positive on it.
    """
    kk, yy = _grid(k, y)
    sel = kk >= k_min
    nan = {"slope": math.nan, "low": math.nan, "high": math.nan, "limit": math.nan, "n_points": int(sel.sum())}
    if sel.sum() < 3 or not np.all(yy[sel] > 0) or not np.all(np.isfinite(yy[sel])):
        return nan
    lk, ly = np.log(kk[sel]), np.log(yy[sel])
    slope = float(np.polyfit(lk, ly, 1)[0])
    loc = local_slopes(kk[sel], yy[sel])
    mid = np.sqrt(kk[sel][1:] * kk[sel][:-1])
    return {"slope": slope, "low": float(np.min(loc)), "high": float(np.max(loc)),
            "limit": richardson_limit(mid, loc), "n_points": int(sel.sum())}
