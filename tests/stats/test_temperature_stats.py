"""Statistics of claim C5 (simkit.stats.temperature) on hand-made arrays; expected values worked out in
the docstrings (no randomness). Each rule has a positive control: an input that breaks it is flagged."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from simkit.estimators.norms import NORM_BLOCK_STATS
from simkit.stats.temperature import (c1_problems, c1_shape, ce_problems, critical_values, kl_problems, kl_summary,
                                      norm_summary, tau_grid)


def test_tau_grid_and_critical_values():
    assert tau_grid(0.02, 10.0, 3) == [0.02, 0.447214, 10.0]  # sqrt(0.02 * 10), 6 significant digits
    crit = critical_values(2, 4, 16, 8, 1e-3)
    # Bonferroni: 8 two-sided t tests on 15 df; 2 estimators x 8 cells x 128 anchors; one comparison per setting
    assert crit["ce"] == pytest.approx(stats.t.isf(1e-3 / 16, 15), rel=1e-12)
    assert crit["kl"] == pytest.approx(stats.norm.isf(1e-3 / 2048), rel=1e-12)
    assert crit["c1"] == pytest.approx(stats.norm.isf(5e-4), rel=1e-12)


def test_kl_problems():
    """Bound 2/tau = (1, 0.5). Exact KL 0.6 > 0.5 at the second tau; the importance upper value 0.6 > 0.5 there."""
    taus, bound = np.array([2.0, 4.0]), np.array([1.0, 0.5])
    kl_exact = np.array([[0.1, 0.2], [0.3, 0.4]])
    sup, up = np.array([0.3, 0.45]), np.array([0.2, 0.4])
    assert kl_problems(kl_exact, sup, up, up, bound, taus, 3.0) == ([], [])
    ex, mc = kl_problems(np.array([[0.1, 0.2], [0.5, 0.6]]), sup, up, np.array([0.2, 0.6]), bound, taus, 3.0)
    assert ex == ["an exact per-anchor KL exceeds 2/tau"]
    assert mc == ["importance: KL_hat - 3.00 MCSE exceeds 2/tau at tau = 4"]
    ex, mc = kl_problems(kl_exact * np.nan, sup, np.array([np.nan, 0.1]), up, bound, taus, 3.0)
    assert ex == ["missing exact KL values"] and mc == ["direct: no finite estimates at some tau"]


def test_ce_problems():
    taus = np.array([1.0, 0.1])
    assert ce_problems(np.array([0.5, -2.9]), taus, 3.0) == []
    assert ce_problems(np.array([0.5, -4.0]), taus, 3.0) == ["|z| > 3.00 at tau = 0.1 (z = -4.00)"]
    assert ce_problems(np.array([0.5, np.nan]), taus, 3.0) == ["no finite z-score at some tau"]


def test_c1_problems():
    """taus (0.02, 0.1, 1), kappa_M = 10: the reference is tau >= 0.1, where |c1| is largest at 0.5 (tau 0.1).
    |c1(0.02)| = 2 -> ratio 4, MCSE 4 hypot(0.1/2, 0.05/0.5) = 0.4472136; 2 - 3(0.1) = 1.7 > 0.5 + 3(0.05)."""
    taus, rho = np.array([0.02, 0.1, 1.0]), np.array([100.0, 10.0, 1.0])
    se = np.array([0.1, 0.05, 0.05])
    probs, ratio, ratio_se = c1_problems(np.array([-2.0, 0.5, 0.25]), se, rho, taus, 10.0, 3.0)
    assert probs == [] and ratio == pytest.approx(4.0) and ratio_se == pytest.approx(0.4472135955, rel=1e-9)
    probs, ratio, _ = c1_problems(np.array([-0.6, 0.5, 0.25]), se, rho, taus, 10.0, 3.0)  # 0.3 < 0.65
    assert ratio == pytest.approx(1.2) and len(probs) == 1 and "does not exceed" in probs[0]
    probs, _, _ = c1_problems(np.array([-2.0, 0.5, 0.25]), se, np.array([100.0, 200.0, 1.0]), taus, 10.0, 3.0)
    assert probs == ["E[Z2/Z^2] decreases as tau decreases somewhere on the grid"]
    probs, ratio, _ = c1_problems(np.array([-2.0, 0.5, 0.25]), se, rho, taus, 2.0, 3.0)  # 1/kappa_M = 0.5
    assert probs == [] and ratio == pytest.approx(8.0)
    probs, ratio, _ = c1_problems(np.array([-2.0, 0.5, 0.25]), se, rho, taus, 100.0, 3.0)  # 0.01: no small side
    assert math.isnan(ratio) and probs == ["the grid must reach both sides of 1/kappa_M = 0.01"]


def test_c1_shape():
    """c1 = (1, -1) at tau = (1, 4): the log-linear zero is exp(log 4 / 2) = 2; E[Z2/Z^2] = (4, 1): slope
    log(1/4) / log 4 = -1, and -(d-1)/2 = -1 for d = 3."""
    out = c1_shape(np.array([1.0, -1.0]), np.array([4.0, 1.0]), np.array([1.0, 4.0]), 3)
    assert out["tau_c1_peak"] == 1.0 and out["tau_c1_zero"] == pytest.approx(2.0, rel=1e-12)
    assert out["scale_slope"] == pytest.approx(-1.0, rel=1e-12) and out["scale_slope_predicted"] == -1.0
    assert math.isnan(c1_shape(np.array([1.0, 2.0]), np.array([4.0, 1.0]), np.array([1.0, 4.0]), 3)["tau_c1_zero"])


def test_kl_summary_max_and_upper():
    """One setting, one tau, two blocks of two anchors: estimates (1, 2; 3, 0.5) with MCSE (0.1, 0.1; 0.5, 0.1).
    The largest is 3 with its own MCSE 0.5; the largest of KL_hat - 2 MCSE is max(0.8, 1.8, 2.0, 0.3) = 2."""
    v = np.array([[[[1.0, 2.0], [3.0, 0.5]]]])
    se = np.array([[[[0.1, 0.1], [0.5, 0.1]]]])
    blocks = {"kl_q": v, "kl_q_mcse": se, "kl_is": v, "kl_is_mcse": se, "kl_exact": v - 0.25,
              "kl_is_ess": np.full(v.shape, 50.0)}
    p = {"kl_mean": np.array([[[1.0, 0.0]]]), "kl_sup": np.array([[4.0]])}
    out = kl_summary(blocks, p, np.array([10.0]), 2.0)
    assert out["kl_max"][0, 0] == 3.0 and out["kl_max_mcse"][0, 0] == 0.5
    assert out["kl_upper"][0, 0] == pytest.approx(2.0) and out["kl_max_anchor_exact"][0, 0] == 2.75
    assert out["kl_ratio"][0, 0] == pytest.approx(0.3) and out["kl_is_ess_min"][0, 0] == 50.0
    np.testing.assert_allclose(out["kl_mean"], [[1.625]])  # block means 1.5 and 1.75


def test_normalised_gap_hand_values():
    """G tau and its MCSE from hand-made blocks: G blocks (1, 2, 3, 6) at tau = 1 -> mean 3, sd sqrt(14/3),
    MCSE 1.0801, G tau = 3; (2, 2, 2, 2) at tau = 0.5 -> G tau = 1, MCSE 0; (10, 20, 30, 60) at tau = 0.1 ->
    G tau = 3, MCSE 1.0801; S tau likewise from sens_cv."""
    taus = np.array([1.0, 0.5, 0.1])
    g = np.array([[1.0, 2, 3, 6], [2, 2, 2, 2], [10, 20, 30, 60]])
    v = {n: np.ones((3, 4)) for n in NORM_BLOCK_STATS}
    v["gap_cv"], v["sens_cv"] = g, 2 * g
    out, _ = norm_summary(v, taus, b0=-0.2, alpha=0.01)
    np.testing.assert_allclose(out["norm_gap_tau"], [3.0, 1.0, 3.0], rtol=1e-15)
    np.testing.assert_allclose(out["norm_gap_tau_mcse"], [1.0801234497, 0.0, 1.0801234497], rtol=1e-9)
    np.testing.assert_allclose(out["norm_sens_tau"], [6.0, 2.0, 6.0], rtol=1e-15)
    np.testing.assert_allclose(out["norm_gap_cv"], [3.0, 2.0, 30.0], rtol=1e-15)
