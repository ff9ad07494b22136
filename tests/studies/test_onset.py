"""Tests of the onset study: its grid and answer rule, the digits block estimator against a second
implementation written here, the curve check's verdicts on constructed datasets (a positive control),
and (slow) the quick design end to end: the onsets recomputed by brute force from the dataset's exact
ratios, the schema's CF attributes, the report."""

from __future__ import annotations

import math

import numpy as np
import pytest
import xarray as xr

from simkit.runner import read_dataset, resolve_config, run_study
from studies import onset
from studies.onset import ALPHA, STUDY, answer, exact_grid


def test_exact_grid_has_the_powers_of_two_once():
    ks = exact_grid(48)
    assert np.all(np.diff(ks) > 0) and ks[0] == 1 and ks[-1] == 2**24
    assert set(2**j for j in range(25)) <= set(ks.tolist())
    assert len(ks) == 48  # j = 0 and j = 1 both round to 1


def test_answer_rule():
    assert answer(["inside", "inside"]) == "yes"
    assert answer(["inside", "outside", "undetermined"]) == "no"
    assert answer(["inside", "undetermined"]) == "undetermined"
    assert answer([]) == "undetermined"


@pytest.mark.deterministic("the same draws evaluated twice; the two implementations agree to rounding")
def test_digits_block_matches_a_second_implementation():
    tau, grid, n = 0.05, np.array([1, 2, 4, 8, 16]), 6
    got = STUDY._digits_block(tau, grid, n, np.random.default_rng(11))
    # the same draws, in the same order, evaluated anchor by anchor with plain sums
    unit, labels = onset._digits()
    rng = np.random.default_rng(11)
    a = rng.integers(0, unit.shape[0], n)
    u = rng.random(n)
    neg = rng.integers(0, unit.shape[0], size=(n, 1, 16))
    vals = np.zeros((n, grid.size))
    for i in range(n):
        s_all = unit[a[i]] @ unit.T / tau
        z = np.mean(np.exp(s_all))
        members = np.flatnonzero(labels == labels[a[i]])
        pos = members[int(u[i] * members.size)]
        for j, k in enumerate(grid):
            sk = np.sum(np.exp(s_all[neg[i, 0, :k]]))
            vals[i, j] = math.log((math.exp(s_all[pos]) + sk) / (k * z)) - (sk / (k * z) - 1.0)
    np.testing.assert_allclose(got, vals.mean(axis=0), rtol=1e-10, atol=1e-12)


def _fake(curve_p):
    n = len(curve_p)
    return xr.Dataset({
        "setting": ("setting", [f"s{i}" for i in range(n)]),
        "curve_p": ("setting", np.asarray(curve_p, float)),
        "curve_max_t": ("setting", np.linspace(1, 2, n)),
        "verdict": ("setting", ["pass" if p >= ALPHA else "fail" for p in curve_p]),
        **{v: ("setting", np.full(n, 100.0)) for v in ("onset_k", "onset_k_low", "onset_k_high", "expansion_scale")},
        "scale_predicts": ("setting", ["inside"] * n),
    })


def test_curve_check_verdicts():
    """Positive control: a dataset with one curve p below alpha fails the check."""
    check = STUDY.checks[0]
    assert check.evaluate(_fake([0.5, 0.02]))["verdict"] == "pass"
    res = check.evaluate(_fake([0.5, ALPHA / 2]))
    assert res["verdict"] == "fail" and "yes" in res["detail"]
    assert check.false_fail_rate(_fake([0.5, 0.5])) == pytest.approx(1 - (1 - ALPHA) ** 2)


# ----------------------------------------------------------------------------------------------
# the quick design end to end (slow: numba compilation and the exact curves, ~1-4 min)

@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    cfg = resolve_config(STUDY, quick=True)
    res = run_study(STUDY, cfg, tmp_path_factory.mktemp("onset") / "onset.nc", progress=False)
    assert res.completed and not res.errors
    return cfg, read_dataset(res.path)


def _brute_onset(ks, ratio, tol):
    for i in range(len(ks)):
        if all(abs(r - 1.0) <= tol for r in ratio[i:]):
            return ks[i]
    return math.inf


@pytest.mark.slow
def test_quick_onsets_schema_and_report(quick, tmp_path):
    cf_units = pytest.importorskip("cf_units")
    cfg, ds = quick
    ke = ds["k_exact"].values.astype(float)
    for i in range(ds.sizes["setting"]):
        c1, c2 = float(ds["c1"].values[i]), float(ds["c2"].values[i])
        g = ds["gap_exact"].values[i]
        assert ds["onset_k"].values[i] == _brute_onset(ke, ke * g / c1, 0.1)
        assert ds["onset_k_second_order"].values[i] == _brute_onset(ke, g / (c1 / ke + c2 / ke**2), 0.1)
        # exact curves here: the interval is the point
        assert ds["onset_k_low"].values[i] == ds["onset_k_high"].values[i] == ds["onset_k"].values[i]
    for name in ("expansion_scale", "onset_k", "onset_k_second_order", "curve_p"):
        assert ds[name].dims == ("setting",)
    for name in list(ds.data_vars) + list(ds.coords):
        attrs = ds[name].attrs
        assert attrs.get("long_name") and attrs.get("description"), name
        cf_units.Unit(attrs["units"])
    assert ds.attrs["Conventions"] == "CF-1.11" and ds.attrs["protocol_path"] == "protocols/onset.md"
    assert STUDY.report(ds, tmp_path / "onset.pdf") >= 3


@pytest.mark.slow
@pytest.mark.statistical
@pytest.mark.false_fail(ALPHA, reason="the curve check: one max-t test at ALPHA (digits, the quick design's only "
                        "setting; 16 blocks of 64 anchors at vmf-d8-t0.03 over-rejected in calibration, so not here)")
def test_quick_curve_tests_pass(quick):
    _, ds = quick
    assert list(ds["verdict"].values) == ["pass"], ds["verdict_reason"].values
