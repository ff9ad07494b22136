"""Rate regressions and Monte Carlo standard errors (simkit.stats.analysis), and the C1 verdict rule.

* The fit model (log gap on log k and 1/k over the study's k >= k_min; gap on 1/k, 1/k^2) has a
  negligible bias on the EXACT gap curve (``exact.gap_exact``).
* Calibration under H0: with synthetic blocks correlated across k (as common random numbers
  make them), the jackknife intervals of ``fit_rate`` have their nominal coverage.
* Negative control (required by the issue): a process whose gap decays as 1/sqrt(k) is rejected
  by the study's verdict rule, both synthetic and built from real Monte Carlo blocks.
* ``mean_mcse``, ``jackknife``, ``fit_rate``, ``fit_inverse_powers`` against hand computations.

Statistical budget of this file (fixed seeds chosen before the first run, never re-seeded):
calibration 2 x 2 binomial checks at 1e-4 each (4e-4); synthetic negative control 1e-4; real
negative control 1e-5 (p_half) and the real blocks' 5 null tests at 1e-5 each; the jackknife's two
z bounds 2e-5: about 5.7e-4 in the default suite. The real blocks' verdict at the study's ALPHA
(5e-3) is in the slow suite.
"""

from __future__ import annotations

import functools
import warnings

import numpy as np
import pytest
from scipy import stats

from simkit import Uniform, VMFKernel, exact
from simkit.stats.analysis import (choose_k_min, combine_verdicts, fit_inverse_powers, fit_rate, jackknife, mean_mcse,
                             worst_slope, z_score)
from simkit.runner import resolve_config, run_study, summarise_dataset
from simkit.estimators.infonce import k_grid
from studies.rate_k import ALPHA, STUDY
from _false_fail import below_floor, null_pvalues

FLOOR = 1e-5  # the default suite's level for a test's own null comparisons (ALPHA is the study's)

# ----------------------------------------------------------------------------------------------
# the fit model on the exact gap curve

EXACT_CASES = [(10.0, 0.1, 3), (5.0, 0.5, 3), (8.0, 0.125, 16)]  # (kappa, tau, d), uniform pi


@functools.lru_cache(maxsize=None)
def _exact_curve(kappa, tau, d):
    """(k grid to 65536, gap_exact, c1 = bias_constant, k_min of the study's rule)."""
    k = k_grid(65536)
    pi, kernel = Uniform(d), VMFKernel(kappa)
    g = exact.gap_exact(kernel, d, tau, k)
    c1 = exact.bias_constant(pi, kernel, tau)
    scale = max(exact.expansion_scales(pi, kernel, tau))  # max(E[Z2/Z^2], E[m1/Z])
    return k, g, float(c1), choose_k_min(k, scale, 16.0)


def _zero_noise_blocks(g, rel_se):
    """16 blocks whose mean over blocks is exactly ``g`` (a centred, fixed perturbation, fully
    correlated across k) and whose relative MCSE is ``rel_se``: the jackknife runs, the WLS
    weights are ``1/rel_se^2`` and the point estimates are those of the exact curve."""
    e = np.linspace(-1.0, 1.0, 16)
    e -= e.mean()
    e /= e.std(ddof=1) / np.sqrt(16)  # MCSE of e is 1
    return g * (1.0 + rel_se * e[:, None])


