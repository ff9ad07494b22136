"""Local slopes and Richardson limits of exact curves (simkit.stats.exact_rate) against closed forms."""

from __future__ import annotations

import math

import numpy as np
import pytest

from simkit.stats.exact_rate import local_slopes, loglog_slope, richardson_limit

K = 2.0 ** np.arange(1, 13)


@pytest.mark.deterministic(reason="closed-form curves, no randomness; tolerances are floating-point rounding")
def test_pure_power_law_has_its_exponent_everywhere():
    for a in (-2.0, -1.0, -0.5, 1.5):
        np.testing.assert_allclose(local_slopes(K, 3.7 * K**a), a, atol=1e-12)
    fit = loglog_slope(K, 0.2 * K**-2.0, 256)
    assert fit["n_points"] == 5
    for key in ("slope", "low", "high", "limit"):
        assert abs(fit[key] + 2.0) < 1e-12, (key, fit[key])


@pytest.mark.deterministic(reason="closed-form curves, no randomness")
def test_corrected_power_law_local_slopes_and_limit():
    b = 3.0
    y = 0.1 * K**-2.0 * (1.0 + b / K)
    # the test's own closed form of the local slope between k1 and k2
    k1, k2 = K[:-1], K[1:]
    want = -2.0 + np.log((1 + b / k2) / (1 + b / k1)) / np.log(k2 / k1)
    np.testing.assert_allclose(local_slopes(K, y), want, rtol=0, atol=1e-12)
    fit = loglog_slope(K, y, 256)
    assert fit["low"] == pytest.approx(float(np.min(want[K[:-1] >= 256])), abs=1e-12)
    assert fit["high"] == pytest.approx(float(np.max(want[K[:-1] >= 256])), abs=1e-12)
    # the local slope is -2 - b/k + O(1/k^2): one Richardson step leaves O(1/k^2)
    assert abs(fit["high"] + 2.0) > 1e-3 and abs(fit["limit"] + 2.0) < 2e-5
    # positive control: an O(1/k) curve has limit -1, far outside -2 +- 0.01
    assert abs(loglog_slope(K, 0.1 / K * (1 + b / K), 256)["limit"] + 1.0) < 2e-5


@pytest.mark.deterministic(reason="closed-form curves, no randomness")
def test_richardson_limit_is_exact_for_a_first_order_curve():
    assert richardson_limit(K, 0.3 + 5.0 / K) == pytest.approx(0.3, abs=1e-14)
    y = np.stack([0.3 + 5.0 / K, -1.0 + 2.0 / K + 7.0 / K**2])
    lim = richardson_limit(K, y)
    assert lim[0] == pytest.approx(0.3, abs=1e-14)
    k1, k2 = K[-2], K[-1]
    assert lim[1] == pytest.approx(-1.0 - 7.0 / (k1 * k2), abs=1e-14)  # the O(1/k^2) remainder, in closed form
    # positive control: a curve that does not settle gives a limit far from its last value's trend
    assert abs(richardson_limit(K, np.log(K)) - math.log(K[-1])) > 0.5


@pytest.mark.deterministic(reason="no randomness")
def test_nan_where_no_power_law_and_errors():
    y = 1e-30 * np.where(np.arange(K.size) % 2 == 0, 1.0, -1.0)  # zero to rounding, changing sign
    assert np.all(np.isnan(local_slopes(K, y)))
    assert math.isnan(loglog_slope(K, y, 256)["slope"])
    assert math.isnan(loglog_slope(K, K**-2.0, 2048)["slope"])  # only 2 points in range
    with pytest.raises(ValueError, match="'k' must be an increasing"):
        local_slopes(K[::-1], K)
    with pytest.raises(ValueError, match="'k' must be an increasing"):
        richardson_limit(K, K[:-1])
