"""Tests of the confirmatory C6 study ``dimension`` (studies/dimension.py, protocols/dimension.md)."""

from __future__ import annotations

import hashlib
import json
import math
import subprocess
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from scipy import stats

from simkit.embeddings.embedding import LinearEmbedding
from simkit.runner import read_dataset, resolve_config, run_study
from simkit.stats import trend
from simkit.stats.trend import NonInferiority
from studies.dimension import (ALPHA, B0, DELTA, FAMILIES, PROTOCOL_PATH, SCHEMA, SIGMA_B_PLANNED, STUDY,
                               _planned_false_fail, protocol_attrs, verdicts)

ROOT = Path(__file__).resolve().parents[2]
DATASET = ROOT / "data" / "dimension.nc"
D = np.array([8, 16, 32, 64, 128, 256, 512, 1024], dtype=float)


def non_inferiority(d, blocks):
    """The pre-registered rule: simkit.stats.trend.non_inferiority at the protocol's margin and level."""
    return trend.non_inferiority(d, blocks, delta=DELTA, alpha=ALPHA, levels_name="d")


# ----------------------------------------------------------------------------------------------
# the rule on synthetic inputs (negative and positive controls of the rule itself)

def _synthetic(growth_exponent: float, n_blocks: int = 32, sd: float = 0.3, seed: int = 0) -> np.ndarray:
    """Blocks of G = c d^beta times independent lognormal noise (sd of log G = ``sd``) at each d."""
    rng = np.random.default_rng(seed)
    base = 0.05 * (D / 8) ** growth_exponent
    return base * np.exp(sd * rng.standard_normal((n_blocks, D.size)) - sd ** 2 / 2)


# SD of the estimate b over 2000 other seeds (1000..2999) of _synthetic: 0.0123 (beta 0 and 0.5); of growth
# at beta = 0.5: 0.0120. The tolerances below are 4.9 and 4.2 of these SDs (two-sided normal tails 1e-6, 3.3e-5).
@pytest.mark.statistical
@pytest.mark.false_fail(1e-6, reason="|b| < 0.06 is 4.9 SD of b (normal tail 1e-6); no rejection at t ~ -18 is < 1e-12")
def test_flat_gap_passes_non_inferiority():
    # false-failure rate: at b = 0 with this noise SE(b) ~ 0.012, t ~ -18; P(no rejection) < 1e-12
    res = non_inferiority(D, _synthetic(0.0))
    assert res.defined and res.reject and res.p < ALPHA
    assert abs(res.b) < 0.06 and res.se > 0


@pytest.mark.statistical
@pytest.mark.false_fail(3.3e-5, reason="growth within 0.05 of sqrt(2) - 1 is 4.2 SD of the growth (normal tail 3.3e-5); a rejection at t ~ +16 is < 1e-12")
def test_sqrt_d_gap_fails_non_inferiority():
    # negative control of the rule: sqrt(d) is +41% per doubling; t ~ +16 against b0, P(rejection) < 1e-12
    res = non_inferiority(D, _synthetic(0.5))
    assert res.defined and not res.reject and res.p > 0.5
    assert res.growth == pytest.approx(math.sqrt(2) - 1, abs=0.05)


def test_margin_is_twenty_percent_per_doubling():
    assert DELTA == 0.20 and B0 == pytest.approx(math.log2(1.2)) and ALPHA == 0.01
    # a noiseless power law d^beta has b = beta exactly
    for beta in (0.0, 0.263, 0.5):
        curve = 0.05 * (D / 8) ** beta
        blocks = np.vstack([curve * f for f in (0.9, 1.0, 1.1, 1.05)])
        assert non_inferiority(D, blocks).b == pytest.approx(beta, abs=1e-12)


@pytest.mark.deterministic(reason="a constructed negative mean gap: undefined for any draw")
def test_undefined_when_a_mean_gap_is_not_positive():
    blocks = _synthetic(0.0, n_blocks=8)
    blocks[:, -1] = -0.01
    res = non_inferiority(D, blocks)
    assert not res.defined and not res.reject


def test_rule_arguments_are_validated():
    with pytest.raises(ValueError, match="'blocks' must have shape"):
        non_inferiority(D, np.ones((4, 3)))
    with pytest.raises(ValueError, match="'d' must hold at least two distinct"):
        non_inferiority([8, 8], np.ones((4, 2)))
    with pytest.raises(ValueError, match="'ds' must list at least three distinct even dimensions"):
        resolve_config(STUDY, {"ds": "8,9,16"})


def _ni(reject: bool, defined: bool = True) -> NonInferiority:
    return NonInferiority(0.0, 0.01, 0.0, 0.01, -20.0, 31, 1e-9 if reject else 0.5, reject, 32, defined)


def test_verdict_rule_of_the_protocol():
    (v, c), _ = verdicts(_ni(True), "", _ni(False), "")
    assert (v, c) == ("pass", "pass")
    (v, c), (_, why) = verdicts(_ni(True), "", _ni(True), "")  # a control that passes the rule
    assert c == "fail" and "inconclusive" in why
    (v, c), (why, _) = verdicts(_ni(False), "", _ni(False), "")
    assert v == "fail" and "not shown" in why
    (v, _), _ = verdicts(_ni(False, defined=False), "", _ni(False), "")
    assert v == "fail"
    (v, _), _ = verdicts(_ni(True), "boom", _ni(False), "")
    assert v == "error"


