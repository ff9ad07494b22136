"""The schema builders (simkit.runner.schema) and the verdict assembly (simkit.runner.verdicts).

Expected values are written out by hand; no randomness.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import xarray as xr

from simkit.runner import (TASK_FAILED, Check, Study, Var, cell_detail, cell_errors, check_result, claim_summary,
                           dataset_config, estimate_table, estimate_vars, not_finite, outcome, verdict, verdict_vars)


def test_estimate_vars_value_mcse_raw():
    out = estimate_vars("gap", ("setting", "k"), "finite-k gap", "block mean of G_k", nats=True, raw=True)
    assert out == {
        "gap": Var(("setting", "k"), "finite-k gap, in nats", "1", "block mean of G_k"),
        "gap_mcse": Var(("setting", "k"), "MCSE of gap, in nats", "1", "sd over blocks / sqrt(n_blocks)"),
        "raw_gap": Var(("setting", "block", "k"), "per-block finite-k gap, in nats", "1", "block mean of G_k"),
    }


def test_estimate_vars_options():
    out = estimate_vars("kl", ("setting", "tau"), "KL", "exact", units="1", mcse=None)
    assert list(out) == ["kl"] and out["kl"].long_name == "KL"
    out = estimate_vars("gap", ("setting", "tau", "k"), "gap", "d", raw=("setting", "tau", "block", "k"),
                        raw_name="gap_cv", raw_description="raw", mcse="jackknife")
    assert out["raw_gap_cv"].dims == ("setting", "tau", "block", "k") and out["raw_gap_cv"].description == "raw"
    assert out["gap_mcse"].description == "jackknife" and "raw_gap" not in out
    with pytest.raises(ValueError, match="nano-technical"):  # Var's own checks still apply
        estimate_vars("x", ("s",), "x", "d", units="nat")


def test_verdict_vars():
    out = verdict_vars("verdict_ce", ("setting",), "verdict of check ce", "pass when |z| <= z_ce",
                       reason_long_name="why check ce failed")
    assert out == {"verdict_ce": Var(("setting",), "verdict of check ce", "1", "pass when |z| <= z_ce"),
                   "verdict_ce_reason": Var(("setting",), "why check ce failed", "1", "empty when it passed")}
    assert list(verdict_vars("v", (), "v", "r", reason_name="why")) == ["v", "why"]


def test_verdict_rules():
    assert verdict([]) == ("pass", "")
    assert verdict(["", None]) == ("pass", "")  # empty phrases are no problems
    assert verdict(["slope too steep", "no fit"]) == ("fail", "slope too steep; no fit")
    # a task error wins over problems and passes, its note first
    assert verdict([], ["boom"]) == ("error", TASK_FAILED)
    assert verdict(["no fit"], ["a", "b"], error_note="{n} cell(s) with task errors") == (
        "error", "2 cell(s) with task errors; no fit")
    assert verdict([], ["x=1: boom", "x=2: bang"], error_note="task errors: {errors}") == (
        "error", "task errors: x=1: boom; x=2: bang")
    assert verdict(["p"], ["", ""]) == ("fail", "p")  # empty error strings are no errors


def test_cell_errors_and_not_finite():
    ds = xr.Dataset({"cell_error": ("cell", np.array(["", "ZeroDivisionError", "", "oops"]))})
    assert cell_errors(ds) == ["ZeroDivisionError", "oops"]
    assert cell_errors(ds, [0, 1, 2]) == ["ZeroDivisionError"]
    assert cell_errors(ds, labels=["a", "b", "c", "d"]) == ["b: ZeroDivisionError", "d: oops"]
    assert cell_errors(xr.Dataset()) == []
    assert not_finite([1.0, 2.0], "missing") == []
    assert not_finite([1.0, np.nan], "missing") == ["missing"]
    assert not_finite([np.inf], "missing") == ["missing"]
    assert not_finite([], "missing") == ["missing"]


def test_check_result_and_details():
    assert outcome("pass") == " -> pass" and outcome("fail", "why") == " -> fail (why)"
    assert check_result(1.5, 0.25, "fail", "slope 1.5", "too steep") == {
        "estimate": 1.5, "estimate_mcse": 0.25, "verdict": "fail", "detail": "slope 1.5 -> fail (too steep)"}
    assert cell_detail(["a", "b"], ["z 1", "z 9"], ["pass", "fail"], ["", "|z| > 3"]) == \
        "a: z 1 -> pass; b: z 9 -> fail (|z| > 3)"
    assert cell_detail(["a"], ["x"], ["pass"]) == "a: x -> pass"


def test_default_summary_is_the_claim_rows():
    class Toy(Study):
        name, claim = "toy", "C0"
        checks = (Check("C0", "mean = 0", lambda ds: check_result(0.1, 0.05, "pass", "mean 0.1"), 1e-3),
                  Check("C1", "sd = 1", lambda ds: check_result(2.0, 0.1, "fail", "sd 2", "too wide"), 1e-3))
    ds = xr.Dataset(attrs={"config": "{}"})
    text = Toy().summary_text(ds)
    assert text == "C0: pass -- mean 0.1 -> pass\nC1: fail -- sd 2 -> fail (too wide)"
    assert claim_summary([]) == ""


def test_estimate_table():
    ds = xr.Dataset({"gap": (("setting", "k"), [[1.0, 0.5], [2.0, 0.25]]),
                     "gap_mcse": (("setting", "k"), [[0.1, 0.05], [0.2, 0.025]]),
                     "slope": ("setting", [-1.0, -0.5])}, coords={"setting": ["a", "bb"], "k": [1, 2]})
    text = estimate_table(ds, "setting", {"gap": "gap(k_max)", "slope": "slope"}, select={"k": -1})
    lines = text.split("\n")
    assert lines[0].split() == ["setting", "gap(k_max)", "slope"]
    assert lines[1].split() == ["a", "0.5", "±", "0.05", "-1"]
    assert lines[2].split() == ["bb", "0.25", "±", "0.025", "-0.5"]


def test_dataset_config():
    assert dataset_config(xr.Dataset(attrs={"config": json.dumps({"k_max": 64})})) == {"k_max": 64}
    assert dataset_config(xr.Dataset()) == {}
    assert dataset_config(xr.Dataset(attrs={"config": "not json"})) == {}
    assert dataset_config(xr.Dataset(attrs={"config": "[1, 2]"})) == {}


def test_estimate_table_text_and_se_columns():
    ds = xr.Dataset({"slope": ("setting", [-1.0]), "slope_se": ("setting", [0.125]),
                     "verdict": ("setting", np.array(["pass"]))}, coords={"setting": ["a"]})
    lines = estimate_table(ds, "setting", {"slope": "slope", "verdict": "verdict"}).split("\n")
    assert lines[1].split() == ["a", "-1", "±", "0.12", "pass"]


def test_block_means():
    from simkit.runner import block_means
    raw = xr.Dataset({"raw_gap_cv": (("setting", "block"), [[1.0, 3.0], [2.0, np.nan]]),
                      "raw_loss": (("setting", "block"), [[0.0, 2.0], [1.0, 1.0]])})
    out = block_means(raw, {"gap": "gap_cv"})
    np.testing.assert_array_equal(out["gap"], [2.0, 2.0])
    np.testing.assert_allclose(out["gap_mcse"][0], 1.0)  # sd sqrt(2) over sqrt(2) blocks
    assert np.isnan(out["gap_mcse"][1])  # one finite block: no MCSE
    assert sorted(block_means(raw, ["loss"])) == ["loss", "loss_mcse"]


def test_cell_grid_scalar_sha_and_one_pvalue():
    from simkit.runner import cell_grid, one_pvalue, recorded_sha, scalar
    raw = xr.Dataset({"x": (("cell", "k"), np.arange(12.0).reshape(6, 2))})
    grid = cell_grid(raw, (2, 3), {"prep_c": (4,)})
    np.testing.assert_array_equal(grid("x")[1, 2], [10.0, 11.0])  # cell 5 = row 1, column 2 (row-major)
    assert grid("prep_c").shape == (2, 3, 4) and np.all(np.isnan(grid("prep_c")))  # absent: NaN of its shape
    ds = xr.Dataset({"n_slope_p": ((), 0.25)}, attrs={"protocol_sha256": "0123456789abcdef0123"})
    assert scalar(ds, "n_slope_p") == 0.25 and np.isnan(scalar(ds, "missing"))
    assert recorded_sha(ds) == "0123456789abcdef" and recorded_sha(ds, None) == "0123456789abcdef0123"
    assert recorded_sha(xr.Dataset()) == "?"
    assert one_pvalue("n_slope_p", 0.01, "bound")(ds) == {"slope": (0.25, 0.01, "bound")}


def test_settings_check_combines_cells_and_reports_the_worst():
    from simkit.runner import settings_check
    ds = xr.Dataset({"slope": ("setting", [-1.0, -0.6, -0.9]), "slope_se": ("setting", [0.1, 0.1, 0.2]),
                     "verdict": ("setting", ["pass", "fail", "pass"]), "why": ("setting", ["", "too flat", ""])},
                    coords={"setting": ["a", "b", "c"]})
    out = settings_check(ds, [0, 1], "slope", 1, "verdict", lambda i: f"s {ds['slope'].values[i]:.1f}", "why")
    assert out == {"estimate": -0.6, "estimate_mcse": 0.1, "verdict": "fail",
                   "detail": "a: s -1.0 -> pass; b: s -0.6 -> fail (too flat)"}
    empty = settings_check(ds, [], "slope", 0, "verdict", str, empty="not assessed")
    assert empty["verdict"] == "not assessed" and np.isnan(empty["estimate"])
