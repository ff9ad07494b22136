"""Independent units of nested blocks and the rate fits applied to an exact curve (simkit.stats.sensitivity).

Expected values: a curve c1/k + c2/k^2 with known constants (the constant fit recovers them exactly),
a power law (the rate fit recovers its exponent), and the weighted least squares solved here with numpy.
"""

from __future__ import annotations

import numpy as np
import pytest

from simkit.stats.sensitivity import block_groups, exact_fit_bias, k_min_sensitivity, pilot_sensitivity

K = 2.0 ** np.arange(4, 14)


def test_block_groups_flattens_and_drops_missing_sub_blocks():
    a = np.full((3, 2, 4), np.nan)
    a[:, 0] = 1.0
    a[1, 1] = 2.0
    out = block_groups(a)
    assert out.shape == (4, 4) and np.array_equal(out[:, 0], [1.0, 1.0, 2.0, 1.0])


@pytest.mark.deterministic(reason="exact curves: the fits recover known constants to rounding")
def test_exact_fit_bias_recovers_known_constants():
    mcse = 1e-3 / K
    slope, c1 = exact_fit_bias(K, 25.5 / K - 300 / K**2, mcse, 16)
    assert c1 == pytest.approx(25.5, rel=1e-9)
    x = np.column_stack([np.ones_like(K), np.log(K), 1 / K])  # the rate fit, weighted by (g / mcse)^2, by hand
    g = 25.5 / K - 300 / K**2
    sw = g / mcse
    ref = np.linalg.lstsq(x * sw[:, None], np.log(g) * sw, rcond=None)[0]
    assert slope == pytest.approx(ref[1], rel=1e-8)
    assert exact_fit_bias(K, 3.0 * K ** -0.5, mcse, 16)[0] == pytest.approx(-0.5, abs=1e-9)  # positive control
    g3 = g + 5000 / K**3  # outside the constant fit's span: its weights 1 / mcse^2 matter
    xc = np.column_stack([1 / K, 1 / K**2]) / mcse[:, None]
    assert exact_fit_bias(K, g3, mcse, 16)[1] == pytest.approx(np.linalg.lstsq(xc, g3 / mcse, rcond=None)[0][0], rel=1e-8)
    assert np.isnan(exact_fit_bias(K, -g, mcse, 16)[0])  # not positive: no log fit
    assert np.isnan(exact_fit_bias(K, g, mcse, 4096)[1])  # 3 levels


def test_k_min_and_pilot_sensitivity_apply_the_rule_per_setting():
    """The rule is called once per factor / coefficient array, with the blocks it should see."""
    calls = []

    def rule(blocks, factor):
        calls.append((np.array(blocks), factor))
        return {"k_min": 16.0 * factor, "slope": float(np.mean(blocks))}

    g = 25.5 / K - 300 / K**2
    rows = k_min_sensitivity(rule, np.ones((3, K.size)), (1.0, 1000.0), K, g, 1e-3 / K)
    assert [r["slope"] for r in rows] == [1.0, 1.0] and rows[0]["c1_exact_fit"] == pytest.approx(25.5, rel=1e-9)
    assert np.isnan(rows[1]["c1_exact_fit"])  # k_min beyond the grid: no fit
    plain = np.arange(12.0).reshape(3, 4)
    means = (np.ones((3, 4)), 2 * np.ones((3, 4)), 3 * np.ones((3, 4)))
    coefs = [np.zeros((4, 4)), np.tile([1.0, 1.0, -0.5, 0.0], (4, 1))]
    calls.clear()
    rows = pilot_sensitivity(rule, plain, means, coefs, 16.0)
    np.testing.assert_array_equal(calls[0][0], plain)
    np.testing.assert_array_equal(calls[1][0], plain - 1 - 2 + 1.5)
    assert rows[0]["gap_mcse_kmax"] == pytest.approx(np.std(plain[:, -1], ddof=1) / np.sqrt(3), rel=1e-12)