def test_linear_class_is_degenerate_in_d():
    # why the linear control needs tau_d: its scores depend on W only through W^T W (3 x 3)
    rng = np.random.default_rng(3)
    w = rng.standard_normal((64, 3))
    small = LinearEmbedding(np.linalg.cholesky(w.T @ w).T)
    x = rng.standard_normal((50, 3))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    big = LinearEmbedding(w)
    np.testing.assert_allclose(big(x) @ big(x).T, small(x) @ small(x).T, rtol=0, atol=1e-12)


# ----------------------------------------------------------------------------------------------
# the quick design

@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    cfg = resolve_config(STUDY, quick=True)
    res = run_study(STUDY, cfg, tmp_path_factory.mktemp("dimension") / "dim.nc", progress=False)
    assert res.completed and not res.errors
    return cfg, read_dataset(res.path)


@pytest.mark.deterministic(reason="the verdicts are only required to be one of pass, fail, error")
def test_quick_design_runs(quick):
    cfg, ds = quick
    assert ds.sizes["block"] == cfg["n_blocks"] == 3
    assert [str(f) for f in ds["family"].values] == ["fourier"] * 3 + ["linear"] * 3
    for name in ds.variables:
        for att in ("long_name", "units", "description"):
            assert ds[name].attrs.get(att) is not None, (name, att)
    assert set(SCHEMA) >= set(ds.data_vars) - {"cell_error", "cell_key"}
    for fam in FAMILIES:
        assert np.isfinite(ds[f"{fam}_b"].values.item())
    assert str(ds["verdict"].values.item()) in ("pass", "fail", "error")
    assert str(ds["control_verdict"].values.item()) in ("pass", "fail", "error")
    assert json.loads(ds.attrs["config"]) == cfg
    assert "quick" in ds.attrs["analysis"]
    rows = STUDY.claim_rows(ds)
    assert [r["claim"] for r in rows] == ["C6", "C6"]
    assert rows[0]["statistic"].startswith("pre-registered rule (protocols/dimension.md, sha256 ")
    assert [r["analysis"] for r in rows] == ["exploratory", "exploratory"]  # a quick design never confirms
    # linear control trains at tau sqrt(8/d)
    lin = ds["family"].values == "linear"
    np.testing.assert_allclose(ds["tau_train"].values[lin], 0.1 * np.sqrt(8 / ds["d"].values[lin]))


@pytest.mark.deterministic(reason="the stated rates are functions of the design (block count), not of the draw")
def test_stated_rates_are_false_failure_rates(quick):
    """The primary rule must reject H0 (growth >= delta) to pass, so ALPHA is its false-PASS rate; its stated
    false-failure rate is 1 - its planned power at zero growth (protocol section 5's sigma_b = 0.078 for the
    dataset's block count: tiny with the 32 registered blocks, large with the quick design's 3). The positive
    control must not reject: its false-failure rate is at most ALPHA when its growth is >= delta."""
    _, ds = quick
    rows = STUDY.claim_rows(ds)
    planned = lambda n: float(stats.nct.sf(stats.t.ppf(ALPHA, n - 1), n - 1, -B0 / (SIGMA_B_PLANNED / math.sqrt(n))))  # noqa: E731
    assert rows[0]["false_fail_rate"] == pytest.approx(planned(3), rel=1e-12) and 0.1 < rows[0]["false_fail_rate"] < 1
    assert "1 - planned power at zero growth" in rows[0]["statistic"] and "false-pass rate" in rows[0]["statistic"]
    assert rows[1]["false_fail_rate"] == ALPHA
    full = xr.Dataset({"fourier_ni_blocks": ((), 32.0)})
    assert _planned_false_fail(full) == pytest.approx(planned(32), rel=1e-12) and _planned_false_fail(full) < 1e-50
    assert np.isnan(_planned_false_fail(xr.Dataset()))


def test_quick_records_the_protocol(quick):
    _, ds = quick
    assert ds.attrs["protocol_path"] == PROTOCOL_PATH
    assert ds.attrs["protocol_sha256"] == hashlib.sha256((ROOT / PROTOCOL_PATH).read_bytes()).hexdigest()
    assert ds.attrs["protocol_commit"] == protocol_attrs()["protocol_commit"]


# ----------------------------------------------------------------------------------------------
# the committed confirmatory dataset

def _git(*args) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, timeout=30)


@pytest.mark.skipif(not DATASET.is_file(), reason="data/dimension.nc is absent (run `simkit run dimension`)")
def test_committed_dataset_matches_its_protocol():
    ds = read_dataset(DATASET)
    assert ds.attrs["protocol_path"] == PROTOCOL_PATH
    assert ds.attrs["protocol_sha256"] == hashlib.sha256((ROOT / PROTOCOL_PATH).read_bytes()).hexdigest()
    assert "confirmatory" in ds.attrs["analysis"] and "quick" not in ds.attrs["analysis"]
    protocol_commit = ds.attrs["protocol_commit"]
    data_commit = str(ds.attrs["git_commit"]).removesuffix("-dirty")
    if _git("cat-file", "-e", f"{data_commit}^{{commit}}").returncode != 0:
        pytest.skip(f"the dataset's git_commit {data_commit} is not in this clone")
    # the protocol was committed before the run: an ancestor of, and not equal to, the dataset's commit
    assert _git("merge-base", "--is-ancestor", protocol_commit, data_commit).returncode == 0
    assert protocol_commit != data_commit
    # and the protocol file has not been changed since
    assert _git("log", "-1", "--format=%H", "--", PROTOCOL_PATH).stdout.strip() == protocol_commit
