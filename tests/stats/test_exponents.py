"""The one-sided exponent test (simkit.stats.exponents): deterministic inputs, no randomness.

The slope and its SE come from simkit.stats.analysis.fit_rate (tested in test_rate_analysis.py); here
the test statistic, p-value, bound and detectable exponent (probability 0.9) are checked against scipy from that fit,
an exact power law gives its exponent, and a growing curve is flagged where a flat one is not.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from simkit.stats.analysis import fit_rate
from simkit.stats.exponents import exponent_test

K = 2.0 ** np.arange(0, 9)
#: a fixed, non-random multiplicative wobble per (block, k): +-2% in a pattern with no trend in k
WOBBLE = 1.0 + 0.02 * np.sin(np.arange(12)[:, None] * 1.7 + np.arange(K.size)[None, :] * 2.3)


def test_statistics_follow_from_the_fit():
    blocks = 0.3 * K ** 0.05 * WOBBLE
    t = exponent_test(K, blocks, 4.0, alpha=1e-3)
    fit = fit_rate(K, blocks, 4.0, with_inverse=False)
    q = stats.t.isf(1e-3, fit.df)
    assert (t.slope, t.se, t.df) == (fit.slope, fit.slope_se, fit.df)
    assert t.p == pytest.approx(stats.t.sf(fit.slope / fit.slope_se, fit.df), rel=1e-12)
    assert t.upper == pytest.approx(fit.slope + q * fit.slope_se, rel=1e-12)
    assert t.mde == pytest.approx((q + stats.t.ppf(0.9, fit.df)) * fit.slope_se, rel=1e-12)
    tb = exponent_test(K, blocks, 4.0, alpha=1e-3, bound=-0.5)  # H0 b <= -1/2: the statistic shifts by 1/2
    assert tb.p == pytest.approx(stats.t.sf((fit.slope + 0.5) / fit.slope_se, fit.df), rel=1e-12)


def test_exact_power_law_and_undefined_fit():
    """Every block an exact multiple of k^-1/2: the slope is -1/2 and the jackknife SE 0 (to rounding).
    A curve with a negative mean has no log-log fit: every statistic is NaN, nothing raises."""
    blocks = np.linspace(0.5, 2.0, 8)[:, None] * K[None, :] ** -0.5
    t = exponent_test(K, blocks, 1.0, alpha=0.01)
    assert t.slope == pytest.approx(-0.5, abs=1e-12)
    assert t.se == pytest.approx(0.0, abs=1e-12)
    bad = exponent_test(K, -blocks, 1.0, alpha=0.01)
    assert all(math.isnan(v) for v in (bad.slope, bad.upper, bad.p, bad.mde))


def test_growth_is_flagged_and_flat_is_not():
    """Positive control: a curve growing like k^0.5 rejects H0 b <= 0; the same wobble on a flat curve does not."""
    grow = exponent_test(K, K ** 0.5 * WOBBLE, 4.0, alpha=1e-3)
    flat = exponent_test(K, np.ones(K.size) * WOBBLE, 4.0, alpha=1e-3)
    assert grow.slope == pytest.approx(0.5, abs=0.02) and grow.p < 1e-6
    assert abs(flat.slope) < 0.02 and flat.p > 1e-3


def test_bad_alpha():
    with pytest.raises(ValueError, match="'alpha' must be in"):
        exponent_test(K, WOBBLE, 4.0, alpha=1.5)