@pytest.mark.parametrize("kappa, tau, d", EXACT_CASES)
@pytest.mark.parametrize("k_max", [4096, 65536])  # the --quick grid and the default grid
@pytest.mark.parametrize("weights", ["flat", "k^-1/2"])
def test_fit_model_bias_on_exact_curve(kappa, tau, d, k_max, weights):
    """On the exact gap curve, over k >= k_min (study rule: smallest grid k >= 16 scale), the slope
    of the fit with the 1/k term is within 2e-3 of -1 and the c1 of the two-term fit within 0.1%
    of ``bias_constant``. Observed (at the time of writing): |slope + 1| <= 4.6e-4 and c1 within
    5.2e-4 relative, the worst case being (8, 0.125, 16) on the 4096 grid; so the model bias is
    below 0.3 times the slope MCSE of the --quick study (0.0007--0.006) and below its c1 MCSE.
    The two weight patterns bracket the study's (relative MCSE flat or falling like k^-1/2)."""
    k, g, c1, k_min = _exact_curve(kappa, tau, d)
    sel = k <= k_max
    k, g = k[sel], g[sel]
    assert np.all(g > 0)
    assert k_min == {(10.0, 0.1, 3): 256, (5.0, 0.5, 3): 64, (8.0, 0.125, 16): 256}[(kappa, tau, d)]
    rel = np.full(k.size, 1e-3) if weights == "flat" else 1e-2 / np.sqrt(k)
    blocks = _zero_noise_blocks(g, rel)
    np.testing.assert_allclose(blocks.mean(axis=0), g, rtol=1e-14)
    fit = fit_rate(k, blocks, k_min)
    assert abs(fit.slope + 1.0) <= 2e-3, fit.slope
    assert fit.n_points == np.sum(k >= k_min) and fit.n_blocks == 16
    curve = fit_inverse_powers(k, blocks, k_min, n_terms=2)
    assert abs(curve.coef[0] / c1 - 1.0) <= 1e-3, (curve.coef[0], c1)


def test_exact_reference_constants():
    """docs/theory.md section 5 anchors (facts about the mathematics): c1 = (kappa coth kappa + 1)/2 in
    d = 3 at tau = 1/kappa, and k * gap_exact(k) -> c1."""
    for kappa, tau, c1_ref in [(10.0, 0.1, 5.5), (5.0, 0.5, 2.373265)]:
        k, g, c1, _ = _exact_curve(kappa, tau, 3)
        assert c1 == pytest.approx(c1_ref, abs=5e-7)
        assert k[-1] * g[-1] == pytest.approx(c1, rel=1e-4)
    assert _exact_curve(10.0, 0.1, 3)[2] == pytest.approx((10 / np.tanh(10) + 1) / 2, rel=1e-12)


# ----------------------------------------------------------------------------------------------
# synthetic blocks: c1/k + c2/k^2 (H0) or c/sqrt(k) (negative control), CRN-like noise

K_SYN = k_grid(4096).astype(float)
K_MIN_SYN = 64
N_BLOCKS_SYN = 32


def _noise_sd(rho):
    """Per-block SD (relative to the gap) and correlation of the synthetic noise: the MCSE of the
    mean over 32 blocks falls geometrically from 1% of the gap at k = 1 to 0.05% at k = 4096;
    the correlation between grid points i, j is rho^|i - j| (rho between neighbouring k)."""
    j = np.log2(K_SYN)
    rel_mcse = 1e-2 * (5e-4 / 1e-2) ** (j / j[-1])
    corr = rho ** np.abs(j[:, None] - j[None, :])
    return rel_mcse * np.sqrt(N_BLOCKS_SYN), np.linalg.cholesky(corr)


def _synthetic(mean_curve, rho, n_rep, seed):
    sd, chol = _noise_sd(rho)
    z = np.random.default_rng(seed).standard_normal((n_rep, N_BLOCKS_SYN, K_SYN.size))
    return mean_curve * (1.0 + (z @ chol.T) * sd)


def _h0_curve():
    return 5.5 / K_SYN - 4.6 / K_SYN**2  # c1, c2 of the uniform-d3 setting (exact curve)


def _verdict_slope(fit):
    """The study's slope rule (studies/rate_k.py): pass iff the level-(1 - ALPHA) interval
    contains -1 and slope = -1/2 is rejected at ALPHA."""
    lo, hi = fit.interval(1 - ALPHA)
    return bool(lo <= -1.0 <= hi and fit.p_half < ALPHA)


def _calibration_rate(n_rep):
    """Exact false-failure rate of the two binomial checks of the calibration test (calibrated intervals)."""
    lo95, hi95 = stats.binom.ppf(5e-5, n_rep, 0.05), stats.binom.isf(5e-5, n_rep, 0.05)
    hi999 = stats.binom.isf(1e-4, n_rep, 1e-3)
    return float(stats.binom.cdf(lo95 - 1, n_rep, 0.05) + stats.binom.sf(hi95, n_rep, 0.05)
                 + stats.binom.sf(hi999, n_rep, 1e-3))


@pytest.mark.statistical
@pytest.mark.parametrize("rho, n_rep, seed", [
    pytest.param(rho, n, seed, marks=pytest.mark.false_fail(
        _calibration_rate(n), reason="exact Binomial tails of the 95% band and the 99.9% upper limit"))
    for rho, n, seed in [(0.3, 2000, 20261211), (0.9, 1000, 20261212)]])
