"""Independent units of nested blocks and the rate fits applied to an exact curve (simkit.stats.sensitivity).

Expected values: a curve c1/k + c2/k^2 with known constants (the constant fit recovers them exactly),
a power law (the rate fit recovers its exponent), and the weighted least squares solved here with numpy.
"""

from __future__ import annotations

import numpy as np
import pytest

from simkit.stats.sensitivity import block_groups, exact_fit_bias

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
    assert np.isnan(exact_fit_bias(K, -g, mcse, 16)[0])  # not positive: no log fit
    assert np.isnan(exact_fit_bias(K, g, mcse, 4096)[1])  # 3 levels
