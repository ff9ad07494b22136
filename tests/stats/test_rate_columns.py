"""rate_verdict results as dataset columns (simkit.stats.analysis.rate_columns, C1_NAMES)."""

from __future__ import annotations

import numpy as np
import pytest

from simkit.stats.analysis import C1_NAMES, RATE_FIELDS, rate_columns


def test_rate_columns_names_and_keeps():
    rows = [{**{f: float(i) for f in RATE_FIELDS}, "fit_abs": np.full(2, i), "resid_rate": np.zeros(2),
             "resid_const": np.ones(2), "verdict": f"v{i}", "reason": f"r{i}"} for i in range(3)]
    keep = {"slope", "c1_estimate", "c1_z", "fit_gap", "verdict", "verdict_reason", "unrelated"}
    cols = rate_columns(rows, keep, names={**C1_NAMES, "fit_abs": "fit_gap", "reason": "verdict_reason"})
    assert set(cols) == keep - {"unrelated"}
    assert cols["c1_estimate"] == [0.0, 1.0, 2.0] and cols["verdict_reason"] == ["r0", "r1", "r2"]
    assert [c[0] for c in cols["fit_gap"]] == [0, 1, 2]
    d = rate_columns(rows, {"d_slope", "d_verdict", "slope"}, prefix="d_")
    assert set(d) == {"d_slope", "d_verdict"} and d["d_verdict"] == ["v0", "v1", "v2"]


def _gap_blocks(rng, c1=2.0, n=12, bias=0.0):
    k = 2.0 ** np.arange(8)
    return k, c1 / k + bias + 0.01 * rng.standard_normal((n, k.size)) / k


@pytest.mark.deterministic(reason="fixed seed; compared with a plain loop exactly; the control is 50 SE off the "
                                  "exact curve at every k")
def test_truth_columns_is_truth_verdict_per_setting():
    """Against truth_verdict called here setting by setting (a second, plain loop); the positive control,
    a curve off the exact one by 0.5 at every k, turns a passing rate verdict to "fail"."""
    from simkit.stats.analysis import truth_columns, truth_rng, truth_verdict
    rng = np.random.default_rng(3)
    k, good = _gap_blocks(rng)
    _, bad = _gap_blocks(rng, bias=0.5)
    gap = np.stack([good, bad])
    dgap = np.concatenate([gap[:, :, :-1] - gap[:, :, 1:], np.full((2, 12, 1), np.nan)], axis=2)
    exact = np.stack([2.0 / k] * 2)
    out = {"gap_exact": exact, "c2_estimate": [0.0, 0.0], "c2_estimate_mcse": [1.0, 1.0], "c2_exact": [0.0, 0.0],
           "verdict": ["pass", "pass"], "verdict_reason": ["", ""], "slope": [-1.0, -1.0]}
    truth_columns(out, k, gap, dgap, ["a", "b"], 7, alpha=1e-3)
    for i, label in enumerate("ab"):
        fields, problems = truth_verdict(k, gap[i], dgap[i], exact[i], None, (0.0, 1.0), (0.0, 0.0), alpha=1e-3,
                                         reference="max-t", rng=truth_rng(7, label))
        assert all(out[n][i] == v or (np.isnan(out[n][i]) and np.isnan(v)) for n, v in fields.items())
        assert out["verdict"][i] == ("fail" if problems else "pass")
    assert out["verdict"] == ["pass", "fail"] and "curve" in out["verdict_reason"][1]


@pytest.mark.deterministic(reason="fixed seed; exact agreement with fit_rate; slope tolerance 0.1 is ~10 SE")
def test_size_slopes_match_fit_rate_per_curve():
    from simkit.stats.analysis import fit_rate, size_slopes
    rng = np.random.default_rng(4)
    n = np.array([32.0, 64.0, 128.0, 256.0])
    blocks = 3.0 / np.sqrt(n) * np.exp(0.05 * rng.standard_normal((2, 3, 6, 4)))  # (setting, k, block, n)
    blocks[1, 2, 0, 0] = np.nan
    slope, se = size_slopes(n, blocks)
    f = fit_rate(n, blocks[0, 1], 32, with_inverse=False)
    assert slope.shape == (2, 3) and (slope[0, 1], se[0, 1]) == (f.slope, f.slope_se)
    assert np.isnan(slope[1, 2]) and abs(slope[0, 0] + 0.5) < 0.1
    assert np.isnan(size_slopes(n[:2], blocks[..., :2])[0]).all()


