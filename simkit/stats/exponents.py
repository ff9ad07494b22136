"""One-sided tests of a power-law exponent: is ``E[Y(x)] ~ x^b`` growing (b > bound)?

The curve is the block mean of replicate blocks over a grid of x; the exponent is the WLS slope of
log E[Y] on log x over x >= x_min with a delete-one-block jackknife SE (:func:`simkit.stats.analysis.fit_rate`),
tested by Student t on (blocks - 1) degrees of freedom. Used for the Rademacher complexity's
k-exponent (H0 b <= 0: no growth in k) and n-exponent (H0 b <= -1/2: decay at least like n^-1/2).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike
from scipy import stats

from simkit.stats.analysis import fit_rate
from simkit.stats.trend import detectable_t

__all__ = ["ExponentTest", "exponent_test"]


@dataclass(frozen=True)
class ExponentTest:
    """Slope ``b`` of log E[Y] on log x with its jackknife SE and df; the one-sided test of H0 b <= bound.

    ``upper`` is the one-sided level-(1 - alpha) upper confidence bound ``b + t_(1-alpha) SE``;
    ``p`` = P(T >= (b - bound) / SE); ``mde`` = :func:`simkit.stats.trend.detectable_t` of ``t_(1-alpha)``:
    the excess of b over the bound detected with probability :data:`simkit.stats.trend.DETECT_POWER`.
    NaN where the fit or its SE is undefined.
    """

    slope: float
    se: float
    df: float
    upper: float
    p: float
    mde: float


def exponent_test(x: ArrayLike, blocks: ArrayLike, x_min: float, *, alpha: float, bound: float = 0.0) -> ExponentTest:
    """The exponent of the block-mean curve ``blocks`` (blocks, len(x)) over ``x >= x_min`` and its
    one-sided Student t test of H0 ``b <= bound`` at level ``alpha`` (see :class:`ExponentTest`)."""
    if not (0.0 < alpha < 1.0):
        raise ValueError(f"'alpha' must be in (0, 1), got {alpha!r}")
    fit = fit_rate(np.asarray(x, dtype=float), np.asarray(blocks, dtype=float), x_min, with_inverse=False)
    nan = math.nan
    if not (np.isfinite(fit.slope) and fit.slope_se > 0):
        return ExponentTest(fit.slope, fit.slope_se, fit.df, nan, nan, nan)
    q = stats.t.isf(alpha, fit.df)
    return ExponentTest(fit.slope, fit.slope_se, fit.df, fit.slope + q * fit.slope_se,
                        stats.t.sf((fit.slope - bound) / fit.slope_se, fit.df), detectable_t(q, fit.df, fit.slope_se))
