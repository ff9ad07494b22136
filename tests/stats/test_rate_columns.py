"""rate_verdict results as dataset columns (simkit.stats.analysis.rate_columns, C1_NAMES)."""

from __future__ import annotations

import numpy as np

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
