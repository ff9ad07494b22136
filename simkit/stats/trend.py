"""Growth, trend and non-inferiority tests of a curve estimated from independent replicate blocks.

Every test here takes ``blocks`` of shape ``(n_blocks, J)``: one estimate per block at each of J
levels, with common random numbers across the levels within a block (so the points of a curve are
correlated and only the blocks are independent). Blocks holding a NaN are dropped. Standard errors
come from the spread of per-block slopes or from the delete-one-block jackknife, and every t test
uses ``n_blocks - 1`` degrees of freedom.

* :func:`trend_test`: mean of per-block OLS slopes, one- or two-sided t test;
* :func:`equivalence_test`: two one-sided tests (TOST) of ``|slope| < margin`` on a :class:`TrendTest`;
* :func:`one_sided_rate`: log-log WLS slope against a bound (the rate regression of
  :func:`simkit.stats.analysis.fit_rate`);
* :func:`growth_non_inferiority` / :func:`non_inferiority`: ``2^b - 1 < delta`` per doubling of the level,
  :func:`non_inferiority_miss_rate` (planned, noncentral t) and :func:`non_inferiority_plugin_miss_rate`
  (the run's SEs, central t): two definitions of its miss rate at zero growth; :func:`union_bound`;
* :func:`log_sd_slope`, :func:`relative_trend_se`: jackknife slopes of derived curves;
* over a fit range k >= k_min and for ratio curves: :func:`log2_slope`, :func:`fit_range_non_inferiority`,
  :func:`growth_test` (one-sided growth), :func:`wls_slope_test` (log-log WLS slope against 0);
* :func:`sqrt_k_term_test` (a 1/sqrt(k) term beside 1/k), :func:`paired_change`, :func:`paired_t_power`.

Detectable effect, one definition for the library: the effect beyond the null (towards H1) that a test
with critical value ``t_crit`` detects with probability :data:`DETECT_POWER` = 0.9 is
``(t_crit + t_0.9) SE`` (:func:`detectable_t`; ``t_0.9`` the Student-t quantile on the test's df). Every
test here that states a detectable effect uses it; datasets name it ``<statistic>_mde``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import stats

from simkit.stats.analysis import fit_rate, jackknife, mean_mcse

__all__ = ["DETECT_POWER", "TrendTest", "trend_test", "Equivalence", "equivalence_test", "RateCheck", "one_sided_rate",
           "NonInferiority", "growth_non_inferiority", "non_inferiority", "non_inferiority_miss_rate",
           "non_inferiority_plugin_miss_rate", "union_bound", "log_sd_slope",
           "relative_trend_se", "detectable_t", "log2_slope", "fit_range_non_inferiority", "growth_test",
           "wls_slope_test", "GrowthRule", "growth_rule", "sqrt_k_term_test", "paired_t_power",
           "paired_change"]

_ALTERNATIVES = ("greater", "less", "two-sided")

#: detection probability of every detectable effect (minimum detectable effect, ``mde``) the library states
DETECT_POWER = 0.9


def detectable_t(critical: float, df: float, se: float, power: float = DETECT_POWER) -> float:
    """``(critical + t_power(df)) se``: the effect (beyond the null, towards H1) that a t test with critical
    value ``critical`` (``t_{1-alpha}``, or ``t_{1-alpha/2}`` two-sided) on ``df`` degrees of freedom detects
    with probability about ``power`` (normal-shift approximation of the noncentral t: 0.887-0.902 for 0.9 at
    30-200 df and levels 5e-4 to 0.05; the far tail of a two-sided test ignored). The library's single
    definition, at :data:`DETECT_POWER`."""
    return (critical + float(stats.t.ppf(power, df))) * se


def _finite_blocks(x: NDArray, blocks: ArrayLike) -> NDArray:
    b = np.asarray(blocks, dtype=float)
    if b.ndim != 2 or b.shape[1] != x.size:
        raise ValueError(f"'blocks' must have shape (n_blocks, {x.size}), got {b.shape}")
    return b[np.all(np.isfinite(b), axis=1)]


def _per_block_slopes(x: NDArray, b: NDArray) -> NDArray:
    xc = x - x.mean()
    return (b - b.mean(axis=1, keepdims=True)) @ xc / np.dot(xc, xc)


@dataclass(frozen=True)
class TrendTest:
    """A t test on the mean over blocks of per-block OLS slopes of y on x (see :func:`trend_test`)."""

    slope: float
    se: float
    t: float
    df: int
    p: float
    critical: float
    reject: bool
    detect: float  # |slope| detected with probability ``power`` (:func:`detectable_t`)
    alternative: str
    n_blocks: int
    slopes: NDArray[np.float64]


def trend_test(x: ArrayLike, blocks: ArrayLike, *, alternative: str, alpha: float,
               power: float = DETECT_POWER) -> TrendTest:
    """Test the slope of y on x from independent blocks (common random numbers across x within a block).

    Parameters
    ----------
    x : array_like, shape (J,)
        Levels (e.g. log2 k), at least two distinct.
    blocks : array_like, shape (n_blocks, J)
        Per-block estimates at each level; blocks with a NaN are dropped.
    alternative : {"greater", "less", "two-sided"}
        H1. "greater": H0 slope <= 0 is rejected when t > t_{1-alpha}.
    alpha, power : float
        Level, and the detection probability of the stated detectable slope ``detect`` (keep the
        default :data:`DETECT_POWER`: one definition of the detectable effect across studies).

    Returns
    -------
    TrendTest
        ``slope`` = mean of the per-block OLS slopes (equal to the OLS slope of the mean curve),
        ``se`` = their sd / sqrt(n_blocks), t with n_blocks - 1 df, its p-value, and
        ``detect = (t_{1-alpha(/2)} + t_{power}) se``. Fewer than 3 finished blocks: all NaN, no rejection.
    """
    if alternative not in _ALTERNATIVES:
        raise ValueError(f"'alternative' must be 'greater', 'less' or 'two-sided', got {alternative!r}")
    x = np.asarray(x, dtype=float)
    b = np.asarray(blocks, dtype=float)
    if b.ndim != 2 or b.shape[1] != x.size:
        raise ValueError(f"'blocks' must have shape (n_blocks, {x.size}), got {b.shape}")
    if np.unique(x).size < 2:
        raise ValueError("'x' must hold at least two distinct levels")
    b = b[np.all(np.isfinite(b), axis=1)]
    n = b.shape[0]
    nan = float("nan")
    if n < 3:
        return TrendTest(nan, nan, nan, max(n - 1, 0), nan, nan, False, nan, alternative, n, np.full(n, nan))
    slopes = _per_block_slopes(x, b)
    slope = float(slopes.mean())
    se = float(slopes.std(ddof=1) / np.sqrt(n))
    df = n - 1
    t = slope / se if se > 0 else (math.copysign(math.inf, slope) if slope else 0.0)
    if alternative == "two-sided":
        crit = float(stats.t.isf(alpha / 2, df))
        p, reject = float(2 * stats.t.sf(abs(t), df)), bool(abs(t) > crit)
    elif alternative == "greater":
        crit = float(stats.t.isf(alpha, df))
        p, reject = float(stats.t.sf(t, df)), bool(t > crit)
    else:
        crit = float(stats.t.isf(alpha, df))
        p, reject = float(stats.t.cdf(t, df)), bool(t < -crit)
    detect = detectable_t(crit, df, se, power)
    return TrendTest(slope, se, float(t), df, p, crit, reject, float(detect), alternative, n, slopes)


@dataclass(frozen=True)
class Equivalence:
    """Two one-sided tests of ``|slope| < margin`` (see :func:`equivalence_test`)."""

    margin: float
    p: float
    passed: bool
    power0: float  # probability of passing at a true slope of 0 (t approximation, SE as estimated)


def equivalence_test(trend: TrendTest, margin: float, *, alpha: float) -> Equivalence:
    """TOST of H0 ``|slope| >= margin`` from a :class:`TrendTest`: pass when both one-sided t tests reject
    at ``alpha``; ``p`` is the larger of their p-values."""
    t_lo, t_hi = (trend.slope + margin) / trend.se, (margin - trend.slope) / trend.se
    crit = float(stats.t.isf(alpha, trend.df))
    return Equivalence(margin, float(max(stats.t.sf(t_lo, trend.df), stats.t.sf(t_hi, trend.df))),
                       bool(min(t_lo, t_hi) > crit),
                       float(max(0.0, 1.0 - 2.0 * stats.t.sf(margin / trend.se - crit, trend.df))))


@dataclass(frozen=True)
class RateCheck:
    """Log-log slope of a positive mean curve with a one-sided test against a bound (see :func:`one_sided_rate`)."""

    slope: float
    se: float
    intercept: float
    df: int
    bound: float
    t: float
    p: float
    critical: float
    reject: bool
    detect: float
    fitted: NDArray[np.float64]
    alternative: str = "greater"

    def miss_rate_at_estimate(self) -> float:
        """Plug-in probability that the test does NOT reject if the true slope equals the estimate (t
        approximation with the estimated SE): the power at the estimate, not a false-failure rate."""
        if not np.isfinite(self.slope):
            return float("nan")
        shift = (self.slope - self.bound) / self.se
        if self.alternative == "less":
            return float(stats.t.sf(-self.critical - shift, self.df))
        return float(stats.t.cdf(self.critical - shift, self.df))


def one_sided_rate(x: ArrayLike, blocks: ArrayLike, *, bound: float, alternative: str, alpha: float,
                   power: float = DETECT_POWER) -> RateCheck:
    """WLS slope of log(mean over blocks) on log x, jackknife SE (:func:`simkit.stats.analysis.fit_rate`), and a
    one-sided t test of H0 ``slope <= bound`` (``alternative="greater"``) or ``slope >= bound`` ("less").

    ``detect`` is the distance from ``bound`` (towards H1) detected with probability ``power``
    (:func:`detectable_t`). A mean that is not positive at some level gives an all-NaN result.
    """
    x = np.asarray(x, dtype=float)
    fit = fit_rate(x, blocks, float(np.min(x)), with_inverse=False)
    nan = float("nan")
    if not np.isfinite(fit.slope):
        return RateCheck(nan, nan, nan, fit.df, bound, nan, nan, nan, False, nan, np.full(x.size, nan), alternative)
    t = (fit.slope - bound) / fit.slope_se
    crit = float(stats.t.isf(alpha, fit.df))
    if alternative == "greater":
        p, reject = float(stats.t.sf(t, fit.df)), bool(t > crit)
    elif alternative == "less":
        p, reject = float(stats.t.cdf(t, fit.df)), bool(t < -crit)
    else:
        raise ValueError(f"'alternative' must be 'greater' or 'less', got {alternative!r}")
    detect = detectable_t(crit, fit.df, fit.slope_se, power)
    return RateCheck(fit.slope, fit.slope_se, fit.intercept, fit.df, bound, float(t), p, crit, reject, float(detect),
                     np.exp(fit.fitted), alternative)


@dataclass(frozen=True)
class NonInferiority:
    """One-sided non-inferiority test of a block-mean curve against growth >= delta per doubling of
    its level (see :func:`growth_non_inferiority`)."""

    b: float           # OLS slope of log2(block-mean curve) on log2(level)
    se: float          # delete-one-block jackknife SE of b
    growth: float      # 2^b - 1 per doubling of the level
    growth_se: float   # delta method: ln 2 * 2^b * se
    t: float           # (b - log2(1 + delta)) / se
    df: int
    p: float           # one-sided, H1: growth < delta
    reject: bool       # p < alpha: non-inferiority (growth < delta) shown
    n_blocks: int
    defined: bool      # block mean > 0 at every level in the full sample and in every jackknife replicate


def _log2_slope(x: NDArray, curve: NDArray) -> NDArray:
    xc = x - x.mean()
    with np.errstate(invalid="ignore", divide="ignore"):
        y = np.where(curve > 0, np.log2(np.where(curve > 0, curve, 1.0)), np.nan)
    return np.array([np.dot(xc, y - y.mean()) / np.dot(xc, xc)])


def growth_non_inferiority(x: ArrayLike, blocks: ArrayLike, *, delta: float, alpha: float,
                           levels_name: str = "levels") -> NonInferiority:
    """One-sided non-inferiority test of H0 ``2^b - 1 >= delta`` against H1 ``2^b - 1 < delta``.

    ``x`` is log2 of the levels (shape (J,), at least two distinct; ``levels_name`` names the
    argument in errors), ``blocks`` the per-block estimates at each level (shape (n_blocks, J); blocks
    with a NaN are dropped). ``b`` = OLS slope of log2 of the block-mean curve on ``x``, delete-one-block
    jackknife SE, ``t = (b - log2(1 + delta)) / SE`` on n_blocks - 1 df, ``p = P(T <= t)``; reject
    (growth < delta shown) when p < alpha. Undefined (NaN, no rejection) when a block mean is not
    positive at some level (in the full sample or a jackknife replicate) or fewer than 3 blocks remain.
    """
    x = np.asarray(x, dtype=float)
    b = np.asarray(blocks, dtype=float)
    if b.ndim != 2 or b.shape[1] != x.size:
        raise ValueError(f"'blocks' must have shape (n_blocks, {x.size}), got {b.shape}")
    if np.unique(x).size < 2:
        raise ValueError(f"'{levels_name}' must hold at least two distinct "
                         f"{'dimensions' if levels_name == 'd' else 'values'}")
    if not delta > -1:
        raise ValueError(f"'delta' must be > -1, got {delta}")
    b = b[np.all(np.isfinite(b), axis=1)]
    n = b.shape[0]
    nan = float("nan")
    if n < 3:
        return NonInferiority(nan, nan, nan, nan, nan, max(n - 1, 0), nan, False, n, False)
    est, se, reps = jackknife(lambda c: _log2_slope(x, c), b)
    est, se = float(est[0]), float(se[0])
    if not (np.isfinite(est) and np.isfinite(se) and np.all(np.isfinite(reps))):
        return NonInferiority(est, nan, 2.0 ** est - 1 if np.isfinite(est) else nan, nan, nan, n - 1, nan, False, n,
                              False)
    b0 = math.log2(1.0 + delta)
    t = (est - b0) / se if se > 0 else (-math.inf if est < b0 else math.inf)
    p = float(stats.t.cdf(t, n - 1))
    return NonInferiority(est, se, 2.0 ** est - 1.0, math.log(2) * 2.0 ** est * se, float(t), n - 1, p,
                          bool(p < alpha), n, True)


def non_inferiority(levels: ArrayLike, blocks: ArrayLike, *, delta: float, alpha: float,
                    levels_name: str = "levels") -> NonInferiority:
    """:func:`growth_non_inferiority` on the levels themselves (k, d: positive numbers, at least two distinct).

    Parameters
    ----------
    levels : array_like, shape (J,)
        The levels, all > 0; the test regresses on their log2.
    blocks : array_like, shape (n_blocks, J)
        Per-block estimates of the curve at each level; blocks with a NaN are dropped.
    delta, alpha : float
        Margin (relative growth per doubling of the level, > -1) and one-sided level.
    levels_name : str
        The name of ``levels`` in error messages.
    """
    lv = np.asarray(levels, dtype=float)
    if lv.ndim != 1 or np.any(~np.isfinite(lv)) or np.any(lv <= 0):
        raise ValueError(f"'{levels_name}' must be a 1-D array of positive numbers, got {levels!r}")
    return growth_non_inferiority(np.log2(lv), blocks, delta=delta, alpha=alpha, levels_name=levels_name)


def log_sd_slope(levels: ArrayLike, blocks: ArrayLike) -> tuple[float, float]:
    """OLS slope of log sd(y) on log level, the sd over blocks formed from the block means of y and y^2,
    with its delete-one-block jackknife SE; (NaN, NaN) with fewer than 3 finished blocks.

    The slope of the sampling variability: -1/2 for an O(n^-1/2) spread.
    """
    lv = np.asarray(levels, dtype=float)
    g = _finite_blocks(lv, blocks)
    if g.shape[0] < 3:
        return float("nan"), float("nan")
    xc = np.log(lv) - np.log(lv).mean()

    def sd_slope(curve):
        m1, m2 = curve[:lv.size], curve[lv.size:]
        return np.array([np.dot(xc, 0.5 * np.log(np.maximum(m2 - m1**2, 1e-300))) / np.dot(xc, xc)])

    est, se, _ = jackknife(sd_slope, np.concatenate([g, g**2], axis=1))
    return float(est[0]), float(se[0])


def relative_trend_se(x: ArrayLike, blocks: ArrayLike) -> float:
    """Delete-one-block jackknife SE of the relative trend: OLS slope of the block-mean curve on x over
    its mean level. NaN with fewer than 3 finished blocks."""
    x = np.asarray(x, dtype=float)
    ok = _finite_blocks(x, blocks)
    if ok.shape[0] < 3:
        return float("nan")
    xc = x - x.mean()
    rel = lambda c: np.array([np.dot(xc, c - c.mean()) / np.dot(xc, xc) / np.mean(c)])  # noqa: E731
    return float(jackknife(rel, ok)[1][0])


def non_inferiority_plugin_miss_rate(se: ArrayLike, df: ArrayLike, *, delta: float, alpha: float) -> NDArray:
    """Per test, P(the rule does NOT show non-inferiority | b = 0) with the estimated SE taken as the true one.

    The rule rejects when ``b_hat < log2(1 + delta) + t_alpha SE``; with b_hat ~ SE T (central t on ``df``)
    it misses with probability ``P(T >= log2(1 + delta) / SE + t_alpha)``. A plug-in of the run's SEs,
    unlike :func:`non_inferiority_miss_rate` (a planned sd, noncentral t). NaN where SE is not finite.
    """
    b0 = math.log2(1.0 + delta)
    with np.errstate(invalid="ignore", divide="ignore"):
        return stats.t.sf(b0 / np.asarray(se, dtype=float) + stats.t.ppf(alpha, df), df)


def union_bound(p_fail: ArrayLike) -> float:
    """``min(1, sum p)``: a bound on the probability that any of several tests fails (Bonferroni), whatever
    their dependence; a NaN rate counts as 1."""
    p = np.asarray(p_fail, dtype=float)
    return float(min(1.0, np.sum(np.where(np.isfinite(p), p, 1.0))))


def non_inferiority_miss_rate(n_blocks: int, *, delta: float, alpha: float, sigma_b: float) -> float:
    """Planned probability that :func:`growth_non_inferiority` does NOT show non-inferiority at zero growth.

    ``P(T >= t_alpha)`` for T noncentral t on ``n_blocks - 1`` df with noncentrality
    ``-log2(1 + delta) / (sigma_b / sqrt(n_blocks))``: 1 - the power at b = 0 for a per-block sd
    ``sigma_b`` of b (a design value, never the estimate). This is the false-failure rate of a check
    that passes when the rule rejects; ``alpha`` is its false-pass rate. NaN for fewer than 3 blocks.
    """
    n = int(n_blocks)
    if n < 3:
        return math.nan
    nc = -math.log2(1.0 + delta) / (sigma_b / math.sqrt(n))
    return float(stats.nct.sf(stats.t.ppf(alpha, n - 1), n - 1, nc))


# ----------------------------------------------------------------------------------------------
# over a fit range k >= k_min, for a curve or a ratio of two curves (the rule of protocols/continuity.md)

def log2_slope(k: ArrayLike, blocks: ArrayLike, k_min: int, *, ratio: bool = False) -> tuple[float, float, int, bool]:
    """OLS slope b of log2 of the block-mean curve on log2 k over k >= k_min (equal weights), its
    delete-one-block jackknife SE, the blocks used and whether b is defined.

    With ``ratio`` the blocks are ``(n_blocks, 2, G)`` and the curve is mean[0] / mean[1]. b is undefined
    (SE NaN) when the curve is not finite and positive on the fit range in the full sample or in a
    jackknife replicate, or fewer than 3 finished blocks remain.
    """
    x = np.log2(np.asarray(k, dtype=float))
    b = np.asarray(blocks, dtype=float)
    want = 3 if ratio else 2
    if b.ndim != want or b.shape[-1] != x.size or (ratio and b.shape[1] != 2):
        shape = f"(n_blocks, 2, {x.size})" if ratio else f"(n_blocks, {x.size})"
        raise ValueError(f"'blocks' must have shape {shape}, got {b.shape}")
    sel = x >= math.log2(k_min)
    if np.unique(x[sel]).size < 2:
        raise ValueError(f"'k_min' must leave at least two distinct k in the fit, got k_min = {k_min}")
    xc = x[sel] - x[sel].mean()
    sxx = float(xc @ xc)

    def stat(curve):
        c = (curve[0] / curve[1] if ratio else curve)[sel]
        if not np.all(np.isfinite(c) & (c > 0)):
            return np.array([np.nan])
        y = np.log2(c)
        return np.array([float(xc @ (y - y.mean())) / sxx])

    b = b[np.all(np.isfinite(b.reshape(b.shape[0], -1)), axis=1)]
    n = b.shape[0]
    if n < 3:
        return math.nan, math.nan, n, False
    with np.errstate(invalid="ignore", divide="ignore"):
        est, se, reps = jackknife(stat, b)
    est, se = float(est[0]), float(se[0])
    defined = bool(np.isfinite(est) and np.isfinite(se) and np.all(np.isfinite(reps)))
    return est, (se if defined else math.nan), n, defined


def fit_range_non_inferiority(k: ArrayLike, blocks: ArrayLike, k_min: int, *, delta: float, alpha: float,
                              ratio: bool = False) -> NonInferiority:
    """One-sided non-inferiority test of H0 ``2^b - 1 >= delta`` with b from :func:`log2_slope` (fit over
    k >= k_min; ``ratio`` for a ratio of two curves): ``t = (b - log2(1 + delta)) / SE`` on n_blocks - 1 df,
    ``p = P(T <= t)``, reject when p < alpha; NaN and no rejection when b is undefined.

    The same test as :func:`non_inferiority` on the fit range, which it does not restrict (kept apart
    until the studies share one: the undefined cases are detected differently).
    """
    if not (isinstance(delta, (int, float, np.floating)) and delta > -1):
        raise ValueError(f"'delta' must be a number > -1, got {delta!r}")
    if not (isinstance(alpha, (int, float, np.floating)) and 0 < alpha < 1):
        raise ValueError(f"'alpha' must be in (0, 1), got {alpha!r}")
    est, se, n, defined = log2_slope(k, blocks, k_min, ratio=ratio)
    nan = math.nan
    if not defined:
        g = 2.0 ** est - 1.0 if math.isfinite(est) else nan
        return NonInferiority(est, nan, g, nan, nan, max(n - 1, 0), nan, False, n, False)
    b0 = math.log2(1.0 + delta)
    t = (est - b0) / se if se > 0 else (-math.inf if est < b0 else math.inf)
    p = float(stats.t.cdf(t, n - 1))
    return NonInferiority(est, se, 2.0 ** est - 1.0, math.log(2) * 2.0 ** est * se, float(t), n - 1, p,
                          bool(p < alpha), n, True)


def growth_test(k: ArrayLike, blocks: ArrayLike, k_min: int, *, alpha: float,
                ratio: bool = False) -> tuple[float, float, float, float, bool]:
    """One-sided test of growth, H0 b <= 0 against b > 0, with b and SE from :func:`log2_slope`:
    ``t = b / SE`` on n_blocks - 1 df, ``p = P(T >= t)``. Returns ``(b, se, t, p, reject)``; all NaN
    and no rejection when b is undefined."""
    est, se, n, defined = log2_slope(k, blocks, k_min, ratio=ratio)
    if not defined:
        return est, math.nan, math.nan, math.nan, False
    t = est / se if se > 0 else (math.inf if est > 0 else -math.inf)
    p = float(stats.t.sf(t, n - 1))
    return est, se, float(t), p, bool(p < alpha)


def wls_slope_test(k: ArrayLike, blocks: ArrayLike, k_min: int, *, alpha: float,
                   one_sided: bool) -> tuple[float, float, float, float]:
    """WLS slope of log(mean) on log k over k >= k_min (:func:`simkit.stats.analysis.fit_rate`, jackknife SE)
    tested against 0: one-sided (H1 slope > 0) or two-sided.

    Returns ``(slope, se, p, mde)``: ``mde`` = :func:`detectable_t` of the test's critical value, the slope
    detected with probability :data:`DETECT_POWER`. p and mde are NaN without a fit.
    """
    fit = fit_rate(k, blocks, k_min, with_inverse=False)
    b, se = fit.slope, fit.slope_se
    if not (np.isfinite(b) and se > 0):
        return b, se, np.nan, np.nan
    p = stats.t.sf(b / se, fit.df) if one_sided else 2 * stats.t.sf(abs(b / se), fit.df)
    q = stats.t.isf(alpha if one_sided else alpha / 2, fit.df)
    return b, se, p, detectable_t(q, fit.df, se)


# ----------------------------------------------------------------------------------------------
# growth as tau falls, with positivity at the smallest tau (the rule of protocols/temperature.md)

@dataclass(frozen=True)
class GrowthRule:
    """Result of :func:`growth_rule` on per-block estimates over a temperature grid."""

    b: float            # OLS slope of log(block-mean curve) on log tau
    se: float           # delete-one-block jackknife SE of b
    t: float            # (b - b0) / se, n_blocks - 1 df
    p: float            # one-sided P(T <= t): H1 b < b0 (grows at least as fast as tau^b0 as tau falls)
    level: float        # block mean at the smallest tau
    level_se: float     # its MCSE
    level_t: float      # level / level_se
    level_p: float      # one-sided P(T >= level_t): H1 mean > 0 at tau_min
    ratio: float        # block mean at tau_min / block mean at tau_max
    passed: bool        # defined and p < alpha and level_p < alpha
    defined: bool       # the block mean > 0 at every tau, in the full sample and every jackknife replicate
    n_blocks: int
    reason: str         # why it did not pass (empty when it passed)


def growth_rule(taus: ArrayLike, blocks: ArrayLike, *, b0: float, alpha: float) -> GrowthRule:
    """One-sided rule "the quantity is positive and grows as tau decreases": an intersection-union test.

    Parameters
    ----------
    taus : array_like, shape (J,)
        Temperatures (at least two distinct, > 0).
    blocks : array_like, shape (n_blocks, J)
        Per-block estimates at each tau (blocks with a NaN are dropped).
    b0 : float
        Margin: H0 ``b >= b0`` for the slope b of log E[X](tau) on log tau (b0 < 0: growth as tau falls).
    alpha : float
        Level of each of the two one-sided tests.

    Returns
    -------
    GrowthRule
        Passes iff both one-sided tests reject at ``alpha``: (1) slope, ``t = (b - b0)/SE_jack(b)``,
        p = P(T_{n-1} <= t); (2) positivity at the smallest tau, ``t = mean/MCSE``, p = P(T_{n-1} >= t).
        Undefined (fails) when a block-mean is <= 0 at some tau in the full sample or in a delete-one
        jackknife replicate, or fewer than 3 blocks remain. Passing needs both rejections, so its
        level is at most alpha whenever either null holds (intersection-union).
    """
    x = np.log(np.asarray(taus, dtype=float))
    a = np.asarray(blocks, dtype=float)
    if a.ndim != 2 or a.shape[1] != x.size:
        raise ValueError(f"'blocks' must have shape (n_blocks, {x.size}), got {a.shape}")
    if np.unique(x).size < 2 or not np.all(np.isfinite(x)):
        raise ValueError("'taus' must hold at least two distinct positive temperatures")
    if not 0 < alpha < 1:
        raise ValueError(f"'alpha' must be in (0, 1), got {alpha}")
    a = a[np.all(np.isfinite(a), axis=1)]
    n = a.shape[0]
    nan = math.nan
    jmin, jmax = int(np.argmin(x)), int(np.argmax(x))
    if n < 3:
        return GrowthRule(nan, nan, nan, nan, nan, nan, nan, nan, nan, False, False, n,
                          f"fewer than 3 finished blocks ({n})")
    mean = a.mean(axis=0)
    level, level_se = float(mean[jmin]), float(a[:, jmin].std(ddof=1) / math.sqrt(n))
    level_t = level / level_se if level_se > 0 else (math.inf if level > 0 else -math.inf)
    level_p = float(stats.t.sf(level_t, n - 1))
    ratio = float(mean[jmin] / mean[jmax]) if mean[jmax] != 0 else nan
    reps = (mean * n - a) / (n - 1)  # delete-one-block means
    if not (np.all(mean > 0) and np.all(reps > 0)):
        return GrowthRule(nan, nan, nan, nan, level, level_se, level_t, level_p, ratio, False, False, n,
                          "undefined: a block-mean (or a jackknife replicate's) is <= 0 at some tau")
    xc = x - x.mean()

    def slope(curve):
        y = np.log(curve)
        return float(np.dot(xc, y - y.mean()) / np.dot(xc, xc))

    est, sd, _ = jackknife(lambda c: np.array([slope(c)]), a)
    b, se = float(est[0]), float(sd[0])
    t = (b - b0) / se if se > 0 else (-math.inf if b < b0 else math.inf)
    p = float(stats.t.cdf(t, n - 1))
    why = []
    if not p < alpha:
        why.append(f"slope {b:.3f} ± {se:.3f}: b < {b0:.3f} not shown (p = {p:.3g} >= {alpha:g})")
    if not level_p < alpha:
        why.append(f"mean at tau_min {level:.4g} ± {level_se:.2g}: > 0 not shown (p = {level_p:.3g} >= {alpha:g})")
    return GrowthRule(b, se, float(t), p, level, level_se, float(level_t), level_p, ratio, not why, True, n,
                      "; ".join(why))


# ----------------------------------------------------------------------------------------------
# a 1/sqrt(k) term beside the 1/k expansion, and paired changes along an axis (protocols/encoders.md)

def sqrt_k_term_test(k: ArrayLike, blocks: ArrayLike, k_min: float, *, alpha: float,
                     power: float = DETECT_POWER) -> dict:
    """Two-sided t test of c = 0 in the fit ``D_k = a/k + b/k^2 + c/sqrt(k)`` over k >= k_min, with a power condition.

    WLS of the block-mean curve on (1/k, 1/k^2, 1/sqrt(k)) (weights 1/MCSE^2 of the block means, fixed in the
    jackknife), delete-one-block jackknife SE, t of c on n_blocks - 1 df (blocks with a NaN dropped). The
    smallest |c| detected with probability ``power`` is ``mde`` (:func:`detectable_t`, two-sided); a 1/sqrt(k)
    term as large as the curve at k_min is ``c_match = sqrt(k_min) |mean at k_min|``. Verdict: "not assessed"
    when ``mde > c_match`` (no power), else "fail" when |t| > t_{1-alpha/2}, else "pass"; "error" with fewer
    than 3 blocks or 4 levels, or a zero block-mean variance. Returns a dict of ``a, a_se, c, c_se, t, mde,
    c_match, verdict, reason``.
    """
    out = {"a": math.nan, "a_se": math.nan, "c": math.nan, "c_se": math.nan, "t": math.nan, "mde": math.nan,
           "c_match": math.nan, "verdict": "error", "reason": "no finite blocks"}
    b = np.asarray(blocks, dtype=float)
    b = b[np.all(np.isfinite(b), axis=1)]
    n = b.shape[0]
    sel = np.asarray(k, dtype=float) >= k_min
    if n < 3 or sel.sum() < 4:
        out["reason"] = f"{n} finished blocks, {int(sel.sum())} grid points >= k_min {k_min:g}: too few"
        return out
    kk = np.asarray(k, dtype=float)[sel]
    x = np.column_stack([1 / kk, 1 / kk ** 2, 1 / np.sqrt(kk)])
    mean, mcse = mean_mcse(b[:, sel], axis=0)
    if np.any(~(mcse > 0)):
        out["reason"] = "a block-mean variance is zero in the fit range"
        return out
    sw = 1.0 / mcse

    def coef(curve):
        return np.linalg.lstsq(x * sw[:, None], curve * sw, rcond=None)[0]

    full, se, _ = jackknife(coef, b[:, sel])
    t = full[2] / se[2]
    crit = stats.t.ppf(1 - alpha / 2, n - 1)
    mde = detectable_t(crit, n - 1, se[2], power)
    c_match = math.sqrt(kk[0]) * abs(mean[0])
    out.update(a=full[0], a_se=se[0], c=full[2], c_se=se[2], t=t, mde=mde, c_match=c_match)
    if not mde <= c_match:
        out.update(verdict="not assessed", reason=f"no power: MDE of c {mde:.3g} > sqrt(k_min)|D_kmin| {c_match:.3g}")
    elif abs(t) > crit:
        out.update(verdict="fail", reason=f"1/sqrt(k) term c = {full[2]:.3g} ± {se[2]:.2g} (t {t:+.2f}, |t| > {crit:.2f})")
    else:
        out.update(verdict="pass", reason="")
    return out


def paired_t_power(n_blocks: int, sd: float, margin: float, alpha: float) -> float:
    """Power of the one-sided paired t test at level ``alpha`` (``n_blocks - 1`` df) when the mean paired
    difference is ``margin`` and its per-block sd is ``sd`` (noncentral t, noncentrality margin sqrt(n) / sd)."""
    n = int(n_blocks)
    return float(stats.nct.sf(stats.t.ppf(1 - alpha, n - 1), n - 1, margin * math.sqrt(n) / sd))


def paired_change(blocks: ArrayLike, *, alternative: str) -> tuple[NDArray, NDArray, NDArray]:
    """Change from the first to the last level, paired over blocks, with a one-sided t test.

    ``blocks`` has shape ``(..., n_blocks, J)``. Returns ``(diff, mcse, p)`` over the leading axes: the
    block mean of ``last - first``, its MCSE (:func:`simkit.stats.analysis.mean_mcse`), and the p-value of the
    one-sided paired t test on n_blocks - 1 df of H1 "rises" (``alternative="greater"``) or "falls"
    ("less"). A zero MCSE gives p = 0 when the change is in the direction of H1, else 1.
    """
    if alternative not in ("greater", "less"):
        raise ValueError(f"'alternative' must be 'greater' or 'less', got {alternative!r}")
    b = np.asarray(blocks, dtype=float)
    if b.ndim < 2:
        raise ValueError(f"'blocks' must have shape (..., n_blocks, levels), got {b.shape}")
    diff, mcse = mean_mcse(b[..., -1] - b[..., 0], axis=-1)
    sign, df = (1.0 if alternative == "greater" else -1.0), b.shape[-2] - 1
    p = np.array([float(stats.t.sf(sign * d / se, df)) if se > 0 else (0.0 if sign * d > 0 else 1.0)
                  for d, se in zip(np.ravel(diff), np.ravel(mcse))]).reshape(np.shape(diff))
    return diff, mcse, p


def sqrt_k_term_vars(rule: str, power: float = DETECT_POWER, *, prefix: str = "r_", cell: str = "setting") -> dict:
    """Schema entries (:class:`simkit.runner.Var`, dims ``(cell,)``) of :func:`sqrt_k_term_test`'s fields,
    named ``prefix + field``, for the rule ``rule`` (e.g. "rule R (protocols/encoders.md section 3)")."""
    from simkit.runner.schema import verdict_vars
    from simkit.runner.study import Var
    jack = "delete-one-block jackknife, weights fixed"
    texts = {"a": ("d1 = a of the fit D_k = a/k + b/k^2 + c/sqrt(k), in nats", rule),
             "a_se": (f"jackknife SE of {prefix}a, in nats", jack),
             "c": ("coefficient c of 1/sqrt(k) in the fit of D_k, in nats", f"{rule.split(' (')[0]}; 0 under C2"),
             "c_se": (f"jackknife SE of {prefix}c, in nats", jack),
             "t": ("t of c = 0", f"{prefix}c / {prefix}c_se, Student t on n_blocks - 1 df, two-sided at alpha"),
             "mde": (f"smallest |c| detected with probability {power:g}, in nats",
                     f"(t_{{1-alpha/2}} + t_{power:g}) {prefix}c_se"),
             "c_match": ("size of a 1/sqrt(k) term as large as D_k at k_min, in nats", "sqrt(k_min) |D_kmin|; the "
                         f"setting is assessed only if {prefix}mde <= {prefix}c_match")}
    out = {f"{prefix}{f}": Var((cell,), long_name, "1", text) for f, (long_name, text) in texts.items()}
    name = rule.split(" (")[0]
    return {**out, **verdict_vars(f"{prefix}verdict", (cell,), f"verdict of {name}", "pass, fail, not assessed (no "
                                  "power) or error", reason_name=f"{prefix}reason",
                                  reason_long_name=f"why {name} did not pass")}