def test_slope_interval_calibration_under_h0(rho, n_rep, seed):
    """Coverage of ``fit_rate`` intervals for a true slope of -1 (gap = c1/k + c2/k^2).

    ``n_rep`` datasets of 32 blocks with correlation rho between neighbouring k: 0.3 as in the
    issue (2000 datasets), and 0.9, what the common random numbers give in the --quick study's
    vmf-d8 and mixture-d16 cells (1000 datasets, to keep the suite fast: fit_rate runs 33
    statsmodels fits per dataset). The count of datasets whose 95% interval excludes -1 must lie
    within the two-sided binomial(n_rep, 0.05) limits at 1e-4 ([64, 140] for 2000, [25, 79] for
    1000), and the level-(1 - 1e-3) interval may exclude -1 in at most the binomial(n_rep, 1e-3)
    upper limit at 1e-4 (9 for 2000, 6 for 1000) datasets. False-failure rate: <= 1e-4 per check,
    2e-4 per rho, with a calibrated SE (the model bias of the 1/k fit is < 1e-4 in slope here,
    far below the SE).
    Power (95% check): a jackknife SE 15% too small (exclusion rate 9.3%) is detected with
    probability 0.9999 (2000) / 0.93 (1000); 15% too large (2.6%) with 0.96 / 0.43; 20% too
    large (2.0%) with 0.9997 / 0.83. The 99.9% check only guards gross anti-conservatism.
    """
    data = _synthetic(_h0_curve(), rho, n_rep, seed)
    out95 = out999 = 0
    for blocks in data:
        fit = fit_rate(K_SYN, blocks, K_MIN_SYN, level=0.95)
        assert fit.level == 0.95 and fit.df == N_BLOCKS_SYN - 1
        out95 += not (fit.ci_low <= -1.0 <= fit.ci_high)
        lo, hi = fit.interval(1 - 1e-3)
        out999 += not (lo <= -1.0 <= hi)
    lo95, hi95 = stats.binom.ppf(5e-5, n_rep, 0.05), stats.binom.isf(5e-5, n_rep, 0.05)
    hi999 = stats.binom.isf(1e-4, n_rep, 1e-3)
    assert lo95 <= out95 <= hi95, f"95% interval excluded -1 in {out95}/{n_rep} datasets, limits [{lo95}, {hi95}]"
    assert out999 <= hi999, f"99.9% interval excluded -1 in {out999}/{n_rep} datasets, limit {hi999}"


@pytest.mark.statistical
@pytest.mark.false_fail(float(stats.binom.sf(3, 200, 1e-3)), reason="exact Binomial(200, 1e-3) tail above 3; the verdict's miss is < 1e-100")
def test_negative_control_synthetic_sqrt_k():
    """A process with gap = 5.5/sqrt(k) (same noise model, rho = 0.3) is REJECTED by the study's
    verdict rule in every one of 200 datasets; slope = -1/2 is (correctly) not rejected.

    The slope SE here is ~0.0006 (compare 0.5 between -1/2 and -1), so the level-(1 - 1e-3)
    interval contains -1 with probability < 1e-100: power = P(reject) = 1 to machine precision, and
    even the p_half rule alone rejects with probability 1 - 1e-3. The count of datasets with
    p_half < 1e-3 (calibrated: binomial(200, 1e-3)) must be <= 3: false-failure rate 1e-4.
    """
    data = _synthetic(5.5 / np.sqrt(K_SYN), 0.3, 200, 20261213)
    n_p_small = 0
    for blocks in data:
        fit = fit_rate(K_SYN, blocks, K_MIN_SYN, level=0.95)
        lo, hi = fit.interval(1 - ALPHA)
        assert lo > -0.9, (lo, hi)  # excludes -1 by a wide margin
        assert lo <= -0.5 <= hi or fit.p_half < ALPHA
        assert not _verdict_slope(fit)
        n_p_small += fit.p_half < ALPHA
    assert n_p_small <= stats.binom.isf(1e-4, 200, 1e-3) == 3


# ----------------------------------------------------------------------------------------------
# negative control on real Monte Carlo blocks, through the study's own summarise / verdict

