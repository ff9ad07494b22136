"""Claim C3, complexity term: the Rademacher study (studies/rademacher.py).

The loss class and the supremum are tested in tests/estimators/test_rademacher_sup.py.

* The study: the quick design passes (InfoNCE not flagged, control flagged, n-exponents); resume
  equals an uninterrupted run; deterministic edits of real blocks (InfoNCE curve tilted like sqrt k;
  control replaced by a flat curve) make the verdict fail; the report renders; invalid configurations
  are rejected with messages naming the parameter.

Statistical budget of the default suite's part (seed: the study's default, fixed before the quick
design was first run; never re-seeded): the quick design's InfoNCE k-test and two n-tests at
p >= 1e-5 each, 3e-5, and the MCSE-ratio allowance 1e-3. The tests at the study's level 1e-3 (3e-3)
are in the slow suite. Power is stated in test_c3_quick_checks and test_c3_quick_null_pvalues.
"""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from scipy import stats

from simkit import Uniform, VMFKernel
from simkit.embeddings.embedding import LinearEmbedding, TwoLayerEmbedding
from simkit.runner import read_dataset, resolve_config, run_study
from simkit.embeddings.training import EmpiricalRisk, TrainingSample
from studies.rademacher import ALPHA, SCHEMA, STUDY

from resume_check import assert_resume_identical

FLOOR = 1e-5  # the default suite's level for the study's null tests (ALPHA is the study's)

statistical = pytest.mark.statistical


def _sample(n, k, p=3, seed=0):
    return TrainingSample.draw(Uniform(p), VMFKernel(5.0), n, k, rng=seed)


def test_invalid_configuration():
    with pytest.raises(ValueError, match="'k_fit_min' must be <= k_max / 8"):
        resolve_config(STUDY, {"k_max": 64, "k_fit_min": 16})
    with pytest.raises(ValueError, match="'n_grid' must list at least three distinct integers >= 4"):
        resolve_config(STUDY, {"n_grid": "16,32"})
    with pytest.raises(ValueError, match="'k_for_n' must be <= k_max"):
        resolve_config(STUDY, {"k_max": 256, "k_for_n": "4,512"})
    with pytest.raises(ValueError, match="'k_for_n' must list distinct powers of two"):
        resolve_config(STUDY, {"k_for_n": "3"})
    with pytest.raises(ValueError, match="'n_grid' must be comma-separated"):
        resolve_config(STUDY, {"n_grid": "a,b,c"})
    with pytest.raises(ValueError, match="'radius' must be <= 0.33"):
        resolve_config(STUDY, {"radius": 0.5})


# ----------------------------------------------------------------------------------------------
# the study

TINY = {"k_max": 16, "k_fit_min": 2, "n_main": 8, "n_grid": "4,8,16", "k_for_n": "2", "restarts": 2,
        "n_blocks": 4}


def test_resume_after_interruption(tmp_path, capsys):
    """Stopped after 3 tasks, then completed: identical to an uninterrupted run (runner.results_identical)."""
    cfg = resolve_config(STUDY, TINY, seed=20261402)
    assert_resume_identical(STUDY, cfg, tmp_path, stop_after=3, capsys=capsys)


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    """The --quick design (k_max 256, n_main 32, n-curve 16, 32, 64 at k = 4, 64; 3 starts; 12
    samples) with the study's default seed."""
    cfg = resolve_config(STUDY, quick=True)
    assert cfg["seed"] == STUDY.default_seed and cfg["k_max"] == 256 and cfg["n_blocks"] == 12
    res = run_study(STUDY, cfg, tmp_path_factory.mktemp("rademacher") / "rademacher.nc", progress=False)
    assert res.completed and not res.errors
    return cfg, read_dataset(res.path)


@statistical
@pytest.mark.false_fail(3 * FLOOR, reason="three one-sided tests that must not reject, at p >= 1e-5 each; the control's "
                        "detection (slope 1.00 +- 0.008 against > 0.7 and p < ALPHA) misses with negligible probability")
