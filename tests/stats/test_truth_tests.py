"""Tests of simkit.stats.truth_tests on synthetic data with known truth: rejection rates under the null
within binomial intervals of alpha, and power against shifted curves compared with the exact
non-central F power."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from simkit.stats.truth_tests import curve_test, dgap_exact, dgap_test, t_check

N_REP = 1000
# a binomial(1000, alpha) count is outside alpha +- 4.42 sd with probability ~1e-5 (normal approx.; each
# test registers the exact binomial tail). The band detects a size outside it: [0.020, 0.080] at alpha = 0.05,
# above 0.024 at alpha = 0.01 (no lower limit there), with power >= 1/2 at the edges
Z_META = 4.42


def _band(alpha, n=N_REP, z=Z_META):
    half = z * math.sqrt(alpha * (1 - alpha) / n)
    return alpha - half, alpha + half


def _outside(p, lo=-math.inf, hi=math.inf, n=N_REP):
    """Exact probability that a Binomial(n, p) proportion falls outside [lo, hi]: the false-failure
    rate of a band check on a rejection count whose true rejection probability is p."""
    k = np.arange(n + 1)
    return float(stats.binom.pmf(k, n, p)[(k / n < lo) | (k / n > hi)].sum())


def _band_rate(alpha):
    return _outside(alpha, *_band(alpha))


# exact power of the shifted curve of test_hotelling_power_matches_noncentral_f (see there)
_POWER = float(stats.ncf.sf(stats.f.isf(0.01, 8, 24), 8, 24,
                            32 * np.ones(8) @ np.linalg.solve(0.9 ** np.abs(np.subtract.outer(np.arange(8), np.arange(8))),
                                                              np.ones(8)) * 0.75**2))
_HALF = Z_META * math.sqrt(_POWER * (1 - _POWER) / N_REP)
# size of the normal quantile with 15 df (test_t_check_size_and_normal_contrast), exact
_NORMAL_SIZE = float(2 * stats.t.sf(stats.norm.isf(0.005), 15))
# chi-square reference with V = S/n, n = 32, p = 6: measured size 0.0682 +- 0.0018, F reference 0.013
# (20 000 replicates, seed 99999, not used by any test); the register uses 0.064 for chi-square, two
# SE under the estimate, and the F reference's nominal 0.05 (conservative for both)
_CHI2_SIZE_LOW = 0.064


def _curve_cov(p, rho=0.9, scale=None):
    """A covariance like a CRN curve's: strong positive correlation between neighbouring k."""
    idx = np.arange(p)
    c = rho ** np.abs(idx[:, None] - idx[None, :])
    sd = np.ones(p) if scale is None else scale
    return c * np.outer(sd, sd)


def _rejections(rng, n_blocks, p, cov, shift, alpha, **kw):
    mu = np.linspace(1.0, 0.01, p)
    chol = np.linalg.cholesky(cov)
    pv = np.empty(N_REP)
    for r in range(N_REP):
        blocks = mu + shift + rng.standard_normal((n_blocks, p)) @ chol.T
        pv[r] = curve_test(blocks, mu, **kw).p_value
    return np.mean(pv < alpha), pv


@pytest.mark.statistical
@pytest.mark.parametrize("alpha", [
    pytest.param(a, marks=pytest.mark.false_fail(
        _band_rate(a) + 1e-5, reason="exact Binomial(1000, alpha) tail outside the band + KS at 1e-5"))
    for a in (0.05, 0.01)])
def test_hotelling_size(alpha):
    """Gaussian blocks (n = 32, p = 8): the F reference is exact, so the rejection count is
    Binomial(1000, alpha). Meta false-failure rate ~1e-5 per alpha (fixed seed); the band detects a
    size outside [0.020, 0.080] (alpha = 0.05), above 0.024 (alpha = 0.01); KS detects
    sup |G - F| >= 0.12 (DKW-Massart, power 0.999)."""
    rng = np.random.default_rng(101)
    rate, pv = _rejections(rng, 32, 8, _curve_cov(8), 0.0, alpha)
    lo, hi = _band(alpha)
    assert lo <= rate <= hi, rate
    # the p-values are uniform: Kolmogorov-Smirnov at the 1e-5 level
    assert stats.kstest(pv, "uniform").pvalue > 1e-5


