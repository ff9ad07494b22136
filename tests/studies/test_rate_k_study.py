"""CI statistical regression test of claim C1: the --quick design of the rate_k study.

The quick design (``resolve_config(STUDY, quick=True)``: settings uniform-d3, vmf-d8, mixture-d16;
k_max = 4096, 32 blocks of 256 anchors) runs once per session (~10-20 s on 2 cores) with the
study's default seed. In the default suite every component null test of the verdict has p >= 1e-5;
in the slow suite every setting must pass the study's own verdict (at ALPHA = 1e-3).

False-failure rate of the default suite's part: 15 component null tests (3 settings x slope,
c1, c2, curve, dgap) at 1e-5 each = 1.5e-4 (the rejection of slope = -1/2 fails by chance with
negligible probability: -1/2 lies 90-700 slope SEs from the estimates). Power: a true slope of
-1/2 (the O(1/sqrt k) rate of earlier analyses) is rejected with probability > 1 - 1e-3 per
setting (tests/stats/test_rate_analysis.py negative controls). With the quick design's slope SEs
(0.0056, 0.0017, 0.0007 for the three settings) a true slope differing from -1 by 5.3 SE (0.029,
0.0090, 0.0037) is detected with probability 0.5 at the 1e-5 floor (3.6 SE at the verdict's
ALPHA); a c1 differing from the exact one by 5.3 MCSE (1.1%, 2.2%, 1.1% of c1) likewise.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import stats

from simkit.runner import read_dataset, resolve_config, run_study
from _false_fail import BOOTSTRAP_RATE, BOOTSTRAP_TESTS, below_floor, null_pvalues
from studies.rate_k import ALPHA, STUDY

QUICK_SETTINGS = ["uniform-d3", "vmf-d8", "mixture-d16"]


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    cfg = resolve_config(STUDY, quick=True)
    assert cfg["settings"].split(",") == QUICK_SETTINGS and cfg["seed"] == STUDY.default_seed
    res = run_study(STUDY, cfg, tmp_path_factory.mktemp("rate_k") / "rate_k.nc", progress=False)
    assert res.completed and not res.errors
    return cfg, read_dataset(res.path)  # what CI keeps is the file: test the file


FLOOR = 1e-5  # the default suite's level for the component null tests (ALPHA is the study's)


@pytest.mark.false_fail(9 * FLOOR + 6 * BOOTSTRAP_RATE, reason="15 component null tests (Check.pvalues): 9 analytic at "
                        "p >= 1e-5 each, 6 bootstrap (curve, dgap) above their minimum p 1e-4 (probability about 1e-4 each); "
                        "rejecting -1/2 is a matter of precision (90-700 SE), not a false-failure rate")
@pytest.mark.statistical
def test_c1_null_pvalues_quick(quick):
    """The default suite's form of test_c1_rate_quick: the slope, c1, c2, curve and dgap tests of every
    setting have p >= 1e-5, -1/2 is rejected at ALPHA, the 95% interval has half-width <= 0.05 (module
    doc: power)."""
    _, ds = quick
    pv = null_pvalues(STUDY, ds)
    low = below_floor(pv, FLOOR, BOOTSTRAP_TESTS)
    assert len(pv) == 15 and low == {}, low
    assert np.all(ds["slope_p_half"].values < ALPHA), ds["slope_p_half"].values
    assert np.all((ds["slope_ci_high"].values - ds["slope_ci_low"].values) / 2 <= 0.05)


@pytest.mark.slow
@pytest.mark.false_fail(6.5e-3, reason=(
    "slow suite; per setting: slope interval at 1e-3 + |c1_z| <= 3.29 on t(31) (2.5e-3, stricter than the verdict's t"
    " value) + the verdict's c2, curve and dgap tests at 1e-3 (the docstring's 2e-3 predates the exact-"
    "curve tests)"))
@pytest.mark.statistical
@pytest.mark.parametrize("setting", QUICK_SETTINGS)
def test_c1_rate_quick(quick, setting):
    """Per setting: the level-(1 - 1e-3) slope interval contains -1 and excludes -1/2
    (p_half < 1e-3), the 95% interval has half-width <= 0.05, |c1_z| <= z_{1 - 1e-3/2} = 3.29,
    and the study's verdict is 'pass'. False-failure rate 2e-3 per setting (see module doc)."""
    _, ds = quick
    s = ds.sel(setting=setting)
    assert str(s["cell_error"].values) == ""
    lo, hi = float(s["slope_verdict_low"]), float(s["slope_verdict_high"])
    slope, se = float(s["slope"]), float(s["slope_se"])
    q = stats.t.ppf(1 - ALPHA / 2, ds.sizes["block"] - 1)
    assert (lo, hi) == pytest.approx((slope - q * se, slope + q * se), rel=1e-12)
    assert lo <= -1.0 <= hi, f"{setting}: slope {slope:.4f}, interval [{lo:.4f}, {hi:.4f}]"
    assert not (lo <= -0.5 <= hi)
    assert float(s["slope_p_half"]) < ALPHA
    assert (float(s["slope_ci_high"]) - float(s["slope_ci_low"])) / 2 <= 0.05
    assert abs(float(s["c1_z"])) <= stats.norm.isf(ALPHA / 2)
    assert str(s["verdict"].values) == "pass", str(s["verdict_reason"].values)
    assert str(s["verdict_reason"].values) == ""