RAW_PREFIXES = ("raw_", "prep_")


@pytest.fixture(scope="module")
def real_run(tmp_path_factory):
    """The --quick design restricted to uniform-d3 (32 blocks, k_max 4096), seed 20261214
    (not the study's default, so it is independent of tests/studies/test_rate_k_study.py)."""
    cfg = resolve_config(STUDY, {"settings": "uniform-d3"}, quick=True, seed=20261214)
    res = run_study(STUDY, cfg, tmp_path_factory.mktemp("real") / "rate_k.nc", progress=False)
    assert res.completed and not res.errors
    raw = res.dataset[[v for v in res.dataset.data_vars
                       if v.startswith(RAW_PREFIXES) or v in ("cell_error", "cell_key")]]
    return cfg, raw


@pytest.mark.statistical
@pytest.mark.false_fail(5 * FLOOR, reason="the verdict's five component null tests (Check.pvalues: slope, c1, c2, curve, dgap) at "
                        "p >= 1e-5 each; rejecting -1/2 fails with negligible probability (~90 SE)")
def test_real_blocks_null_pvalues(real_run):
    """The default suite's form of the next test: the untransformed real blocks' five component null tests at
    p >= 1e-5, -1/2 rejected at ALPHA (a slope t_{1 - 5e-6; 31} = 5.3 SE from -1 is detected with probability 1/2,
    3.6 SE at ALPHA)."""
    cfg, raw = real_run
    ds = summarise_dataset(STUDY, raw, cfg)
    pv = null_pvalues(STUDY, ds)
    assert len(pv) == 5 and below_floor(pv, FLOOR) == {}, below_floor(pv, FLOOR)
    assert float(ds["slope_p_half"][0]) < ALPHA


@pytest.mark.false_fail(FLOOR, reason="the slope test at p >= 1e-5; the c1 miss is negligible (allowance, not computed exactly: "
                        "c1 5% off is ~24 MCSE of the quick design's c1 in this setting, MCSE ~0.2%, against 5.3)")
def test_real_blocks_null_pvalues_flag_a_wrong_exact_value(real_run):
    """Positive control of the p-value floor: the same real blocks against an exact c1 5% too large have the c1 test
    below 1e-5 (the slope test, which does not use c1, is unchanged)."""
    cfg, raw = real_run
    bad = raw.copy(deep=True)
    bad["prep_c1_exact"] = raw["prep_c1_exact"] * 1.05
    low = below_floor(null_pvalues(STUDY, summarise_dataset(STUDY, bad, cfg)), FLOOR)
    assert any(name.endswith(":c1") for name in low), low
    assert not any(name.endswith(":slope") for name in low), low


@pytest.mark.slow
@pytest.mark.statistical
@pytest.mark.false_fail(5e-3, reason="slow suite: the study's verdict, its five tests at ALPHA (slope interval, c1, c2, curve, dgap); "
                        "rejecting -1/2 fails with negligible probability (~90 SE)")
def test_real_blocks_positive_control(real_run):
    """The untransformed real blocks pass (false-failure rate 5e-3: the slope interval, the c1 and c2 tests and the
    curve and dgap tests at 1e-3 each; p_half < 1e-3 fails with negligible probability as |slope + 1/2| ~ 90 SE)."""
    cfg, raw = real_run
    ds = summarise_dataset(STUDY, raw, cfg)
    assert ds["verdict"].values.tolist() == ["pass"], ds["verdict_reason"].values


@pytest.mark.statistical
@pytest.mark.false_fail(FLOOR, reason="p_half >= FLOOR = 1e-5 at the true slope -1/2 (level-FLOOR test); the slope within 0.05 of -1/2 is ~8 SE")
def test_negative_control_real_blocks_sqrt_k(real_run):
    """Real GapEstimator blocks multiplied by sqrt(k) have mean curve
    sqrt(k) gap_k = c1/sqrt(k) (1 + (c2/c1)/k + ...): true slope -1/2 in the study's model. The
    study's summarise must mark it 'fail' with the slope interval excluding -1, and slope = -1/2 must
    have p_half >= 1e-5 (false-failure rate 1e-5; at the study's 1e-3 the rate would be 1e-3).
    Power: the slope SE of these blocks is ~0.006, so -1 lies ~80 SE from the true slope and the
    verdict rejects with probability 1 - O(1e-50) (and >= 1 - 1e-3 from the p_half rule alone).
    """
    cfg, raw = real_run
    bad = raw.copy()
    bad["raw_gap_cv"] = raw["raw_gap_cv"] * np.sqrt(raw["k"])
    ds = summarise_dataset(STUDY, bad, cfg)
    assert ds["verdict"].values.tolist() == ["fail"]
    lo, hi = float(ds["slope_verdict_low"][0]), float(ds["slope_verdict_high"][0])
    assert lo > -0.9, (lo, hi)
    assert float(ds["slope_p_half"][0]) >= FLOOR
    assert "excludes -1" in str(ds["verdict_reason"].values[0])
    assert abs(float(ds["slope"][0]) + 0.5) < 0.05