@pytest.mark.statistical
@pytest.mark.false_fail(_outside(_POWER, _POWER - _HALF, _POWER + _HALF), reason="exact Binomial(1000, power) tail outside power +- 4.42 sd, at the exact non-central F power")
def test_hotelling_power_matches_noncentral_f():
    """A shifted curve: empirical power agrees with the exact non-central F power
    (noncentrality n delta' Sigma^-1 delta) within the binomial band (meta false-failure ~1e-5;
    detects an empirical power off by more than 0.066),
    and the shift used (a constant 0.75 sd at every k, 32 blocks; along the curve's most correlated
    direction, the hardest for a joint test) has exact power 0.66 at alpha = 0.01."""
    rng = np.random.default_rng(202)
    n, p, alpha = 32, 8, 0.01
    cov = _curve_cov(p)
    shift = 0.75 * np.ones(p)
    rate, _ = _rejections(rng, n, p, cov, shift, alpha)
    lam = n * shift @ np.linalg.solve(cov, shift)
    crit = stats.f.isf(alpha, p, n - p)
    power = stats.ncf.sf(crit, p, n - p, lam)
    half = Z_META * math.sqrt(power * (1 - power) / N_REP)
    assert abs(rate - power) <= half, (rate, power)
    assert 0.5 < power < 0.8


@pytest.mark.statistical
@pytest.mark.false_fail(_band_rate(0.05), reason="exact Binomial(1000, 0.05) tail outside the band (the merged test is exact)")
def test_hotelling_merged_columns_size():
    """p = 40 columns with 16 blocks: merged into 14 groups (documented), still an exact test."""
    rng = np.random.default_rng(303)
    alpha = 0.05
    rate, _ = _rejections(rng, 16, 40, _curve_cov(40, rho=0.95), 0.0, alpha)
    res = curve_test(rng.standard_normal((16, 40)), np.zeros(40))
    assert res.merged and res.n_columns == 14 and res.df == (14.0, 2.0)
    lo, hi = _band(alpha)
    assert lo <= rate <= hi, rate


@pytest.mark.statistical
@pytest.mark.false_fail(_band_rate(0.05), reason="exact Binomial(1000, 0.05) tail outside the band, at the nominal size (the chi-square reference is a large-n approximation)")
def test_chi_square_with_estimated_exact_curve_size():
    """Exact curve with its own noise (covariance V, given): chi-square reference, a large-n
    approximation; with 400 blocks and p = 6 the size is alpha within the binomial band."""
    rng = np.random.default_rng(404)
    n, p, alpha = 400, 6, 0.05
    cov = _curve_cov(p)
    mu = np.linspace(1.0, 0.1, p)
    se_exact = 0.03 * np.ones(p)
    chol = np.linalg.cholesky(cov)
    pv = np.empty(N_REP)
    for r in range(N_REP):
        blocks = mu + rng.standard_normal((n, p)) @ chol.T
        ex = mu + se_exact * rng.standard_normal(p)
        pv[r] = curve_test(blocks, ex, se_exact, reference="chi2").p_value
    lo, hi = _band(alpha)
    assert lo <= np.mean(pv < alpha) <= hi


@pytest.mark.statistical
@pytest.mark.false_fail(_band_rate(0.01) + (1 - (_NORMAL_SIZE - 0.01)) ** N_REP, reason="exact Binomial(1000, 0.01) band tail + P(no |t| between the normal and t quantiles)")
def test_t_check_size_and_normal_contrast():
    """Student t(n - 1): exact size for Gaussian blocks (16 blocks, alpha = 0.01); the normal
    quantile 2.576 rejects at 0.0211 instead (shown, not required: on the same draws it rejects more
    often; asserting its rate above the band, 0.0204, would fail by chance with probability 0.46,
    and above alpha with 0.0056)."""
    rng = np.random.default_rng(505)
    n, alpha = 16, 0.01
    rej, rej_normal = 0, 0
    for _ in range(N_REP):
        b = 2.0 + rng.standard_normal(n)
        res = t_check(b.mean(), b.std(ddof=1) / math.sqrt(n), 2.0, n_blocks=n)
        rej += res.p_value < alpha
        rej_normal += abs(res.statistic) > stats.norm.isf(alpha / 2)
    lo, hi = _band(alpha)
    assert lo <= rej / N_REP <= hi
    # the normal reference is anti-conservative with 15 df; strictly more rejections unless no |t| of the
    # 1000 falls between 2.576 and t_15(0.995) = 2.947, probability (1 - 0.0111)^1000 = 1.4e-5
    assert rej_normal > rej, (rej_normal, rej)


