"""The README's claims-at-a-glance table is the one generated from data/claims.nc."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from simkit.claims.table import END, MAX_CELL, START, claims_table, main, readme_table
from simkit.claims.validate import combine_checks
from simkit.runner import read_dataset

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.deterministic(reason="text generated from committed data; no random draw")


def test_readme_table_equals_the_generated_one():
    ds = read_dataset(ROOT / "data" / "claims.nc")
    assert readme_table((ROOT / "README.md").read_text()) == claims_table(ds)


def test_every_row_is_one_line_with_short_cells():
    ds = read_dataset(ROOT / "data" / "claims.nc")
    lines = claims_table(ds).splitlines()
    assert len(lines) == 2 + ds.sizes["claim"]
    for line in lines[2:]:
        cells = [c.strip() for c in line.strip("|").replace("\\|", "¦").split("|")]
        assert len(cells) == 6 and all(len(c) <= MAX_CELL for c in cells), line


def test_positive_control_a_changed_verdict_changes_the_table():
    """The comparison can fail: a verdict or a statistic changed in the dataset shows in the table."""
    base = {"study": "demo", "statistic": "slope, 3 settings", "estimate": -1.0, "estimate_mcse": 0.01,
            "false_fail_rate": 0.01, "detail": "", "analysis": "exploratory", "claim": "C1"}
    a = claims_table(combine_checks([{**base, "verdict": "pass"}]))
    b = claims_table(combine_checks([{**base, "verdict": "fail"}]))
    c = claims_table(combine_checks([{**base, "verdict": "pass", "false_fail_rate": 0.98}]))
    assert a != b and "**fail**" in b and "**pass**" in a
    assert "**not assessed**" in c and "not assessed (false-fail rate 0.98 here)" in c
    readme = f"intro\n{START}\n{a}\n{END}\nrest"
    assert readme_table(readme) == a and readme_table(readme) != b
    with pytest.raises(ValueError, match="markers"):
        readme_table("no markers")


def test_a_row_calibrated_at_its_design_quotes_the_calibrated_rate_and_one_elsewhere_does_not():
    base = {"study": "demo", "statistic": "slope, 3 settings", "estimate": -1.0, "estimate_mcse": 0.01,
            "false_fail_rate": 0.01, "detail": "", "analysis": "exploratory", "claim": "C1", "verdict": "pass",
            "calibration_rejects": np.array([0.0] * 48 + [1.0, np.nan])}
    here = claims_table(combine_checks([base]))
    # 1 of the 49 decided seeds failed: 0.0204, Clopper-Pearson 95% [0.000517, 0.109]
    assert "| 0.01; calibrated 0.02 [0.00052, 0.11] |" in here
    other = claims_table(combine_checks([{**base, "calibration_other_design": "quick"}]))
    assert "| 0.01 |" in other and "calibrated" not in other


def test_cli_prints_the_table_and_refuses_a_bad_path(capsys, tmp_path):
    assert main([str(ROOT / "data" / "claims.nc")]) == 0
    assert capsys.readouterr().out.startswith("| claim |")
    assert main([str(tmp_path / "missing.nc")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("simkit: error: cannot read")
