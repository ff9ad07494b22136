"""Tests of the confirmatory C6 study ``dimension`` (studies/dimension.py, protocols/dimension.md)."""

from __future__ import annotations

import hashlib
import json
import math
import subprocess
from pathlib import Path

import numpy as np
import pytest

from simkit.embedding import LinearEmbedding
from simkit.runner import read_dataset, resolve_config, run_study
from studies.dimension import (ALPHA, B0, DELTA, FAMILIES, PROTOCOL_PATH, SCHEMA, STUDY, NonInferiority, _dims,
                               non_inferiority, protocol_attrs, verdicts)

ROOT = Path(__file__).resolve().parent.parent
DATASET = ROOT / "data" / "dimension.nc"
D = np.array([8, 16, 32, 64, 128, 256, 512, 1024], dtype=float)


# ----------------------------------------------------------------------------------------------
# the rule on synthetic inputs (negative and positive controls of the rule itself)

def _synthetic(growth_exponent: float, n_blocks: int = 32, sd: float = 0.3, seed: int = 0) -> np.ndarray:
    """Blocks of G = c d^beta times independent lognormal noise (sd of log G = ``sd``) at each d."""
    rng = np.random.default_rng(seed)
    base = 0.05 * (D / 8) ** growth_exponent
    return base * np.exp(sd * rng.standard_normal((n_blocks, D.size)) - sd ** 2 / 2)


@pytest.mark.statistical
def test_flat_gap_passes_non_inferiority():
    # false-failure rate: at b = 0 with this noise SE(b) ~ 0.015, t ~ -18; P(no rejection) < 1e-12
    res = non_inferiority(D, _synthetic(0.0))
    assert res.defined and res.reject and res.p < ALPHA
    assert abs(res.b) < 0.06 and res.se > 0


@pytest.mark.statistical
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
        _dims("8,9,16")


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