def test_c3_quick_null_pvalues(quick):
    """The default suite's form of test_c3_quick_checks: the InfoNCE k-exponent and both n-exponents at one-sided
    p >= 1e-5, the control flagged at ALPHA. Power: an InfoNCE k-exponent t_{1 - 1e-5, slope_df} SE above 0 is
    detected with probability 1/2 (t_{1 - 1e-3, slope_df} SE at the study's level, test_c3_quick_checks)."""
    _, ds = quick
    i, c = list(ds["loss"].values).index("infonce"), list(ds["loss"].values).index("pairsum")
    assert float(ds["slope_p"][i]) >= FLOOR, float(ds["slope"][i])
    assert np.all(ds["n_slope_p"].values[i] >= FLOOR), ds["n_slope"].values[i]
    assert float(ds["slope_p"][c]) < ALPHA and float(ds["slope"][c]) > 0.7
    assert float(ds["slope_mde"][i]) <= 0.25


@pytest.mark.slow
@statistical
@pytest.mark.false_fail(1 - (1 - ALPHA) ** 3, reason="slow suite: the claim row's rate: three one-sided tests at ALPHA that must not reject; the control's detection (slope 1.00 +- 0.008 against > 0.7 and p < ALPHA) misses with negligible probability")
def test_c3_quick_checks(quick):
    """The one-sided test of k-exponent <= 0 does not reject for InfoNCE at level 1e-3 (false-failure
    rate 1e-3 at the boundary exponent 0) and rejects for the control; neither n-exponent is
    significantly above -1/2 (1e-3 each). Power: the quick design detects an InfoNCE exponent of
    0.087 with probability 0.9 with the default seed (slope_mde, the library's detectable effect,
    asserted <= 0.25 below; log k growth has exponent
    ~0.18 at k = 256); the control's exponent ~1 lies > 20 SEs above 0, so its check fails with
    negligible probability."""
    _, ds = quick
    i, c = list(ds["loss"].values).index("infonce"), list(ds["loss"].values).index("pairsum")
    assert float(ds["slope_p"][i]) >= ALPHA, float(ds["slope"][i])
    assert float(ds["slope_p"][c]) < ALPHA
    assert float(ds["slope"][c]) > 0.7
    assert float(ds["slope_mde"][i]) <= 0.25
    assert np.all(ds["n_slope_p"].values[i] >= ALPHA), ds["n_slope"].values[i]
    assert str(ds["verdict"].values) == "pass", str(ds["verdict_reason"].values)
    rows = STUDY.claim_rows(ds)
    assert len(rows) == 1 and rows[0]["claim"] == "C3" and rows[0]["verdict"] == "pass"
    assert rows[0]["false_fail_rate"] == pytest.approx(1 - (1 - ALPHA) ** 3)
    assert "lower bound" in rows[0]["statistic"]


@pytest.mark.false_fail(1e-3, reason="allowance, not computed exactly: the centred MCSE is below the uncentred one at every k >= 4, smallest ratio 1.9 in the quick run")
def test_quick_dataset_values_and_schema(quick):
    cfg, ds = quick
    assert ds["loss"].values.tolist() == ["infonce", "pairsum"]
    assert ds["k"].values.tolist() == [2**i for i in range(9)]
    assert ds["restart"].values.tolist() == [1, 2, 3]
    assert ds["complexity"].dims == ("loss", "k")
    # best of r is non-decreasing in r, and the centred estimate is >= 0 (first start theta_0)
    assert np.all(np.diff(ds["complexity_by_restart"].values, axis=-1) >= 0)
    assert np.all(ds["raw_excess"].values >= 0)
    # centring reduces the MCSE at every k >= 4 (the loss level's noise grows with k)
    big = ds["k"].values >= 4
    assert np.all(ds["complexity_uncentred_mcse"].values[:, big] > ds["complexity_mcse"].values[:, big])
    # the control has no n-curve
    assert np.all(np.isnan(ds["complexity_n"].values[1]))
    assert np.all(np.isfinite(ds["complexity_n"].values[0]))
    for name in list(ds.data_vars) + list(ds.coords):
        for a in ("long_name", "units", "description"):
            assert ds[name].attrs.get(a) not in (None, ""), (name, a)
    # every variable of the old summarise is still written, with its dims; nats are dimensionless
    for name, var in SCHEMA.items():
        assert name in ds.variables and ds[name].dims == var.dims, name
        assert ds[name].attrs["units"] == "1", name
    for name in ("complexity", "complexity_mcse", "raw_excess", "restart_shortfall"):
        assert "nats" in ds[name].attrs["long_name"], name
    assert ds.attrs["study"] == "rademacher" and ds.attrs["claim"] == "C3"
    assert json.loads(ds.attrs["config"]) == cfg


