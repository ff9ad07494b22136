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


def test_block_size_layout_and_a_task_blocks():
    from simkit.stats.sensitivity import size_cell_blocks, sub_blocks_per_task
    assert sub_blocks_per_task("s", [32, 512], 2560, 20) == 4  # 128 anchors per task: 4 blocks of 32
    assert sub_blocks_per_task("s", [], 2560, 20) == 1
    with pytest.raises(ValueError, match="'s' must divide sens_total / n_blocks = 128"):
        sub_blocks_per_task("s", [96], 2560, 20)
    with pytest.raises(ValueError, match="'s' must leave >= 3 blocks of 1024"):
        sub_blocks_per_task("s", [1024], 2048, 16)
    draws = iter(range(100))
    assert size_cell_blocks(lambda: next(draws), 32, 2560, 20, lambda: 99) == [0, 1, 2, 3]
    assert size_cell_blocks(lambda: next(draws), 512, 2560, 20, lambda: 4) == [4]  # tasks 0..4 run a block
    assert size_cell_blocks(lambda: next(draws), 512, 2560, 20, lambda: 5) == []


def test_sensitivity_tables_rows_and_schema_agree():
    from simkit.stats.sensitivity import put_row, sensitivity_tables, sensitivity_vars
    out = sensitivity_tables(2, 3, 1)
    assert set(out) == set(sensitivity_vars("cell", "the first blocks"))
    assert out["pilot_verdict"] == [["n/a"], ["n/a"]] and out["kmf_verdict"][0] == ["", "", ""]
    row = {"slope": -1.0, "slope_se": 0.1, "k_min": 64.0, "slope_p_half": 0.0, "slope_exact_fit": -0.99,
           "c1_exact_fit": 25.0, "verdict": "pass", "const_z": 0.3, "const_estimate": 25.1,
           "const_estimate_mcse": 0.2, "reason": ""}
    put_row(out, "kmf", 1, [row, {**row, "verdict": "fail", "reason": "r"}])
    assert out["kmf_verdict"][1] == ["pass", "fail", ""] and out["kmf_c1_z"][1, 0] == 0.3
    assert np.isnan(out["kmf_slope"][0]).all() and out["kmf_reason"][1][1] == "r"


@pytest.mark.deterministic(reason="a fake estimator: exact equality of recorded generator states")
def test_nested_pilots_start_from_one_state():
    """A fake estimator records the generator state each calibration starts from."""
    from simkit.stats.sensitivity import nested_pilot_coefficients

    class Fake:
        grid = np.arange(3)

        def default_coef(self):
            return np.full((3, 4), 7.0)

        def calibrate(self, anchors, rng, n_blocks):
            return np.full((3, 4), rng.random() + 10 * n_blocks)
    rng = np.random.default_rng(5)
    first = np.random.default_rng(5).random()
    out = nested_pilot_coefficients(Fake(), 256, rng, [0, 1, 2], 5)
    assert out.shape == (3, 5, 4) and np.all(out[0, :3] == 7.0) and np.isnan(out[:, 3:]).all()
    assert out[1, 0, 0] == first + 10 and out[2, 0, 0] == first + 20
    assert rng.random() == first  # the caller's generator did not advance
