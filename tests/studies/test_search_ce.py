"""The search_ce study's test of the Monte Carlo D_k curve against d_exact, on synthetic blocks."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

from studies.search_ce import ALPHA, STUDY, _n_null_tests


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


@pytest.mark.deterministic(reason="fixed seed; the shifted column is 8 standard errors off, twice the max-t "
                                  "critical value (~4 at 1e-3 over 6 columns), the unshifted curve is the blocks' mean law")
def test_curve_test_accepts_the_truth_and_rejects_a_shift():
    rng = np.random.default_rng(20261205)
    n_b, n_k = 64, 6
    exact = 1.0 / 2.0 ** np.arange(n_k)
    sd = 0.05 * exact
    blocks = exact + sd * rng.standard_normal((3, n_b, n_k))
    shifted = np.tile(exact, (3, 1))
    shifted[1, 3] += 8 * sd[3] / np.sqrt(n_b)     # positive control: one k off by 8 SE
    shifted[2] = np.nan                          # no exact curve (mixture): not tested
    out, rows = _run(shifted, blocks)
    assert out["d_curve_p"][0] >= ALPHA and rows[0]["verdict"] == "pass"
    assert out["d_curve_p"][1] < ALPHA and rows[1]["verdict"] == "fail"
    assert "D_k curve against d_exact rejected" in rows[1]["reason"]
    assert np.isnan(out["d_curve_p"][2]) and rows[2]["verdict"] == "pass"
    np.testing.assert_allclose(out["d_z"][0], (out["d"][0] - exact) / out["d_mcse"][0])


def test_number_of_null_tests():
    ds = xr.Dataset({"d_exact": (("setting", "k"), np.array([[1.0, 2.0], [1.0, 2.0], [np.nan, np.nan]]))})
    assert _n_null_tests(ds) == 2 * 3 + 2
