"""simkit validate separates "fail" from "not assessed at this design", and keeps confirmatory,
exploratory and diagnostic rows apart, each with its statistic in one line."""

from __future__ import annotations

import numpy as np
import pytest

from simkit.claims.validate import (MAX_ASSESSED_RATE, NOT_ASSESSED, assess, check_label, check_role,
                                    combine_checks, full_design_label, plus_minus)
from simkit.stats.analysis import combine_verdicts

pytestmark = pytest.mark.deterministic(reason="bookkeeping of given verdicts and rates; no random draw")

BASE = {"claim": "C4", "study": "demo", "statistic": "slope of log B on log k, 9 cells", "estimate": -0.5,
        "estimate_mcse": 0.01, "detail": "", "analysis": "exploratory"}


def _row(**kw):
    return {**BASE, **kw}


def test_a_check_with_rate_098_is_not_assessed_and_one_with_1e3_that_fails_is_fail():
    na = _row(false_fail_rate=0.98, verdict="fail")
    fail = _row(false_fail_rate=1e-3, verdict="fail")
    assert assess(na)[0] == NOT_ASSESSED and "0.98 > 0.2" in assess(na)[1] and "said fail" in assess(na)[1]
    assert assess(fail) == ("fail", "")
    t = combine_checks([na])
    assert str(t["verdict"].sel(claim="C4").values) == NOT_ASSESSED
    assert int(t["n_not_assessed"].sel(claim="C4")) == 1
    assert "not assessed" in str(t["statistic"].sel(claim="C4").values)
    assert "0.98 > 0.2" in str(t["detail"].sel(claim="C4").values)
    assert str(t["check_rule_verdict"].values[0]) == "fail"
    t = combine_checks([fail])
    assert str(t["verdict"].sel(claim="C4").values) == "fail"
    # a rate just below the threshold is assessed; a pass above it is not counted either
    assert assess(_row(false_fail_rate=MAX_ASSESSED_RATE, verdict="fail"))[0] == "fail"
    assert assess(_row(false_fail_rate=0.5, verdict="pass"))[0] == NOT_ASSESSED


def test_calibration_at_the_design_that_ran_can_show_the_rate():
    # a must-reject check has no stated rate: its calibration decides (lower 95% limit above 0.2)
    shown = _row(false_fail_rate=np.nan, verdict="fail", empirical_false_fail=0.905,
                 empirical_false_fail_low=0.857, empirical_false_fail_high=0.942)
    assert assess(shown)[0] == NOT_ASSESSED and "0.905 [0.857, 0.942]" in assess(shown)[1]
    # an interval reaching below 0.2 does not show it; a calibration of another design does not count
    assert assess({**shown, "empirical_false_fail_low": 0.15})[0] == "fail"
    assert assess({**shown, "calibration_other_design": "quick"})[0] == "fail"


def test_a_full_calibration_counts_only_for_the_configuration_that_ran():
    ran = {"n_blocks": 64, "k_max": 1 << 20, "quick": False, "seed": 20261214}
    assert full_design_label({**ran, "seed": 1}, ran) == "full"
    # a calibration of the full design at another configuration names what differs (and so is another design)
    other = full_design_label({**ran, "seed": 1, "n_blocks": 32}, ran)
    assert other == "full (calibrated with n_blocks=32)"
    assert full_design_label({"n_blocks": 64, "quick": False}, ran) == "full (calibrated with k_max=None)"
    # the same configuration under another protocol (or none recorded) is another rule
    rule = {"protocol_sha256": "a8ab42554bf3ddf6"}
    assert full_design_label(ran, ran, rule, rule) == "full"
    assert full_design_label(ran, ran, {}, rule) == "full (calibrated with protocol_sha256=none)"
    assert full_design_label(ran, ran, {"protocol_sha256": "0123456789abcdef"}, rule) == \
        "full (calibrated with protocol_sha256=0123456789ab)"


def test_errors_stay_errors_and_a_row_is_decided_by_its_assessed_checks():
    assert assess(_row(false_fail_rate=0.98, verdict="error"))[0] == "error"
    t = combine_checks([_row(false_fail_rate=0.98, verdict="fail"), _row(false_fail_rate=1e-3, verdict="pass")])
    assert str(t["verdict"].sel(claim="C4").values) == "pass"
    # the row's rate counts the assessed check only
    assert float(t["false_fail_rate"].sel(claim="C4")) == pytest.approx(1e-3)
    t = combine_checks([_row(false_fail_rate=0.98, verdict="pass"), _row(false_fail_rate=1e-3, verdict="fail")])
    assert str(t["verdict"].sel(claim="C4").values) == "fail"
    assert combine_verdicts([NOT_ASSESSED, NOT_ASSESSED]) == NOT_ASSESSED
    assert combine_verdicts([NOT_ASSESSED, "pass"]) == "pass"
    assert combine_verdicts([NOT_ASSESSED, "fail", "pass"]) == "fail"
    assert combine_verdicts(["fail", "error"]) == "error"