def test_t_check_values():
    res = t_check(1.1, 0.05, 1.0, 0.0, n_blocks=64)
    assert res.df == (63.0,)
    assert abs(res.statistic - 2.0) < 1e-12
    assert abs(res.p_value - 2 * stats.t.sf(2.0, 63)) < 1e-15
    assert abs(t_check(1.1, 0.03, 1.0, 0.04, n_blocks=10).statistic - 2.0) < 1e-12
    with pytest.raises(ValueError, match="'se' must be > 0"):
        t_check(1.0, 0.0, 1.0, n_blocks=4)


@pytest.mark.false_fail(1e-5, reason="null p-value > 1e-5 (exact Hotelling F; detects a common shift of 0.81 block sd, 0.008, in the 4 differences with power 0.999); the shifted control misses with probability < 1e-38 (non-central F)")
def test_dgap_exact_and_test():
    ks = np.array([1, 2, 4, 8, 16])
    gap = 3.0 / ks + 1.0 / ks**2
    k, d, se = dgap_exact(ks, gap, 0.1 * np.ones(5))
    np.testing.assert_array_equal(k, [1, 2, 4, 8])
    np.testing.assert_allclose(d, gap[:-1] - gap[1:], rtol=1e-15)
    np.testing.assert_allclose(se, np.sqrt(0.02) * np.ones(4))
    rng = np.random.default_rng(6)
    blocks = d + 0.01 * rng.standard_normal((40, 4))
    assert dgap_test(blocks, ks, gap).p_value > 1e-5
    assert dgap_test(blocks + 0.02, ks, gap).p_value < 1e-6


def test_curve_test_errors():
    with pytest.raises(ValueError, match="'exact' must have shape"):
        curve_test(np.zeros((5, 3)), np.zeros(2))
    with pytest.raises(ValueError, match="'blocks' must be finite"):
        curve_test(np.array([[np.nan, 1.0], [1.0, 1.0], [0.0, 0.0]]), np.zeros(2))
    with pytest.raises(ValueError, match="at least 3 rows"):
        curve_test(np.zeros((2, 3)), np.zeros(3))


@pytest.mark.statistical
@pytest.mark.false_fail(_outside(0.05, hi=_band(0.05)[1]) + (1 - (_CHI2_SIZE_LOW - 0.05)) ** N_REP, reason="upper Binomial(1000, alpha) tail (the F reference's size is <= alpha) + P(no Q between the two critical values)")
def test_f_reference_with_estimated_exact_curve_is_conservative():
    """32 blocks, p = 6, exact-curve covariance V = S/n (the two errors of equal size): the default
    F reference rejects at most alpha (upper binomial band), while chi-square over-rejects
    (measured, 0.068 +- 0.002 over 20 000 replicates; required only to reject more often than F on
    the same draws: asserting > alpha at 1000 replicates would fail by chance with probability ~0.01-0.04)."""
    rng = np.random.default_rng(606)
    n, p, alpha = 32, 6, 0.05
    cov = _curve_cov(p)
    mu = np.linspace(1.0, 0.1, p)
    v = cov / n
    chol, chol_v = np.linalg.cholesky(cov), np.linalg.cholesky(v)
    rej_f, rej_c = 0, 0
    for _ in range(N_REP):
        blocks = mu + rng.standard_normal((n, p)) @ chol.T
        ex = mu + chol_v @ rng.standard_normal(p)
        rej_f += curve_test(blocks, ex, exact_cov=v).p_value < alpha
        rej_c += curve_test(blocks, ex, exact_cov=v, reference="chi2").p_value < alpha
    lo, hi = _band(alpha)
    assert rej_f / N_REP <= hi
    # chi2.sf(Q, 6) < F-scaled p for every Q here, so rej_c >= rej_f; equality needs no Q of the 1000
    # between the two critical values (probability ~0.055 each): (1 - 0.055)^1000 < 1e-24
    assert rej_c > rej_f, (rej_c, rej_f)


