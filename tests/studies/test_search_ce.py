"""The search_ce study's test of the Monte Carlo D_k curve against d_exact, on synthetic blocks."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr
from scipy import stats

from studies.search_ce import ALPHA, CURVE_K, CURVE_MARGIN, STUDY, _n_null_tests


def _raw(exact: np.ndarray, blocks: np.ndarray) -> xr.Dataset:
    n_s, n_b, n_k = blocks.shape
    return xr.Dataset({"raw_d_cv": (("setting", "block", "k"), blocks),
                       "prep_d_exact": (("setting", "d_exact_dim0"), exact)},
                      coords={"setting": [f"s{i}" for i in range(n_s)], "k": 2 ** np.arange(n_k)})


def _run(exact, blocks):
    raw = _raw(exact, blocks)
    k = raw["k"].values
    out = {"d": blocks.mean(axis=1), "d_mcse": blocks.std(axis=1, ddof=1) / np.sqrt(blocks.shape[1])}
    rows = [{"verdict": "pass", "reason": ""} for _ in range(blocks.shape[0])]
    STUDY._truth(raw, k, out, rows, seed=20261205)
    return out, rows


@pytest.mark.deterministic(reason="fixed seed; the shifted column is 8 standard errors off, about twice the critical "
                                  "values (~4.0 max-t over 15 k; 4.29 for the verdict's Bonferroni t over 4 k at alpha/4), "
                                  "the unshifted curve is the blocks' mean law")
def test_curve_test_accepts_the_truth_and_rejects_a_shift():
    """The verdict's curve test (protocols/search_ce_curve.md) looks at k = 16, 256, 4096 and k_max only: one k of
    those 8 SE off fails the setting, and d_curve_p_bonferroni is the Bonferroni p-value over those four k
    times the margin 4 (Student t by hand); a shift at k = 2 fails the reported max-t over every k but not the verdict."""
    rng = np.random.default_rng(20261205)
    n_b, n_k = 64, 15
    exact = 1.0 / 2.0 ** np.arange(n_k)
    sd = 0.05 * exact
    blocks = exact + sd * rng.standard_normal((4, n_b, n_k))
    shifted = np.tile(exact, (4, 1))
    shifted[1, 8] += 8 * sd[8] / np.sqrt(n_b)     # positive control: k = 256 off by 8 SE
    shifted[2] = np.nan                          # no exact curve (mixture): not tested
    shifted[3, 1] += 8 * sd[1] / np.sqrt(n_b)     # k = 2: outside the verdict's k
    out, rows = _run(shifted, blocks)
    assert out["d_curve_p_bonferroni"][0] >= ALPHA and out["d_curve_p"][0] >= ALPHA and rows[0]["verdict"] == "pass"
    assert out["d_curve_p_bonferroni"][1] < ALPHA and rows[1]["verdict"] == "fail"
    assert "D_k curve against d_exact rejected" in rows[1]["reason"] and "k = 16, 256, 4096, 16384" in rows[1]["reason"]
    assert np.isnan(out["d_curve_p"][2]) and np.isnan(out["d_curve_p_bonferroni"][2]) and rows[2]["verdict"] == "pass"
    assert out["d_curve_p"][3] < ALPHA <= out["d_curve_p_bonferroni"][3] and rows[3]["verdict"] == "pass"
    np.testing.assert_allclose(out["d_z"][0], (out["d"][0] - exact) / out["d_mcse"][0])
    cols = [4, 8, 12, 14]
    t = (blocks[1][:, cols].mean(0) - shifted[1, cols]) / (blocks[1][:, cols].std(0, ddof=1) / np.sqrt(n_b))
    assert CURVE_K == (16, 256, 4096) and CURVE_MARGIN == 4.0
    assert out["d_curve_p_bonferroni"][1] == pytest.approx(min(1.0, 4 * 4 * np.min(2 * stats.t.sf(np.abs(t), n_b - 1))),
                                                           rel=1e-9)


def test_number_of_null_tests():
    ds = xr.Dataset({"d_exact": (("setting", "k"), np.array([[1.0, 2.0], [1.0, 2.0], [np.nan, np.nan]]))})
    assert _n_null_tests(ds) == 2 * 3 + 2