@pytest.mark.false_fail(1e-12, reason="allowance, not computed exactly: sqrt(k) puts the InfoNCE slope ~30 SE above 0 (detected); the control copy's reason follows the recorded InfoNCE p-value (an identity)")
def test_negative_controls_make_the_verdict_fail(quick):
    """Deterministic edits of the real blocks: the InfoNCE curve multiplied by sqrt(k) (growth like
    earlier bounds) is flagged; the control replaced by the InfoNCE curve is not flagged, which
    fails the study for lack of power."""
    cfg, ds = quick
    keep = [v for v in ds.data_vars if v.startswith("raw_") or v in ("cell_error", "cell_key")]
    raw = ds[keep].copy()
    tilt = np.sqrt(ds["k"].values)[None, None, None, :, None]
    ex = raw["raw_excess"].values.copy()
    ex[0] = ex[0] * tilt[0]
    raw["raw_excess"] = (raw["raw_excess"].dims, ex)
    bad = STUDY.summarise(raw, cfg)
    assert set(bad) <= set(SCHEMA)
    assert str(bad["verdict"]) == "fail"
    assert "infonce: growth in k detected" in str(bad["verdict_reason"])
    assert float(bad["slope"][0]) == pytest.approx(float(ds["slope"][0]) + 0.5, abs=1e-9)
    raw2 = ds[keep].copy()
    ex2 = raw2["raw_excess"].values.copy()
    ex2[1] = ex2[0]
    raw2["raw_excess"] = (raw2["raw_excess"].dims, ex2)
    bad2 = STUDY.summarise(raw2, cfg)
    assert str(bad2["verdict"]) == "fail"
    # a copy of the InfoNCE blocks is flagged exactly when InfoNCE's own k-test rejects (its value at ALPHA:
    # test_c3_quick_checks, slow suite); either way the study fails
    not_flagged = float(ds["slope_p"][0]) >= ALPHA
    assert ("negative control not flagged" in str(bad2["verdict_reason"])) == not_flagged
    # the untouched blocks reproduce the stored summaries exactly
    same = STUDY.summarise(ds[keep].copy(), cfg)
    for name, value in same.items():
        np.testing.assert_array_equal(np.asarray(value), ds[name].values, err_msg=name)


@pytest.mark.deterministic(reason="formula identities on the dataset's own numbers (rtol 1e-12)")
def test_one_sided_p_value_is_student_t(quick):
    _, ds = quick
    df = ds.sizes["block"] - 1
    assert ds["slope_df"].values.tolist() == [df, df]
    np.testing.assert_allclose(ds["slope_p"], stats.t.sf(ds["slope"] / ds["slope_se"], df), rtol=1e-12)
    np.testing.assert_allclose(ds["slope_upper"], ds["slope"] + stats.t.isf(ALPHA, df) * ds["slope_se"], rtol=1e-12)


def test_report_from_quick_dataset(quick, tmp_path):
    _, ds = quick
    pages = STUDY.report(ds, tmp_path / "c3.pdf")
    assert pages >= 5 and (tmp_path / "c3.pdf").stat().st_size > 10_000
    with pytest.raises(ValueError, match="must be a rademacher dataset"):
        STUDY.report(ds.drop_vars("complexity"), tmp_path / "bad.pdf")
    assert not (tmp_path / "bad.pdf").exists()