@pytest.mark.false_fail(_outside(0.05, 4 / 400, 42 / 400, n=400) + 2.8e-5, reason="exact Binomial(400, 0.05) tail outside [4, 42] + the positive control's non-central F miss; the blind version's p <= 0.05 is negligible")
def test_dgap_test_with_the_exact_curves_covariance():
    """A Monte Carlo exact curve whose error is common to every k (one sample over x): the
    differences carry none of it. With the full covariance (D V D') the test keeps its size and
    detects a dgap shift of 0.03 that the per-k MCSE version (errors treated as independent,
    sd 0.7 per difference) cannot see. Deterministic seeds; the size check is a binomial band."""
    ks = np.array([1, 2, 4, 8, 16])
    gap = 3.0 / ks + 1.0 / ks**2
    _, d, _ = dgap_exact(ks, gap)
    v = 0.25 * np.ones((5, 5))  # perfectly correlated error of sd 0.5
    rng = np.random.default_rng(20261202)
    p_null = []
    for _ in range(400):
        exact = gap + 0.5 * rng.standard_normal()
        blocks = d + 0.05 * rng.standard_normal((64, 4))
        p_null.append(dgap_test(blocks, ks, exact, exact_gap_cov=v).p_value)
    # size: 400 draws at alpha 0.05, expected 20 rejections; outside [4, 42] with prob 4.9e-6 (detects a
    # size outside [0.01, 0.105])
    assert 4 <= sum(p < 0.05 for p in p_null) <= 42
    exact = gap + 0.5 * rng.standard_normal()
    shifted = d + 0.03 + 0.05 * rng.standard_normal((64, 4))
    # positive control: Hotelling on 64 blocks, p = 4, noncentrality 64 * 4 * 0.6^2 = 92.2 (the exact
    # curve's common error cancels in the differences), misses p < 1e-4 with probability 2.8e-5
    # (non-central F; at 1e-6 it would miss with 3.3e-3)
    assert dgap_test(shifted, ks, exact, exact_gap_cov=v).p_value < 1e-4
    assert dgap_test(shifted, ks, exact, np.sqrt(np.diag(v))).p_value > 0.05  # the old, blind version
    with pytest.raises(ValueError, match="'exact_gap_cov' must be"):
        dgap_test(shifted, ks, exact, exact_gap_cov=np.ones((4, 4)))


# ---- max |t| with the Efron bootstrap reference (curve_test(reference="max-t"), truth_tests.max_t_test) ----
# n = 48 blocks, p = 14 columns with correlation 0.9^|i-j| (asymmetry's quick design: 48 blocks, 14 k), B = 999.
# Sizes measured offline over 10 000 replicates each (seeds 777001-777003, not used by any test:
# docs/diagnostics/max_t_synthetic_sizes.py and .json): MAXT_SIZE[(case, alpha)] = (rate, MCSE). "lognormal":
# every block is the mean of 128 anchors exp(1.5 z), z ~ N(0, the same correlation) -- skewed, heavy-tailed block
# means (skewness 33.5 / sqrt(128) = 3.0, excess kurtosis 10075 / 128 = 79, exactly), as brown-vmf-d3's are at
# small k, where Hotelling's F reference over-rejects.
MAXT_SIZE = {("gauss", 0.01): (0.0084, 0.0009), ("gauss", 0.05): (0.0480, 0.0021),
             ("gauss_v", 0.01): (0.0087, 0.0009), ("gauss_v", 0.05): (0.0482, 0.0021),
             ("lognormal", 0.01): (0.0085, 0.0009), ("lognormal", 0.05): (0.0493, 0.0022)}
# Hotelling's F reference on the same lognormal blocks: (0.0311, 0.0017) at 0.01, (0.1105, 0.0031) at 0.05
F_LOGNORMAL_SIZE = (0.1105, 0.0031)
MAXT_N, MAXT_P, MAXT_B = 48, 14, 999
# the lognormal case's band: its positive control (F's size 0.11 above the band) needs the narrower 3.29-sd band,
# so the two cannot both be below 1e-4 at 1000 replicates; that case runs in the slow suite
Z_LOGNORMAL = 3.29


def _maxt_z(case):
    return Z_LOGNORMAL if case == "lognormal" else Z_META


def _maxt_size_rate(case):
    """False-failure rate of the band check below: the exact binomial tail outside the band, at the worse
    end of the measured size +- 2 MCSE."""
    r, se = MAXT_SIZE[(case, 0.05)]
    return max(_outside(p, *_band(0.05, z=_maxt_z(case))) for p in (r - 2 * se, r + 2 * se))