# ----------------------------------------------------------------------------------------------
# unit tests against hand computations


def test_mean_mcse_hand():
    a = np.array([[1.0, 2.0], [2.0, 4.0], [3.0, 9.0], [6.0, np.nan]])
    mean, mcse = mean_mcse(a)
    # column 0: mean 3, squared deviations 4 + 1 + 0 + 9 = 14, var 14/3, mcse sqrt(14/3 / 4)
    # column 1 (NaN ignored): mean 5, squared deviations 9 + 1 + 16 = 26, var 13, mcse sqrt(13/3)
    np.testing.assert_allclose(mean, [3.0, 5.0], rtol=1e-15)
    np.testing.assert_allclose(mcse, [np.sqrt(7 / 6), np.sqrt(13 / 3)], rtol=1e-15)
    m1, s1 = mean_mcse(a.T, axis=1)
    np.testing.assert_array_equal(m1, mean)
    np.testing.assert_array_equal(s1, mcse)


def test_mean_mcse_degenerate_columns_no_warning():
    a = np.array([[np.nan, 1.0, 2.0], [np.nan, np.nan, 2.0], [np.nan, np.nan, 2.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mean, mcse = mean_mcse(a)
    assert np.isnan(mean[0]) and np.isnan(mcse[0])  # all NaN
    assert mean[1] == 1.0 and np.isnan(mcse[1])  # one valid block: no MCSE
    assert mean[2] == 2.0 and mcse[2] == 0.0


def test_jackknife_ratio_hand():
    blocks = np.array([[1.0, 2.0], [2.0, 3.0], [4.0, 5.0], [3.0, 3.0]])
    # leave-one-out means (9/3, 11/3), (8/3, 10/3), (6/3, 8/3), (7/3, 10/3): ratios below
    reps_hand = np.array([9 / 11, 8 / 10, 6 / 8, 7 / 10])
    se_hand = np.sqrt(3 / 4 * np.sum((reps_hand - reps_hand.mean()) ** 2))
    est, se, reps = jackknife(lambda m: m[0] / m[1], blocks)
    assert est.shape == se.shape == (1,) and reps.shape == (4, 1)
    assert est[0] == pytest.approx(10 / 13, rel=1e-15)
    np.testing.assert_allclose(reps[:, 0], reps_hand, rtol=1e-15)
    assert se[0] == pytest.approx(se_hand, rel=1e-13)


@pytest.mark.deterministic(reason="an exact identity of the jackknife of a mean, at rtol 1e-12, for any draw")
def test_jackknife_of_mean_is_sd_over_sqrt_n():
    """For a linear statistic the jackknife SE is exactly sd / sqrt(n)."""
    b = np.random.default_rng(3).standard_normal((9, 4))
    est, se, _ = jackknife(lambda m: m, b)
    mean, mcse = mean_mcse(b)
    np.testing.assert_allclose(est, mean, rtol=1e-14)
    np.testing.assert_allclose(se, mcse, rtol=1e-12)


def test_jackknife_needs_three_blocks():
    with pytest.raises(ValueError, match="'blocks'.*at least 3"):
        jackknife(lambda m: m, np.ones((2, 3)))


def _wls(y, x, w):
    sw = np.sqrt(w)
    return np.linalg.lstsq(x * sw[:, None], y * sw, rcond=None)[0]


@pytest.mark.deterministic(reason="fit_rate against a hand implementation of the same formulas on the same draw (rtol <= 1e-6)")
def test_fit_rate_matches_hand_wls_jackknife():
    """fit_rate against an independent NumPy implementation of its documented method: weights
    (mean/mcse)^2 fixed from the full sample, WLS of log gap on (1, log k, 1/k) over k >= k_min,
    delete-one-block jackknife SE, Student t with n - 1 df."""
    k = K_SYN
    b = _synthetic(_h0_curve(), 0.5, 1, 7)[0][:12]
    k_min = 32
    fit = fit_rate(k, b, k_min, level=0.9)
    sel = k >= k_min
    n = b.shape[0]
    mean = b.mean(axis=0)
    mcse = b.std(axis=0, ddof=1) / np.sqrt(n)
    w = (mean[sel] / mcse[sel]) ** 2
    x = np.column_stack([np.ones(sel.sum()), np.log(k[sel]), 1.0 / k[sel]])
    full = _wls(np.log(mean[sel]), x, w)
    reps = np.array([_wls(np.log(np.delete(b, i, axis=0).mean(axis=0)[sel]), x, w) for i in range(n)])
    se = np.sqrt((n - 1) / n * np.sum((reps - reps.mean(axis=0)) ** 2, axis=0))
    q = stats.t.ppf(0.95, n - 1)
    assert fit.slope == pytest.approx(full[1], rel=1e-10)
    assert fit.intercept == pytest.approx(full[0], rel=1e-10)
    assert fit.curvature == pytest.approx(full[2], rel=1e-8)
    assert fit.slope_se == pytest.approx(se[1], rel=1e-8)
    assert (fit.ci_low, fit.ci_high) == pytest.approx((full[1] - q * se[1], full[1] + q * se[1]), rel=1e-10)
    assert fit.p_half == pytest.approx(2 * stats.t.sf(abs(full[1] + 0.5) / se[1], n - 1), rel=1e-6)
    assert fit.p_one == pytest.approx(2 * stats.t.sf(abs(full[1] + 1.0) / se[1], n - 1), rel=1e-6)
    assert fit.interval(0.9) == pytest.approx((fit.ci_low, fit.ci_high), rel=1e-12)
    assert (fit.k_min, fit.n_points, fit.n_blocks, fit.df) == (32, 8, 12, 11)
    # without the 1/k term
    plain = fit_rate(k, b, k_min, with_inverse=False)
    assert plain.slope == pytest.approx(_wls(np.log(mean[sel]), x[:, :2], w)[1], rel=1e-10)
    assert np.isnan(plain.curvature)


@pytest.mark.deterministic(reason="hand WLS on the same draw; the 1% tolerance on c1 is ~10 SD of its estimate (normal tail ~1e-23)")
def test_fit_inverse_powers_matches_hand_wls():
    k = K_SYN
    b = _synthetic(_h0_curve(), 0.5, 1, 8)[0][:10]
    cf = fit_inverse_powers(k, b, 16, n_terms=2)
    sel = k >= 16
    n = b.shape[0]
    mcse = b.std(axis=0, ddof=1) / np.sqrt(n)
    x = np.column_stack([1.0 / k[sel], 1.0 / k[sel] ** 2])
    w = 1.0 / mcse[sel] ** 2
    full = _wls(b.mean(axis=0)[sel], x, w)
    reps = np.array([_wls(np.delete(b, i, axis=0).mean(axis=0)[sel], x, w) for i in range(n)])
    se = np.sqrt((n - 1) / n * np.sum((reps - reps.mean(axis=0)) ** 2, axis=0))
    np.testing.assert_allclose(cf.coef, full, rtol=1e-9)
    np.testing.assert_allclose(cf.se, se, rtol=1e-7)
    assert cf.coef[0] == pytest.approx(5.5, rel=0.01)


def test_fit_rate_recovers_exact_power_law():
    k = K_SYN
    for slope in (-1.0, -0.5):
        b = _zero_noise_blocks(3.0 * k**slope, np.full(k.size, 1e-3))
        assert fit_rate(k, b, 8).slope == pytest.approx(slope, abs=1e-10)
        assert fit_rate(k, b, 8, with_inverse=False).slope == pytest.approx(slope, abs=1e-10)


@pytest.mark.deterministic(reason="NaN handling of constructed non-positive columns; no tolerance")
def test_fit_rate_nonpositive_gap_gives_nan():
    """A gap that is not positive in the fit range: all-NaN result, no exception, no warning."""
    k = K_SYN
    b = _synthetic(_h0_curve(), 0.3, 1, 9)[0]
    for bad_value in (0.0, -1e-3):
        bb = b.copy()
        bb[:, -3] = bad_value
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            fit = fit_rate(k, bb, K_MIN_SYN)
        for name in ("slope", "slope_se", "ci_low", "ci_high", "p_half", "p_one", "intercept", "curvature"):
            assert np.isnan(getattr(fit, name)), name
        assert np.all(np.isnan(fit.fitted)) and np.all(np.isnan(fit.std_resid))
        assert not _verdict_slope(fit)  # NaN fails the verdict, never passes silently
    # the constant column 0.0 has MCSE exactly 0: the c1 fit cannot weight it and returns NaN
    bb = b.copy()
    bb[:, -3] = 0.0
    assert np.all(np.isnan(fit_inverse_powers(k, bb, K_MIN_SYN).coef))
    # positive mean but a non-positive leave-one-out mean: the point estimate exists, its SE is
    # NaN (and the verdict fails)
    bb = b.copy()
    bb[0, -1] = 1.0
    bb[1:, -1] = -0.01  # mean (1 - 0.31)/32 > 0; without block 0 the mean is -0.01
    assert bb[:, -1].mean() > 0
    fit = fit_rate(k, bb, K_MIN_SYN)
    assert np.isfinite(fit.slope) and np.isnan(fit.slope_se) and np.isnan(fit.p_half)
    assert not _verdict_slope(fit)


def test_fit_rate_drops_failed_blocks_and_needs_three():
    k = K_SYN
    b = _synthetic(_h0_curve(), 0.3, 1, 10)[0]
    bb = b.copy()
    bb[4, 2] = np.nan
    fit = fit_rate(k, bb, K_MIN_SYN)
    assert fit.n_blocks == b.shape[0] - 1
    assert fit.slope == fit_rate(k, np.delete(b, 4, axis=0), K_MIN_SYN).slope
    assert np.isnan(fit_rate(k, b[:2], K_MIN_SYN).slope)
    assert np.isnan(fit_rate(k, b, 4096).slope)  # one point cannot fit three parameters
    with pytest.raises(ValueError, match="'blocks'"):
        fit_rate(k, b[:, :-1], K_MIN_SYN)


def test_choose_k_min_and_z_score():
    k = k_grid(4096)
    assert choose_k_min(k, 10.0) == 256  # 160 -> 256
    assert choose_k_min(k, 16.0) == 256  # boundary included
    assert choose_k_min(k, 2.9105793, 16.0) == 64
    assert choose_k_min(k, 1e6) == 4096  # beyond the grid: the last point
    assert choose_k_min(k, 10.0, 0.0) == 1
    assert z_score(5.6, 0.03, 5.5, 0.04) == pytest.approx(2.0)


def test_combine_verdicts_and_worst_slope():
    """The claim-table helpers: error outranks fail outranks pass; the slope farthest from the target
    in standard errors (a non-finite one first) is the reported estimate."""
    assert combine_verdicts(["pass", "pass"]) == "pass"
    assert combine_verdicts(["pass", "fail"]) == "fail"
    assert combine_verdicts(np.array([["fail", "error"], ["pass", "pass"]], dtype=object)) == "error"
    assert worst_slope([-1.01, -0.9, -1.0], [0.01, 0.2, 0.1]) == 0  # 1 SE, 0.5 SE, 0 SE
    assert worst_slope([-1.0, np.nan], [0.1, 0.1]) == 1
    assert worst_slope([0.1, -0.4], [0.1, 0.1], target=-0.5) == 0


@pytest.mark.deterministic(reason="fit_rate / fit_inverse_powers (reweight=True) against a hand implementation on the same draw (rtol <= 1e-8)")
def test_reweighted_jackknife_matches_hand():
    """``reweight=True``: every delete-one-block replicate re-estimates the weights from the blocks left in
    ((mean/mcse)^2 for the log-log fit, 1/mcse^2 for the inverse-power fit); the estimates are those of the
    fixed-weight fit (the full sample's weights), only the SE changes."""
    k = K_SYN
    b = _synthetic(_h0_curve(), 0.5, 1, 9)[0][:12]
    k_min, sel, n = 32, K_SYN >= 32, 12

    def ms(bb):
        return bb.mean(axis=0), bb.std(axis=0, ddof=1) / np.sqrt(bb.shape[0])

    x = np.column_stack([np.ones(sel.sum()), np.log(k[sel]), 1.0 / k[sel]])
    reps = []
    for i in range(n):
        m, s = ms(np.delete(b, i, axis=0))
        reps.append(_wls(np.log(m[sel]), x, (m[sel] / s[sel]) ** 2))
    reps = np.array(reps)
    se = np.sqrt((n - 1) / n * np.sum((reps - reps.mean(axis=0)) ** 2, axis=0))
    fixed, rw = fit_rate(k, b, k_min), fit_rate(k, b, k_min, reweight=True)
    assert rw.slope == fixed.slope and rw.slope_se == pytest.approx(se[1], rel=1e-8)
    xi = np.column_stack([1.0 / k[sel], 1.0 / k[sel] ** 2])
    reps = []
    for i in range(n):
        m, s = ms(np.delete(b, i, axis=0))
        reps.append(_wls(m[sel], xi, 1.0 / s[sel] ** 2))
    reps = np.array(reps)
    se = np.sqrt((n - 1) / n * np.sum((reps - reps.mean(axis=0)) ** 2, axis=0))
    f0, f1 = fit_inverse_powers(k, b, k_min), fit_inverse_powers(k, b, k_min, reweight=True)
    np.testing.assert_array_equal(f0.coef, f1.coef)
    np.testing.assert_allclose(f1.se, se, rtol=1e-8)


def _skewed_blocks(rng, n_blocks):
    """Blocks of gap_k = 5/k (1 + 0.3 (e^{e/2} - E e^{e/2})), e = 0.6 z_block + 0.8 z_(block, k): a true
    slope of -1 with right-skewed noise shared across k (as the common random numbers of a block give), so
    that a block which raises gap_k also raises its MCSE -- what correlates WLS weights with the curve."""
    e = 0.6 * rng.standard_normal((n_blocks, 1)) + 0.8 * rng.standard_normal((n_blocks, K_SYN.size))
    return 5.0 / K_SYN * (1.0 + 0.3 * (np.exp(0.5 * e) - np.exp(0.125)))


@pytest.mark.statistical
@pytest.mark.false_fail(2e-5, reason="two one-sided z bounds at 4.26 (1e-5 each): the paired difference of mean t^2 (observed 7 SE) and the reweighted mean t^2 against t_23's 1.095 (observed 0.93, below it)")
def test_fixed_weights_make_the_jackknife_anticonservative():
    """With skewed blocks (24 of them, as asymmetry's former quick design), t = (slope + 1) / SE over 300
    synthetic datasets: with the full sample's weights held fixed, the SE is smaller than with the weights
    re-estimated per replicate, and the mean of t^2 larger (pilot of 1500 datasets, seed 1: 1.24 fixed, 1.01
    re-estimated, against Student t_23's 23/21 = 1.095; this test's 300 datasets: 1.09 and 0.93, paired
    difference 0.158 +- 0.022). Checks: the paired difference of mean t^2 (fixed - reweighted) exceeds 0 by
    4.26 of its SE, and the reweighted mean t^2 is not above 1.095 by 4.26 of its SE (one-sided 1e-5 each).
    Smallest discrepancy detected: a reweighted E[t^2] above 1.095 by ~0.4 (4.26 SE of the mean of 300)."""
    rng = np.random.default_rng(20261202)
    t_fix, t_rw = [], []
    for _ in range(300):
        b = _skewed_blocks(rng, 24)
        f0, f1 = fit_rate(K_SYN, b, 64), fit_rate(K_SYN, b, 64, reweight=True)
        t_fix.append((f0.slope + 1.0) / f0.slope_se)
        t_rw.append((f1.slope + 1.0) / f1.slope_se)
    t2f, t2r = np.array(t_fix) ** 2, np.array(t_rw) ** 2
    d = t2f - t2r
    z = stats.norm.isf(1e-5)
    assert d.mean() > z * d.std(ddof=1) / np.sqrt(d.size), (t2f.mean(), t2r.mean())
    assert t2r.mean() <= 23 / 21 + z * t2r.std(ddof=1) / np.sqrt(t2r.size), t2r.mean()
