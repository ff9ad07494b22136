"""Sensitivity of the rate verdict to its analysis choices: block size and the fit's truncation.

* :func:`block_groups`: the independent units of a design whose tasks hold several sub-blocks;
* :func:`exact_fit_bias`: the rate fit and the constant fit of :mod:`simkit.stats.analysis` applied
  to an exact curve, i.e. the estimates the method would report without Monte Carlo error (its
  deterministic bias at a given k_min);
* :func:`k_min_sensitivity`, :func:`pilot_sensitivity`: a rate rule re-applied at other k_min factors,
  and to the same blocks re-weighted with other control-variate coefficients.
"""

from __future__ import annotations

import math

import numpy as np
import statsmodels.api as sm
from numpy.typing import ArrayLike, NDArray

from simkit.estimators.infonce import gap_with_coefficients
from simkit.stats.analysis import mean_mcse

__all__ = ["block_groups", "exact_fit_bias", "k_min_sensitivity", "pilot_sensitivity"]


def block_groups(blocks: ArrayLike) -> NDArray[np.float64]:
    """Independent (sub-)blocks: ``(block, sub, k)`` -> ``(units, k)``, rows without a finite value dropped
    (a task that ran fewer sub-blocks leaves all-NaN rows)."""
    b = np.asarray(blocks, dtype=float)
    a = b.reshape(-1, b.shape[-1])
    return a[np.any(np.isfinite(a), axis=1)]


def exact_fit_bias(k: ArrayLike, gap_exact: ArrayLike, gap_mcse: ArrayLike, k_min: float) -> tuple[float, float]:
    """``(slope, c1)`` of the rate fit (log gap on 1, log k, 1/k; weights (gap / mcse)^2) and the constant fit
    (gap on 1/k, 1/k^2; weights 1 / mcse^2) applied to the exact curve over k >= k_min, with the Monte Carlo
    weights of :func:`simkit.stats.analysis.fit_rate` and ``fit_inverse_powers``. NaN when fewer than 4
    levels with a finite positive MCSE remain or the exact curve is not positive there."""
    k, gap_exact, gap_mcse = (np.asarray(a, dtype=float) for a in (k, gap_exact, gap_mcse))
    sel = (k >= k_min) & np.isfinite(gap_exact) & np.isfinite(gap_mcse) & (gap_mcse > 0)
    if sel.sum() < 4 or np.any(gap_exact[sel] <= 0):
        return math.nan, math.nan
    ks, g, se = k[sel], gap_exact[sel], gap_mcse[sel]
    x = np.column_stack([np.ones_like(ks), np.log(ks), 1.0 / ks])
    slope = sm.WLS(np.log(g), x, weights=(g / se) ** 2).fit().params[1]
    c1 = sm.WLS(g, np.column_stack([1.0 / ks, 1.0 / ks**2]), weights=1.0 / se**2).fit().params[0]
    return float(slope), float(c1)


def k_min_sensitivity(rule, blocks: NDArray, factors, k: NDArray, gap_exact: NDArray, gap_mcse: NDArray) -> list[dict]:
    """``rule(blocks, factor)`` (a dict as :func:`simkit.stats.analysis.rate_verdict` returns) at each k_min
    factor, each with ``slope_exact_fit`` and ``c1_exact_fit`` (:func:`exact_fit_bias` at its k_min; NaN
    without one)."""
    rows = []
    for f in factors:
        r = dict(rule(blocks, f))
        r["slope_exact_fit"], r["c1_exact_fit"] = (exact_fit_bias(k, gap_exact, gap_mcse, r["k_min"])
                                                   if np.isfinite(r["k_min"]) else (math.nan, math.nan))
        rows.append(r)
    return rows


def pilot_sensitivity(rule, gap_plain: NDArray, means: tuple, coefs, factor: float) -> list[dict]:
    """``rule(blocks, factor)`` on the same blocks re-weighted with each control-variate coefficient array of
    ``coefs`` (:func:`simkit.estimators.infonce.gap_with_coefficients`), each with ``gap_mcse_kmax``, the MCSE
    of the re-weighted gap at the largest k."""
    rows = []
    for coef in coefs:
        g = gap_with_coefficients(gap_plain, means, coef)
        rows.append({**rule(g, factor), "gap_mcse_kmax": mean_mcse(g[:, -1])[1]})
    return rows
