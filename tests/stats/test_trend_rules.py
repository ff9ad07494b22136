"""The 1/sqrt(k)-term test, the paired change test and the paired t power (simkit.stats.trend).

Expected values come from computations written here (a weighted least-squares fit and a delete-one-block
jackknife by hand, scipy.stats.ttest_rel, statsmodels' TTestPower); the positive controls feed inputs
that the functions must reject.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats
from statsmodels.stats.power import TTestPower

from simkit.stats.trend import paired_change, paired_t_power, sqrt_k_term_test

K = 2.0 ** np.arange(13)


def _blocks(curve, n=48, noise=1e-4, seed=0):
    rng = np.random.default_rng(seed)
    return curve[None, :] + noise * rng.standard_normal((n, K.size)) / np.sqrt(K)[None, :]


def _by_hand(blocks, k_min):
    """WLS coefficients of the mean curve on (1/k, 1/k^2, 1/sqrt(k)), weights 1/MCSE^2 fixed, jackknife SE."""
    sel = K >= k_min
    b = blocks[:, sel]
    n = b.shape[0]
    sd = b.std(axis=0, ddof=1) / math.sqrt(n)
    x = np.column_stack([1 / K[sel], 1 / K[sel] ** 2, 1 / np.sqrt(K[sel])]) / sd[:, None]
    fit = lambda m: np.linalg.solve(x.T @ x, x.T @ (m / sd))  # noqa: E731
    reps = np.array([fit(np.delete(b, i, axis=0).mean(axis=0)) for i in range(n)])
    se = np.sqrt((n - 1) / n * np.sum((reps - reps.mean(axis=0)) ** 2, axis=0))
    return fit(b.mean(axis=0)), se


@pytest.mark.deterministic(reason="the same arithmetic written twice: agreement to 1e-8 relative, no randomness")
def test_sqrt_k_term_coefficients_and_se_by_hand():
    blocks = _blocks(2.0 / K - 30 / K**2 + 0.01 / np.sqrt(K), noise=1e-3)
    r = sqrt_k_term_test(K, blocks, 64, alpha=1e-3, power=0.9)
    coef, se = _by_hand(blocks, 64)
    assert r["a"] == pytest.approx(coef[0], rel=1e-8) and r["c"] == pytest.approx(coef[2], rel=1e-8)
    assert r["a_se"] == pytest.approx(se[0], rel=1e-8) and r["c_se"] == pytest.approx(se[2], rel=1e-8)
    assert r["t"] == pytest.approx(coef[2] / se[2], rel=1e-8)
    crit = stats.t.ppf(1 - 1e-3 / 2, 47)
    assert r["mde"] == pytest.approx((crit + stats.t.ppf(0.9, 47)) * se[2], rel=1e-8)
    assert r["c_match"] == pytest.approx(math.sqrt(64) * abs(blocks[:, 6].mean()), rel=1e-12)


@pytest.mark.deterministic(reason="positive control: the 1/sqrt(k) term is > 100 SE from 0; the antithetic control's mean curve has none")
def test_sqrt_k_term_rejects_a_1_over_sqrt_k_curve():
    r = sqrt_k_term_test(K, _blocks(1.0 / np.sqrt(K) + 2.0 / K), 64, alpha=1e-3, power=0.9)
    assert r["verdict"] == "fail" and r["c"] == pytest.approx(1.0, rel=0.01)
    z = _blocks(0 * K, n=24)
    exact = 2.0 / K - 30 / K**2 + np.concatenate([z, -z])  # antithetic noise: the block mean has c = 0 exactly
    assert sqrt_k_term_test(K, exact, 64, alpha=1e-3, power=0.9)["verdict"] == "pass"


@pytest.mark.deterministic(reason="edge cases decided by counting and by construction")
def test_sqrt_k_term_not_assessed_and_errors():
    r = sqrt_k_term_test(K, _blocks(1e-9 / K, noise=1e-2), 64, alpha=1e-3, power=0.9)
    assert r["verdict"] == "not assessed" and r["mde"] > r["c_match"]
    assert sqrt_k_term_test(K, _blocks(1 / K)[:2], 64, alpha=1e-3, power=0.9)["verdict"] == "error"
    assert sqrt_k_term_test(K, _blocks(1 / K), 2048, alpha=1e-3, power=0.9)["verdict"] == "error"  # 3 levels
    flat = np.tile(1 / K, (10, 1))
    assert "variance is zero" in sqrt_k_term_test(K, flat, 64, alpha=1e-3, power=0.9)["reason"]


@pytest.mark.deterministic(reason="compared with scipy.stats.ttest_rel on the same numbers, to 1e-10")
def test_paired_change_against_ttest_rel():
    rng = np.random.default_rng(4)
    blocks = rng.normal(size=(3, 20, 4)) + np.array([0.0, 0.1, 0.2, 1.5])  # (setting, block, level)
    for alt in ("greater", "less"):
        diff, mcse, p = paired_change(blocks, alternative=alt)
        for i in range(3):
            ref = stats.ttest_rel(blocks[i, :, -1], blocks[i, :, 0], alternative=alt)
            assert p[i] == pytest.approx(ref.pvalue, rel=1e-10)
            d = blocks[i, :, -1] - blocks[i, :, 0]
            assert diff[i] == pytest.approx(d.mean(), rel=1e-12)
            assert mcse[i] == pytest.approx(d.std(ddof=1) / math.sqrt(20), rel=1e-12)
    # positive control: a clear rise is shown one way and not the other
    assert paired_change(blocks, alternative="greater")[2][0] < 1e-3 < paired_change(blocks, alternative="less")[2][0]
    const = np.zeros((1, 5, 2))
    const[..., 1] = 1.0  # zero MCSE: p = 0 in the direction of the change, else 1
    assert paired_change(const, alternative="greater")[2][0] == 0.0 and paired_change(const, alternative="less")[2][0] == 1.0
    with pytest.raises(ValueError, match="'alternative' must be"):
        paired_change(blocks, alternative="two-sided")


@pytest.mark.deterministic(reason="compared with statsmodels' TTestPower, an independent implementation, to 1e-6")
def test_paired_t_power_against_statsmodels():
    for n, sd, margin, alpha in ((48, 0.066, 0.05, 1e-3), (24, 0.0933, 0.05, 1e-3), (10, 1.0, 0.3, 0.05)):
        ref = TTestPower().power(effect_size=margin / sd, nobs=n, alpha=alpha, alternative="larger")
        assert paired_t_power(n, sd, margin, alpha) == pytest.approx(ref, rel=1e-6, abs=1e-9)
    assert paired_t_power(48, 0.066, 0.0, 1e-3) == pytest.approx(1e-3, rel=1e-8)  # at the null: the level
