"""The onset of the 1/k regime: from which k on does c1/k (or c1/k + c2/k^2) describe gap_k?

On a grid k_1 < ... < k_n the onset of a ratio curve r_k is the smallest grid k from which
``|r_k - 1| <= tol`` at every larger grid k (the last exit from the band, not the first entry: a
curve that enters the band, leaves it and re-enters has its onset at the re-entry). The ratios are
``k gap_k / c1`` (first order) and ``gap_k / (c1/k + c2/k^2)`` (second order); a ratio that is
undefined (NaN, or a prediction of zero) counts as outside the band. Where the curve and the
constants carry Monte Carlo error, :func:`onset_interval` draws them from their Gaussian error law
(the curve with its covariance across k) and reports percentiles of the onset: an interval for the
grid onset that the error of the curve induces. :func:`interval_position` says whether such an
interval lies inside a predicted range, outside it, or straddles it.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray

from simkit._checks import check_int, check_rng, check_scalar

__all__ = ["onset_ratio", "onset_k", "onset_interval", "interval_position"]


def _grid(ks) -> NDArray[np.float64]:
    k = np.asarray(ks, dtype=float)
    if k.ndim != 1 or k.size == 0 or not np.all(np.isfinite(k)) or np.any(k <= 0) or np.any(np.diff(k) <= 0):
        raise ValueError(f"'ks' must be a non-empty increasing 1-D array of positive numbers, got {ks!r}")
    return k


def onset_ratio(ks: ArrayLike, gap: ArrayLike, c1: float, c2: float | None = None) -> NDArray[np.float64]:
    """``k gap_k / c1`` (``c2`` None) or ``gap_k / (c1/k + c2/k^2)``; NaN where the prediction is 0."""
    k = _grid(ks)
    g = np.asarray(gap, dtype=float)
    if g.shape != k.shape:
        raise ValueError(f"'gap' must have the shape of 'ks' {k.shape}, got {g.shape}")
    pred = c1 / k if c2 is None else c1 / k + c2 / k**2
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(pred != 0, g / np.where(pred != 0, pred, 1.0), np.nan)


def onset_k(ks: ArrayLike, ratio: ArrayLike, tol: float = 0.1) -> float:
    """The smallest grid k from which ``|ratio - 1| <= tol`` at every larger grid k.

    Returns ``inf`` when the last grid point is outside the band (no onset on the grid).
    """
    k = _grid(ks)
    r = np.asarray(ratio, dtype=float)
    if r.shape != k.shape:
        raise ValueError(f"'ratio' must have the shape of 'ks' {k.shape}, got {r.shape}")
    tol = check_scalar("tol", tol, low=0.0, low_inclusive=False)
    inside = np.abs(r - 1.0) <= tol  # NaN compares False: outside
    out = np.flatnonzero(~inside)
    if out.size == 0:
        return float(k[0])
    if out[-1] == k.size - 1:
        return math.inf
    return float(k[out[-1] + 1])


def onset_interval(ks: ArrayLike, gap: ArrayLike, c1: float, *, c2: float | None = None,
                   gap_cov: ArrayLike | None = None, c1_mcse: float = 0.0, c2_mcse: float = 0.0,
                   tol: float = 0.1, level: float = 0.95, n_draws: int = 2000, rng=None) -> tuple[float, float]:
    """Equal-tailed percentile interval of the grid onset under the Monte Carlo error of the curve
    and constants: the curve drawn from N(gap, gap_cov), c1 and c2 from independent normals.

    Without error (``gap_cov`` None or zero, zero MCSEs) the interval is the onset itself. ``rng`` is
    required otherwise (no default seed).
    """
    k = _grid(ks)
    g = np.asarray(gap, dtype=float)
    level = check_scalar("level", level, low=0.0, high=1.0, low_inclusive=False, high_inclusive=False)
    n_draws = check_int("n_draws", n_draws, low=10)
    c1_mcse = check_scalar("c1_mcse", c1_mcse, low=0.0)
    c2_mcse = check_scalar("c2_mcse", c2_mcse, low=0.0)
    cov = None if gap_cov is None else np.asarray(gap_cov, dtype=float)
    if cov is not None and cov.shape != (k.size, k.size):
        raise ValueError(f"'gap_cov' must have shape ({k.size}, {k.size}), got {cov.shape}")
    if cov is not None and not np.any(cov):
        cov = None
    point = onset_k(k, onset_ratio(k, g, c1, c2), tol)
    if cov is None and c1_mcse == 0.0 and (c2 is None or c2_mcse == 0.0):
        return point, point
    if rng is None:
        raise ValueError("'rng' is required when the curve or the constants carry Monte Carlo error")
    gen = check_rng(rng)
    if cov is not None:
        w, v = np.linalg.eigh(0.5 * (cov + cov.T))
        root = v * np.sqrt(np.clip(w, 0.0, None))
        curves = g + gen.standard_normal((n_draws, k.size)) @ root.T
    else:
        curves = np.broadcast_to(g, (n_draws, k.size))
    c1s = c1 + c1_mcse * gen.standard_normal(n_draws)
    c2s = None if c2 is None else c2 + c2_mcse * gen.standard_normal(n_draws)
    ons = np.array([onset_k(k, onset_ratio(k, curves[i], c1s[i], None if c2s is None else c2s[i]), tol)
                    for i in range(n_draws)])
    a = 0.5 * (1.0 - level)
    lo, hi = np.quantile(ons, [a, 1.0 - a], method="inverted_cdf")
    return float(lo), float(hi)


def interval_position(low: float, high: float, range_low: float, range_high: float) -> str:
    """``"inside"`` when [low, high] lies within [range_low, range_high], ``"outside"`` when the two
    are disjoint, ``"undetermined"`` when they overlap only in part (NaN bounds: undetermined)."""
    if not all(np.isfinite(v) or v == math.inf for v in (low, high)) or math.isnan(range_low) or math.isnan(range_high):
        return "undetermined"
    if low > high or range_low > range_high:
        raise ValueError(f"intervals must have low <= high, got [{low}, {high}] and [{range_low}, {range_high}]")
    if range_low <= low and high <= range_high:
        return "inside"
    if high < range_low or low > range_high:
        return "outside"
    return "undetermined"