@pytest.mark.deterministic(reason="arithmetic identities against scipy written here; no random draw")
def test_cell_pvalues_is_setting_pvalues_for_one_cell():
    """The scalar counterpart of setting_pvalues: p-values passed through, t statistics turned into two-sided
    Student t p-values on n_blocks - 1 df (scipy, here), NaN kept; the same as setting_pvalues on a dataset of
    that one setting. Positive control: a t of 4 on 63 df rejects at 1e-3, a t of 3 does not."""
    import xarray as xr
    from scipy import stats

    from simkit.stats.analysis import cell_pvalues, setting_pvalues
    tests = {"slope": ("p", "slope_p_one"), "c1": ("t", "c1_z"), "c2": ("t", "c2_t")}
    values = {"slope_p_one": 0.25, "c1_z": -4.0, "c2_t": 3.0}
    out = cell_pvalues(values, 1e-3, tests, n_blocks=64, label="hard")
    assert list(out) == ["hard:slope", "hard:c1", "hard:c2"]
    assert out["hard:slope"] == (0.25, 1e-3)
    assert out["hard:c1"][0] == pytest.approx(2 * stats.t.sf(4.0, 63), rel=1e-12) and out["hard:c1"][0] < 1e-3
    assert out["hard:c2"][0] == pytest.approx(2 * stats.t.sf(3.0, 63), rel=1e-12) and out["hard:c2"][0] > 1e-3
    assert np.isnan(cell_pvalues({**values, "c1_z": np.nan}, 1e-3, tests, n_blocks=64, label="x")["x:c1"][0])
    ds = xr.Dataset({n: (("setting",), [v]) for n, v in values.items()},
                    coords={"setting": ["hard"], "block": np.arange(64)})
    assert setting_pvalues(ds, 1e-3, tests) == out
    with pytest.raises(ValueError, match="'tests' entries must be"):
        cell_pvalues(values, 1e-3, {"slope": ("z", "c1_z")}, n_blocks=64, label="x")


@pytest.mark.deterministic(reason="fixed seed; compared with truth_verdict called here exactly; the control is 50 SE "
                                  "off the exact curve at every k")
def test_rate_truth_verdict_max_t_reference():
    """rate_truth_verdict with reference="max-t" combines the rate verdict with truth_verdict's max-t tests (called
    here with the same generator); the F reference keeps the Hotelling fields. Positive control: a curve off by
    0.5 at every k fails through its curve test."""
    from simkit.stats.analysis import TRUTH_FIELDS, rate_truth_verdict, truth_rng, truth_verdict
    rng = np.random.default_rng(5)
    k, good = _gap_blocks(rng)
    _, bad = _gap_blocks(rng, bias=0.5)
    rate = {"verdict": "pass", "reason": "", "slope": -1.0}
    for blocks, want in ((good, "pass"), (bad, "fail")):
        dgap = np.concatenate([blocks[:, :-1] - blocks[:, 1:], np.full((12, 1), np.nan)], axis=1)
        args = (k, blocks, dgap, 2.0 / k, None, (0.0, 1.0), (0.0, 0.0))
        v, reason, fields = rate_truth_verdict(rate, *args, alpha=1e-3, reference="max-t", rng=truth_rng(7, "hard"))
        ref, problems = truth_verdict(*args, alpha=1e-3, reference="max-t", rng=truth_rng(7, "hard"))
        assert fields == ref and v == want and reason == "; ".join(problems)
        assert set(rate_truth_verdict(rate, *args, alpha=1e-3)[2]) == set(TRUTH_FIELDS)
    assert "curve" in reason
    with pytest.raises(ValueError, match="'rng' must be a numpy Generator"):
        rate_truth_verdict(rate, *args, alpha=1e-3, reference="max-t")