def test_confirmatory_exploratory_and_diagnostic_rows_are_apart():
    conf = "confirmatory (protocols/demo.md, sha256 abc)"
    checks = [_row(false_fail_rate=0.01, verdict="pass"),
              _row(false_fail_rate=0.01, verdict="pass", analysis=conf,
                   statistic="pre-registered primary (protocols/demo.md): growth per doubling, 9 cells"),
              _row(false_fail_rate=0.0, verdict="fail", analysis=conf,
                   statistic="pre-registered positive control (protocols/demo.md): the same rule on B_max"),
              _row(false_fail_rate=0.01, verdict="pass", role="diagnostic", statistic="a labelled diagnostic")]
    assert [check_role(c) for c in checks] == ["claim", "claim", "diagnostic", "diagnostic"]
    t = combine_checks(checks)
    claims = list(t["claim"].values)
    assert claims[claims.index("C4"):claims.index("C4") + 3] == ["C4", "C4 confirmatory", "C4 diagnostic"]
    assert str(t["verdict"].sel(claim="C4 confirmatory").values) == "pass"
    assert str(t["verdict"].sel(claim="C4 diagnostic").values) == "fail"  # a failed control is not hidden
    assert str(t["analysis"].sel(claim="C4 diagnostic").values).startswith("diagnostic")
    # a control only in its text after the first ';' is not a diagnostic
    assert check_role(_row(statistic="exponent b of R_n; negative control must be flagged")) == "claim"


def test_every_row_statistic_is_one_short_line():
    long = "x" * 400
    checks = [_row(false_fail_rate=0.01, verdict="pass", statistic=f"slope of log B on log k (with {long}), more"),
              _row(false_fail_rate=0.98, verdict="fail", statistic=f"pre-registered rule (p.md): growth {long}"),
              _row(false_fail_rate=0.01, verdict="pass", statistic="s", label="B_avg growth")]
    t = combine_checks(checks)
    line = str(t["statistic"].sel(claim="C4").values)
    assert "\n" not in line and len(line) < 300
    assert line.startswith("demo slope of log B on log k -0.500 ± 0.010 pass; demo pre-registered rule: growth")
    assert "demo B_avg growth -0.500 ± 0.010 pass" in line
    assert check_label(checks[1]).endswith("…") and len(check_label(checks[1])) == 60
    assert plus_minus(-1.00006, 0.00015) == "-1.00006 ± 0.00015"
    assert plus_minus(0.1743, 0.0) == "0.1743" and plus_minus(np.nan, 0.1) == "—"


def test_a_check_its_own_rule_calls_not_assessed_says_so():
    own = _row(false_fail_rate=0.0, verdict=NOT_ASSESSED, detail="rot: no power: MDE 0.08 > 0.01")
    v, why = assess(own)
    assert v == NOT_ASSESSED and why == "by its own rule: rot: no power: MDE 0.08 > 0.01"
    t = combine_checks([own, _row(false_fail_rate=1e-3, verdict="pass")])
    assert "not assessed by its own rule (no power at this design)" in str(t["statistic"].sel(claim="C4").values)
    assert str(t["verdict"].sel(claim="C4").values) == "pass" and int(t["n_not_assessed"].sel(claim="C4")) == 1
    given = _row(false_fail_rate=0.0, verdict=NOT_ASSESSED, detail="b = 0.1 -> not assessed (control 'error': no conclusion)")
    t = combine_checks([given, _row(false_fail_rate=1e-3, verdict="pass")])
    assert "not assessed by its own rule (control 'error': no conclusion)" in str(t["statistic"].sel(claim="C4").values)


def test_a_row_rate_is_the_union_bound_and_a_tiny_rate_does_not_round_to_zero():
    """1 - (1 - a)(1 - b) for two checks of a row, computed here directly; a rate of 2.7e-56 stays 2.7e-56
    (1 - (1 - 2.7e-56) is 0 in floating point)."""
    t = combine_checks([_row(false_fail_rate=0.01, verdict="pass"), _row(false_fail_rate=0.02, verdict="pass")])
    assert float(t["false_fail_rate"].sel(claim="C4")) == pytest.approx(1 - 0.99 * 0.98, rel=1e-12)
    t = combine_checks([_row(false_fail_rate=2.7e-56, verdict="pass")])
    assert float(t["false_fail_rate"].sel(claim="C4")) == pytest.approx(2.7e-56, rel=1e-12)