def _maxt_cov():
    idx = np.arange(MAXT_P)
    return 0.9 ** np.abs(idx[:, None] - idx[None, :])


def _lognormal_blocks(rng, chol):
    z = rng.standard_normal((MAXT_N, 128, MAXT_P)) @ chol.T
    return np.exp(1.5 * z).mean(axis=1)


@pytest.mark.deterministic(reason="fixed inputs and generator: equalities, ranges and refusals")
def test_max_t_test_values_determinism_and_errors():
    from simkit.stats.truth_tests import N_BOOT, max_t_test

    rng = np.random.default_rng(4242)
    chol = np.linalg.cholesky(_maxt_cov())
    mu = np.linspace(1.0, 0.01, MAXT_P)
    b = mu + rng.standard_normal((MAXT_N, MAXT_P)) @ chol.T
    res = max_t_test(b, mu, rng=np.random.default_rng(1))
    # the statistic by hand
    t = np.abs(b.mean(0) - mu) / (b.std(0, ddof=1) / np.sqrt(MAXT_N))
    assert res.statistic == pytest.approx(float(t.max()), rel=1e-13)
    assert res.df == (float(N_BOOT),) and res.n_columns == MAXT_P and not res.merged
    assert 1 / (N_BOOT + 1) <= res.p_value <= 1 and (res.p_value * (N_BOOT + 1)) % 1 == pytest.approx(0, abs=1e-9)
    # a function of the inputs and the generator's state alone; curve_test delegates; dgap_test passes rng on
    assert max_t_test(b, mu, rng=np.random.default_rng(1)) == res
    assert curve_test(b, mu, reference="max-t", rng=np.random.default_rng(1)) == res
    ks = 1 << np.arange(MAXT_P + 1)
    gap = np.concatenate([np.cumsum(mu[::-1])[::-1], [0.0]])  # gap_k - gap_2k = mu
    assert dgap_test(b, ks, gap, reference="max-t", rng=np.random.default_rng(1)).p_value == res.p_value
    # the exact curve's error widens the denominator: a smaller statistic
    v = np.diag(np.full(MAXT_P, 0.05))
    assert max_t_test(b, mu, exact_cov=v, rng=np.random.default_rng(1)).statistic < res.statistic
    assert max_t_test(b, mu, np.sqrt(np.diag(v)), rng=np.random.default_rng(2)).statistic == pytest.approx(
        max_t_test(b, mu, exact_cov=v, rng=np.random.default_rng(3)).statistic, rel=1e-15)
    with pytest.raises(ValueError, match="'rng' must be a numpy Generator"):
        curve_test(b, mu, reference="max-t")
    with pytest.raises(ValueError, match="'rng' must be a numpy Generator"):
        max_t_test(b, mu, rng=1)
    with pytest.raises(ValueError, match="'n_boot' must be"):
        max_t_test(b, mu, rng=np.random.default_rng(1), n_boot=10)
    with pytest.raises(ValueError, match="must vary between blocks"):
        max_t_test(np.ones((MAXT_N, 3)), np.ones(3), rng=np.random.default_rng(1))
    with pytest.raises(ValueError, match="'exact_cov' must be"):
        max_t_test(b, mu, exact_cov=np.eye(3), rng=np.random.default_rng(1))
    with pytest.raises(ValueError, match="'reference' must be 'F', 'chi2' or 'max-t'"):
        curve_test(b, mu, reference="bootstrap")


