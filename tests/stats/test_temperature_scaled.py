"""The scaled norms rule of C5 (simkit.stats.temperature_scaled) on hand-made blocks (no randomness).

Expected values are recomputed here independently: the slope by numpy.polyfit of log(tau m) on log tau,
its SE by a delete-one-block loop written in the test, p-values from scipy's Student t. Positive
controls: a sensitivity that grows exactly like 1/tau (what the earlier rule on E[S] passes) fails this
rule and is refuted; zero or negative level at the smallest tau fails; undefined slopes fail.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from simkit.estimators.norms import NORM_BLOCK_STATS
from simkit.stats.temperature_scaled import (SCALED_FIELDS, rule_check, scaled_growth_rule, scaled_summary,
                                             scaled_verdicts)
from simkit.stats.trend import growth_rule

B0 = -math.log(2.0) / math.log(50.0)
TAUS = np.array([1.0, 0.5, 0.2])
#: 12 blocks of fixed multiplicative noise (no randomness): mean 1 at every tau, not constant over blocks
NOISE = 1.0 + 0.3 * np.sin(np.arange(12)[:, None] * 1.7 + np.arange(3)[None, :] * 0.9)


def _reference(taus, blocks, b0):
    """Slope of log(tau mean) by polyfit, jackknife SE by an explicit loop, the one-sided t test."""
    x = np.log(taus)
    fit = lambda a: np.polyfit(x, np.log(taus * a.mean(axis=0)), 1)[0]  # noqa: E731
    n = blocks.shape[0]
    reps = np.array([fit(np.delete(blocks, i, axis=0)) for i in range(n)])
    se = math.sqrt((n - 1) / n * np.sum((reps - reps.mean()) ** 2))
    b = fit(blocks)
    t = (b - b0) / se
    return b, se, stats.t.cdf(t, n - 1), stats.t.sf(t, n - 1)


@pytest.mark.deterministic(reason="hand-made blocks; values against an independent computation to 1e-12")
def test_slope_and_tests_match_an_independent_computation():
    """S = tau^-1.6 x noise: tau S grows like tau^-0.6 (b ~ -0.6 < b0): the rule passes, nothing is refuted."""
    blocks = TAUS ** -1.6 * NOISE
    r = scaled_growth_rule(TAUS, blocks, b0=B0, alpha=0.01)
    b, se, p, refute_p = _reference(TAUS, blocks, B0)
    assert r.b == pytest.approx(b, abs=1e-12) and r.se == pytest.approx(se, rel=1e-10)
    assert r.p == pytest.approx(p, rel=1e-9) and r.refute_p == pytest.approx(refute_p, rel=1e-9)
    level = blocks[:, 2]
    lt = level.mean() / (level.std(ddof=1) / math.sqrt(12))
    assert r.level == pytest.approx(level.mean(), rel=1e-14) and r.level_t == pytest.approx(lt, rel=1e-12)
    assert r.level_refute_p == pytest.approx(stats.t.cdf(lt, 11), rel=1e-9)
    assert r.passed and r.defined and not r.refuted and r.reason == "" and -0.7 < r.b < -0.5


@pytest.mark.deterministic(reason="hand-made blocks; the slope is exactly 0 or the level exactly 0")
def test_pure_one_over_tau_scaling_fails_and_is_refuted():
    """Positive control: S = (1/tau) x per-block constant (every block's tau S flat): the earlier rule on E[S]
    (margin b0 on log E[S]) passes it, the scaled rule does not, and refutes H1 (slope 0 >= b0 shown)."""
    blocks = (1.0 + 0.3 * np.sin(np.arange(12) * 1.7))[:, None] / TAUS
    assert growth_rule(TAUS, blocks, b0=B0, alpha=0.01).passed  # what the old margin could not tell apart
    r = scaled_growth_rule(TAUS, blocks, b0=B0, alpha=0.01)
    assert r.defined and not r.passed and r.refuted
    assert r.b == pytest.approx(0.0, abs=1e-12) and r.refute_p < 1e-6 and "log(tau S)" in r.reason
    # S at the smallest tau averages exactly 0: the slope is undefined, the rule fails
    level0 = blocks * np.array([1.0, 1.0, 0.0]) + np.array([0, 0, 1.0]) * np.where(np.arange(12) % 2, 1.0, -1.0)[:, None]
    z = scaled_growth_rule(TAUS, level0, b0=B0, alpha=0.01)
    assert not z.passed and not z.defined and "undefined" in z.reason
    neg = TAUS ** -1.6 * NOISE
    neg[:, 2] = -1.0 - 0.1 * np.cos(np.arange(12))
    n = scaled_growth_rule(TAUS, neg, b0=B0, alpha=0.01)
    assert not n.passed and not n.defined and n.level < 0 and n.refuted  # E[S](0.2) <= 0 shown
    few = scaled_growth_rule(TAUS, np.ones((2, 3)), b0=B0, alpha=0.01)
    assert not few.passed and not few.refuted and "fewer than 3" in few.reason


@pytest.mark.deterministic(reason="hand-made blocks: a level whose one-sided test sits at p ~ 0.2")
def test_level_not_shown_gives_the_reason():
    blocks = TAUS ** -1.6 * NOISE
    blocks[:, 2] += np.where(np.arange(12) % 2, 40.0, -40.0)  # mean unchanged, sd huge at tau = 0.2
    r = scaled_growth_rule(TAUS, blocks, b0=B0, alpha=0.01)
    assert r.defined and not r.passed and r.level_p > 0.01 and "tau = 0.2" in r.reason


@pytest.mark.deterministic(reason="argument errors; no tolerance")
def test_inputs():
    with pytest.raises(ValueError, match="'b0' must be a number < 0"):
        scaled_growth_rule(TAUS, np.ones((4, 3)), b0=0.0, alpha=0.01)
    with pytest.raises(ValueError, match="'blocks' must have shape"):
        scaled_growth_rule(TAUS, np.ones((4, 2)), b0=B0, alpha=0.01)


@pytest.mark.deterministic(reason="hand-made blocks; summaries against direct numpy to 1e-12")
def test_summary_and_verdicts():
    """scaled_summary's fields against direct computation; S/G and its jackknife against a loop; the verdict
    rule's four outcomes (confirmed, refuted, inconclusive, error)."""
    good = TAUS ** -1.6 * NOISE
    v = {n: np.zeros((3, 12)) for n in NORM_BLOCK_STATS}
    v["sens_cv"], v["sens"], v["sens_fd"] = good.T, good.T + 1.0, good.T + 1.0 + 1e-9
    v["gap_cv"] = (1.0 / TAUS * NOISE[::-1]).T
    v["sens_ref"] = np.where(np.arange(12) % 2, 1.0, -1.0)[None, :] / TAUS[:, None]
    v["converged"] = np.ones((3, 12))
    out, rules = scaled_summary(v, TAUS, b0=B0, alpha=0.01)
    np.testing.assert_allclose(out["scaled_sens_tau"], TAUS * good.mean(axis=0), rtol=1e-14)
    np.testing.assert_allclose(out["scaled_sens_cv_mcse"], good.std(axis=0, ddof=1) / math.sqrt(12), rtol=1e-12)
    ratio = lambda s, g: s.mean(axis=0) / g.mean(axis=0)  # noqa: E731
    g = v["gap_cv"].T
    reps = np.array([ratio(np.delete(good, i, 0), np.delete(g, i, 0)) for i in range(12)])
    np.testing.assert_allclose(out["scaled_sens_gap"], ratio(good, g), rtol=1e-12)
    np.testing.assert_allclose(out["scaled_sens_gap_se"], np.sqrt(11 / 12 * ((reps - reps.mean(0)) ** 2).sum(0)),
                               rtol=1e-10)
    assert out["scaled_fd_rel_error"].max() < 1e-8
    assert set(f"scaled_primary_{f}" for f in SCALED_FIELDS) <= set(out)
    assert out["scaled_primary_passed"] == 1.0 and out["scaled_null_passed"] == 0.0
    assert out["scaled_ignored_defined"] == 0.0  # S = 0: undefined, does not pass
    ok, null, ign = rules["primary"], rules["null"], rules["ignored"]
    assert scaled_verdicts(ok, null, ign, "")["scaled_conclusion"] == "confirmed"
    flat = scaled_growth_rule(TAUS, (1.0 + 0.3 * np.sin(np.arange(12) * 1.7))[:, None] / TAUS, b0=B0, alpha=0.01)
    vr = scaled_verdicts(flat, null, ign, "")
    assert vr["scaled_verdict"] == "fail" and vr["scaled_conclusion"].startswith("refuted")
    vi = scaled_verdicts(flat, ok, ign, "")  # a control passed: inconclusive, not refuted
    assert vi["scaled_null_verdict"] == "fail" and vi["scaled_conclusion"].startswith("not confirmed (inconclusive")
    few = scaled_growth_rule(TAUS, np.ones((2, 3)), b0=B0, alpha=0.01)
    # too few blocks: the conclusion names that reason
    assert scaled_verdicts(few, null, ign, "")["scaled_conclusion"] == f"not confirmed ({few.reason})"
    assert "fewer than 3" in few.reason
    ve = scaled_verdicts(ok, null, ign, "tau = 1: boom")
    assert ve["scaled_verdict"] == "error" and ve["scaled_conclusion"] == "not confirmed (task errors)"


@pytest.mark.deterministic(reason="text and verdict of stored fields; no randomness")
def test_rule_check_reads_the_stored_fields():
    import xarray as xr
    good = TAUS ** -1.6 * NOISE
    v = {n: np.zeros((3, 12)) for n in NORM_BLOCK_STATS}
    v.update(sens_cv=good.T, sens=good.T, sens_fd=good.T, gap_cv=good.T, converged=np.ones((3, 12)),
             sens_ref=np.where(np.arange(12) % 2, 1.0, -1.0)[None, :] / TAUS[:, None])
    out, rules = scaled_summary(v, TAUS, b0=B0, alpha=0.01)
    out.update(scaled_verdicts(rules["primary"], rules["null"], rules["ignored"], ""))
    ds = xr.Dataset({k: np.asarray(val) for k, val in out.items() if np.ndim(val) == 0})
    res = rule_check(ds, "scaled", "primary", B0, "tau S", "of log(tau E[S]) ")
    assert res["verdict"] == "pass" and res["estimate"] == pytest.approx(rules["primary"].b)
    assert "slope of log(tau E[S]) b = " in res["detail"] and "conclusion: confirmed" in res["detail"]
    assert rule_check(ds, "scaled", "ignored", B0, "ignored")["verdict"] == "pass"
    assert rule_check(xr.Dataset(), "scaled", "primary", B0, "tau S")["verdict"] == "error"  # rule not in the data


@pytest.mark.deterministic(reason="closed-form power (noncentral t); no random draw")
def test_planned_miss_rate_follows_the_design():
    """The scaled rule's stated rate is 1 - planned power at the design's blocks (protocols/temperature_scaled.md
    section 5: power 0.945 at 384 blocks, rounded up to the floor 0.10), so a small design is not assessed."""
    from scipy import stats as st
    from simkit.stats.temperature_scaled import PLANNED_DISTANCE, PLANNED_SD, planned_miss_rate
    n = 384  # the protocol's table, by a normal approximation with Student's critical value (no noncentral t)
    approx = 1 - st.norm.sf(st.t.ppf(0.99, n - 1) - PLANNED_DISTANCE * n ** 0.5 / PLANNED_SD)
    assert abs(approx - 0.055) < 0.01 and planned_miss_rate(n, 0.01, 0.10) == 0.10
    assert planned_miss_rate(n, 0.01, 0.0) == pytest.approx(0.055, abs=0.005)
    rates = [planned_miss_rate(b, 0.01, 0.10) for b in (24, 64, 128, 384)]
    assert rates == sorted(rates, reverse=True) and rates[0] > 0.2  # the quick design (24 blocks): not assessed
    assert planned_miss_rate(1, 0.01, 0.10) == 1.0
