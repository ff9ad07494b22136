"""The paired retrieval tests along training (simkit.stats.retrieval) and the schema builders beside
them (rate_vars, sqrt_k_term_vars).

Expected p-values come from scipy's paired t test (an implementation independent of paired_change);
the blocks are fixed arrays, so every test is deterministic.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from simkit.runner import rate_vars
from simkit.stats.retrieval import collapsed_start_rule, retrieval_change, retrieval_schema
from simkit.stats.trend import sqrt_k_term_vars

#: per-block differences of a clear rise (mean 0.2, sd ~0.02 over 8 blocks: t ~ 28)
RISE = np.array([0.18, 0.21, 0.20, 0.22, 0.19, 0.20, 0.23, 0.17])


def _blocks(change: np.ndarray, start: float = 0.3) -> np.ndarray:
    """(1 cell, blocks, 3 checkpoints): first ``start``, middle halfway, last ``start + change``."""
    first = np.full(change.size, start)
    return np.stack([first, first + change / 2, first + change], axis=-1)[None]


def _p(change: np.ndarray, alternative: str) -> float:
    return float(stats.ttest_rel(change, np.zeros_like(change), alternative=alternative).pvalue)


@pytest.mark.deterministic(reason="fixed blocks; p-values compared with scipy's paired t test to 1e-12")
def test_retrieval_change_pass_and_its_p_values():
    blocks = {"top1": _blocks(RISE), "ce": _blocks(-RISE, 2.0), "recall10": _blocks(RISE / 2)}
    out = retrieval_change(blocks, np.array([[3.0, 2.5, 2.0]]), alpha=1e-3)
    assert out["ret_top1_p"][0] == pytest.approx(_p(RISE, "greater"), rel=1e-12, abs=1e-300)
    assert out["ret_ce_p"][0] == pytest.approx(_p(-RISE, "less"), rel=1e-12, abs=1e-300)
    assert out["ret_top1_diff"][0] == pytest.approx(RISE.mean())
    assert out["ret_top1_diff_mcse"][0] == pytest.approx(RISE.std(ddof=1) / np.sqrt(RISE.size))
    assert out["ret_spearman"][0] == pytest.approx(-1.0)  # top-1 rises exactly as the risk falls
    assert (out["ret_verdict"], out["ret_verdict_reason"]) == (["pass"], [""])
    assert "ret_recall10_p" not in out


@pytest.mark.deterministic(reason="fixed blocks: each broken input gives its stated verdict")
def test_retrieval_change_positive_controls():
    flat = RISE - RISE.mean()  # no rise: t = 0
    blocks = {"top1": _blocks(flat), "ce": _blocks(-RISE, 2.0), "recall10": _blocks(flat)}
    out = retrieval_change(blocks, np.array([[2.0, 2.1, 2.2]]), alpha=1e-3)
    assert out["ret_verdict"] == ["fail"]
    assert out["ret_verdict_reason"][0].startswith("training risk did not fall (2.0000 -> 2.2000); top-1 improvement "
                                                   "not shown")
    out = retrieval_change(blocks, np.array([[2.0, np.nan, 1.0]]), alpha=1e-3)
    assert out["ret_verdict"] == ["error"]


@pytest.mark.deterministic(reason="fixed blocks: each branch of the rule on a constructed input")
def test_collapsed_start_rule_branches():
    rise = {"top1": np.concatenate([_blocks(RISE)] * 4), "ce": np.concatenate([_blocks(-RISE, 2.0)] * 4)}
    risk = np.array([[2.0, 1.5, 1.0], [2.0, 1.99, 1.95], [2.0, 1.5, 1.0], [2.0, np.nan, 1.0]])
    out = collapsed_start_rule(rise, risk, ["", "", "rotated kernel: x", ""], alpha=1e-3, min_risk_fall=0.1)
    assert out["far_verdict"] == ["pass", "not assessed", "not tested", "error"]
    assert out["far_reason"][1] == "training risk fell 0.050 < 0.1 nats"
    assert out["far_reason"][2] == "rotated kernel: x (representability limit: top-1 0.300 -> 0.500)"
    assert out["far_top1_p"][0] == pytest.approx(_p(RISE, "greater"), rel=1e-12, abs=1e-300)
    assert out["far_sd_diff"][0] == pytest.approx(RISE.std(ddof=1))
    df = RISE.size - 1
    assert out["far_mde"][0] == pytest.approx((stats.t.ppf(1 - 1e-3, df) + stats.t.ppf(0.9, df))
                                              * RISE.std(ddof=1) / np.sqrt(RISE.size), rel=1e-6)
    fall = {"top1": _blocks(-RISE), "ce": _blocks(RISE)}  # positive control: top-1 falls
    out = collapsed_start_rule(fall, risk[:1], [""], alpha=1e-3, min_risk_fall=0.1)
    assert out["far_verdict"] == ["fail"] and out["far_reason"][0].startswith("top-1 rise not shown (diff -0.2000")


def test_schema_builders_name_what_the_rules_write():
    blocks = {n: _blocks(RISE) for n in ("top1", "ce", "recall10")}
    risk = np.array([[3.0, 2.5, 2.0]])
    written = {**retrieval_change(blocks, risk, alpha=1e-3), **collapsed_start_rule(blocks, risk, [""], alpha=1e-3,
                                                                                       min_risk_fall=0.1)}
    schema = retrieval_schema("setting", 1e-3, min_risk_fall=0.1, margin=0.05, planned_sd=0.066, rule="rule L")
    assert set(written) == set(schema)
    assert schema["far_risk_fall"].description == "first minus last checkpoint; rule L needs >= 0.1"
    r = sqrt_k_term_vars("rule R (protocols/x.md)", 0.9)
    assert set(r) == {f"r_{f}" for f in ("a", "a_se", "c", "c_se", "t", "mde", "c_match", "verdict", "reason")}
    assert r["r_mde"].long_name == "smallest |c| detected with probability 0.9, in nats"
    v = rate_vars("D_k", 1e-3, prefix="d_", fields=("slope", "k_min"), fit="d_fit")
    assert set(v) == {"d_slope", "d_k_min", "d_fit", "d_resid_rate"} and v["d_fit"].dims == ("setting", "k")
    assert rate_vars("gap_k", 1e-3)["slope_verdict_low"].description == "level 1 - 0.001"