@pytest.mark.deterministic(reason="exact constants and structural MCSE facts (0 where exact, > 0 where Monte Carlo)")
def test_quick_design_and_exact_values(quick):
    cfg, ds = quick
    assert ds["setting"].values.tolist() == QUICK_SETTINGS
    assert ds["k"].values.tolist() == [2**i for i in range(13)]
    assert ds.sizes["block"] == cfg["n_blocks"] == 32
    assert ds["dim"].values.tolist() == [3, 8, 16]
    assert ds["pi"].values.tolist() == ["uniform", "vmf", "mixture"]
    # docs/theory.md section 5 anchors for uniform-d3 (uniform pi, kappa_M = 10, tau = 0.1)
    u = ds.sel(setting="uniform-d3")
    assert float(u["c1_exact"]) == pytest.approx(5.5, abs=1e-6)
    assert float(u["ce_exact"]) == pytest.approx(-1.995732, abs=5e-7)
    assert float(u["c1_exact_mcse"]) == 0.0
    # the exact curve for every setting (simkit.exact.curve): exact where the MCSE is 0; for uniform pi it
    # equals the older closed form of simkit.exact.gap_exact (an independent implementation)
    assert np.all(np.isfinite(ds["gap_exact"].values))
    assert np.all(ds.sel(setting=["uniform-d3", "vmf-d8"])["gap_exact_mcse"].values == 0.0)
    assert np.all(ds.sel(setting="mixture-d16")["gap_exact_mcse"].values > 0.0)
    from simkit import VMFKernel, exact
    closed = exact.gap_exact(VMFKernel(10.0), 3, 0.1, ds["k"].values)
    np.testing.assert_allclose(u["gap_exact"].values, closed, rtol=1e-9)
    assert np.all(np.isfinite(ds["c2_exact"].values)) and float(u["c2_exact"]) == pytest.approx(
        100 / 36 - 5 - 1 / 12, abs=1e-6)  # kappa^2/36 - kappa/2 - 1/12 + O(e^{-2 kappa}), docs/theory.md §8
    assert np.all(ds["k_min"].values == 256)


REQUIRED_VARS = {
    "gap": ("setting", "k"), "gap_mcse": ("setting", "k"),
    "slope": ("setting",), "slope_ci_low": ("setting",), "slope_ci_high": ("setting",),
    "slope_p_half": ("setting",), "c1_exact": ("setting",), "c1_exact_mcse": ("setting",),
    "c1_estimate": ("setting",), "c1_estimate_mcse": ("setting",),
}
REQUIRED_COORDS = ("dim", "pi", "kappa_m", "tau")
REQUIRED_ATTRS = ("title", "study", "claim", "simkit_version", "git_commit", "seed", "created",
                  "package_versions", "wall_time_s", "config")


def test_dataset_schema(quick):
    cfg, ds = quick
    assert {"setting", "k"} <= set(ds.dims)
    for name, dims in REQUIRED_VARS.items():
        assert name in ds.data_vars, name
        assert ds[name].dims == dims, (name, ds[name].dims)
    for name in REQUIRED_COORDS:
        assert name in ds.coords and ds[name].dims == ("setting",), name
    assert "k" in ds.coords and ds["k"].dims == ("k",)


def test_every_variable_has_cf_attrs(quick):
    _, ds = quick
    missing = {name: [a for a in ("long_name", "units", "description") if not ds[name].attrs.get(a)]
               for name in ds.data_vars}
    assert not {k: v for k, v in missing.items() if v}
    assert ds["gap"].attrs["units"] == "1" and "nats" in ds["gap"].attrs["long_name"]  # never "nat" (a pressure)
    assert ds["slope"].attrs["units"] == "1"


def test_required_coordinates_have_cf_attrs(quick):
    _, ds = quick
    for name in (*REQUIRED_COORDS, "k", "kappa_pi"):
        for a in ("long_name", "units", "description"):
            assert ds[name].attrs.get(a), (name, a)


def test_every_coordinate_has_cf_attrs(quick):
    _, ds = quick
    for name in ds.coords:
        for a in ("long_name", "units", "description"):
            assert ds[name].attrs.get(a), (name, a)


def test_global_attrs(quick):
    cfg, ds = quick
    for name in REQUIRED_ATTRS:
        assert name in ds.attrs and ds.attrs[name] not in ("", None), name
    assert ds.attrs["study"] == "rate_k" and ds.attrs["claim"] == "C1"
    assert ds.attrs["seed"] == cfg["seed"]
    assert json.loads(ds.attrs["config"]) == cfg
    versions = json.loads(ds.attrs["package_versions"])
    for pkg in ("python", "simkit", "numpy", "scipy", "numba", "statsmodels", "xarray"):
        assert versions.get(pkg), pkg
    assert versions["simkit"] == ds.attrs["simkit_version"]
    assert float(ds.attrs["wall_time_s"]) > 0
    assert ds.attrs["n_errors"] == 0 and json.loads(ds.attrs["errors"]) == []
    assert np.datetime64(ds.attrs["created"].replace("+00:00", ""))  # ISO 8601