@pytest.mark.deterministic(reason="fixed inputs and generators: field names, equalities and refusals")
def test_truth_verdict_max_t_reference():
    from simkit.stats.analysis import TRUTH_FIELDS, TRUTH_FIELDS_MAX_T, truth_fields, truth_rng, truth_verdict

    rng = np.random.default_rng(99)
    k = 1 << np.arange(MAXT_P)
    gap = 3.0 / k
    b = gap + 0.01 * rng.standard_normal((MAXT_N, MAXT_P))
    dg = (gap[:-1] - gap[1:]) + 0.01 * rng.standard_normal((MAXT_N, MAXT_P - 1))
    args = (k, b, dg, gap, None, (1.0, 0.5), (1.2, 0.0))
    f_fields, _ = truth_verdict(*args, alpha=1e-3)
    m_fields, problems = truth_verdict(*args, alpha=1e-3, reference="max-t", rng=truth_rng(7, "uniform-d3"))
    assert tuple(f_fields) == TRUTH_FIELDS == truth_fields("F") and tuple(m_fields) == TRUTH_FIELDS_MAX_T
    assert truth_fields("max-t") == TRUTH_FIELDS_MAX_T and m_fields["c2_t"] == f_fields["c2_t"]
    assert problems == [] and m_fields["curve_p"] > 1e-3 and m_fields["dgap_p"] > 1e-3
    # the generator is a function of (seed, setting) only
    again, _ = truth_verdict(*args, alpha=1e-3, reference="max-t", rng=truth_rng(7, "uniform-d3"))
    other, _ = truth_verdict(*args, alpha=1e-3, reference="max-t", rng=truth_rng(7, "vmf-d8"))
    assert again == m_fields and other["curve_max_t"] == m_fields["curve_max_t"]
    assert other["curve_p"] != m_fields["curve_p"] or other["dgap_p"] != m_fields["dgap_p"]
    # positive control: a curve 5% off at every k fails both tests
    bad, problems = truth_verdict(k, b, dg, gap * 1.05, None, (1.0, 0.5), (1.2, 0.0), alpha=1e-3, reference="max-t",
                                  rng=truth_rng(7, "uniform-d3"))
    assert bad["curve_p"] < 1e-3 and any("max |t| p" in p for p in problems)
    with pytest.raises(ValueError, match="'rng' must be a numpy Generator when reference='max-t'"):
        truth_verdict(*args, alpha=1e-3, reference="max-t")
    with pytest.raises(ValueError, match="'reference' must be 'F' or 'max-t'"):
        truth_verdict(*args, alpha=1e-3, reference="chi2")


@pytest.mark.statistical
@pytest.mark.parametrize("case", [
    pytest.param(c, marks=[pytest.mark.false_fail(
        _maxt_size_rate(c) + (1.0 - _outside(F_LOGNORMAL_SIZE[0] - 2 * F_LOGNORMAL_SIZE[1],
                                             hi=_band(0.05, z=Z_LOGNORMAL)[1]) if c == "lognormal" else 0.0),
        reason="exact Binomial(1000, size) tail outside the band at the measured size +- 2 MCSE (+ for lognormal "
               "the positive control's miss: Binomial(1000, F's measured size - 2 MCSE) at or under the band)"),
        *([pytest.mark.slow] if c == "lognormal" else [])])
    for c in ("gauss", "gauss_v", "lognormal")])
def test_max_t_size(case):
    """Rejections at alpha = 0.05 over 1000 replicates within the binomial band of 0.05 (Gaussian blocks; Gaussian
    blocks with a Monte Carlo exact curve of covariance V = S/n; lognormal, heavy-tailed block means). Positive
    control: on the same lognormal blocks, Hotelling's F reference rejects above the band (its measured size is
    0.11): the failure max-t was brought in to fix (asymmetry's brown-vmf-d3, docs/diagnostics/). The Gaussian
    cases detect a size outside [0.020, 0.080] (4.42-sd band, rate ~1e-5); the lognormal case and its control
    use [0.027, 0.073] (3.29 sd, rate ~6e-3, slow suite)."""
    rng = np.random.default_rng({"gauss": 20261211, "gauss_v": 20261212, "lognormal": 20261213}[case])
    cov = _maxt_cov()
    chol = np.linalg.cholesky(cov)
    mu = np.linspace(1.0, 0.01, MAXT_P)
    chol_v = np.linalg.cholesky(cov / MAXT_N)
    rej, rej_f = 0, 0
    for _ in range(N_REP):
        v = None
        if case == "lognormal":
            b, m = _lognormal_blocks(rng, chol), np.full(MAXT_P, math.exp(1.5**2 / 2))
        else:
            b, m = mu + rng.standard_normal((MAXT_N, MAXT_P)) @ chol.T, mu
            if case == "gauss_v":
                v, m = cov / MAXT_N, mu + chol_v @ rng.standard_normal(MAXT_P)
        rej += curve_test(b, m, exact_cov=v, reference="max-t", rng=rng, n_boot=MAXT_B).p_value < 0.05
        if case == "lognormal":
            rej_f += curve_test(b, m).p_value < 0.05
    lo, hi = _band(0.05, z=_maxt_z(case))
    assert lo <= rej / N_REP <= hi, rej
    if case == "lognormal":
        assert rej_f / N_REP > hi, rej_f
