"""Analysis of replicate blocks: Monte Carlo standard errors, rate regressions, jackknife.

Every study produces independent replicate *blocks*; within a block, estimates at different k
share random numbers (common random numbers), so the points of a curve over k are correlated.
Point estimates here are weighted least squares (statsmodels) on the block means; their standard
errors come from the delete-one-block jackknife, which accounts for that correlation (HOUSE.md:
"a jackknife for nonlinear measures (ratios, slopes)"; Morris, White & Crowther 2019, Table 6).
Intervals use Student t with (blocks - 1) degrees of freedom.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import asdict, dataclass

import numpy as np
import statsmodels.api as sm
from numpy.typing import ArrayLike, NDArray
from scipy import stats

__all__ = [
    "mean_mcse",
    "jackknife",
    "ratio_of_means",
    "RateFit",
    "fit_rate",
    "CurveFit",
    "fit_inverse_powers",
    "z_score",
    "choose_k_min",
    "combine_verdicts",
    "worst_slope",
    "RATE_FIELDS",
    "C1_NAMES",
    "rate_columns",
    "rate_verdict",
    "setting_pvalues",
    "cell_pvalues",
    "t_pvalue",
    "TRUTH_FIELDS",
    "truth_verdict",
    "truth_verdict_standardised",
    "truth_fields",
    "truth_rng",
    "TRUTH_FIELDS_MAX_T",
]


def mean_mcse(blocks: ArrayLike, axis: int = 0) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Mean over independent blocks and its Monte Carlo standard error ``sd / sqrt(n)``.

    NaN blocks (failed or missing) are ignored; fewer than two valid blocks give NaN MCSE.
    """
    a = np.asarray(blocks, dtype=float)
    n = np.sum(np.isfinite(a), axis=axis)
    with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns give NaN, as documented
        mean = np.nanmean(a, axis=axis)
        var = np.nansum((a - np.expand_dims(mean, axis)) ** 2, axis=axis) / (n - 1)
        mcse = np.sqrt(var / n)
    mcse = np.where(n >= 2, mcse, np.nan)
    return mean, mcse


def jackknife(statistic, blocks: NDArray[np.float64]) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    """Delete-one-block jackknife of ``statistic(mean over blocks)``.

    Parameters
    ----------
    statistic : callable
        Maps a mean curve (shape ``blocks.shape[1:]``) to a 1-D array of estimates.
    blocks : ndarray, shape (n_blocks, ...)
        Independent replicate blocks.

    Returns
    -------
    estimate, se, replicates
        ``statistic`` at the full mean, the jackknife standard error
        ``sqrt((n-1)/n sum (theta_i - theta_bar)^2)``, and the n leave-one-out values.
    """
    b = np.asarray(blocks, dtype=float)
    n = b.shape[0]
    if n < 3:
        raise ValueError(f"'blocks' must hold at least 3 blocks for a jackknife, got {n}")
    total = b.sum(axis=0)
    full = np.atleast_1d(np.asarray(statistic(total / n), dtype=float))
    reps = np.array([np.atleast_1d(statistic((total - b[i]) / (n - 1))) for i in range(n)], dtype=float)
    se = np.sqrt((n - 1) / n * np.sum((reps - reps.mean(axis=0)) ** 2, axis=0))
    return full, se, reps


def ratio_of_means(num: ArrayLike, den: ArrayLike) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Ratio of block means ``mean(num) / mean(den)`` with its delete-one-block jackknife MCSE.

    ``num`` and ``den`` have shape ``(n_blocks, ...)``; blocks with a NaN in either are dropped. Returns the
    (estimate, MCSE) of :func:`jackknife` (at least 1-D); fewer than 3 blocks left give NaN of shape
    ``num.shape[1:]``.
    """
    num, den = np.asarray(num, dtype=float), np.asarray(den, dtype=float)
    blocks = np.stack([num, den], axis=1)
    blocks = blocks[np.all(np.isfinite(blocks), axis=tuple(range(1, blocks.ndim)))]
    if blocks.shape[0] < 3:
        return np.full(num.shape[1:], np.nan), np.full(num.shape[1:], np.nan)
    f, j, _ = jackknife(lambda m: m[0] / m[1], blocks)
    return f, j


def choose_k_min(k: ArrayLike, scale: float, factor: float = 16.0) -> int:
    """Smallest grid point ``k >= factor * scale``.

    ``scale`` is the size of the delta-method expansion parameter's numerator,
    ``max(E[Z2/Z^2], E[m1/Z])`` for C1: the expansion of gap_k is in powers of scale/k, so at
    ``k >= 16 scale`` the O(1/k^2) remainder of a model with the 1/k term is below ~0.4%
    (checked against the exact gap curve in tests/stats/test_rate_analysis.py).
    """
    k = np.asarray(k)
    ok = k >= factor * scale
    return int(k[ok][0]) if np.any(ok) else int(k[-1])


@dataclass(frozen=True)
class RateFit:
    """Result of a log-log rate regression (see :func:`fit_rate`)."""

    slope: float
    slope_se: float
    ci_low: float
    ci_high: float
    level: float
    p_half: float  # two-sided p-value of H0: slope = -1/2
    p_one: float  # two-sided p-value of H0: slope = -1
    intercept: float
    curvature: float  # coefficient of 1/k (NaN when not modelled)
    slope_se_wls: float  # naive WLS standard error (ignores the CRN correlation across k)
    k_min: int
    n_points: int
    n_blocks: int
    df: int
    fitted: NDArray[np.float64]  # fitted log gap over the whole grid
    std_resid: NDArray[np.float64]  # (log gap - fitted) / se(log gap) over the whole grid

    def interval(self, level: float) -> tuple[float, float]:
        """Student-t interval at another level, from the jackknife standard error."""
        q = stats.t.ppf(0.5 + level / 2, self.df)
        return self.slope - q * self.slope_se, self.slope + q * self.slope_se

    def as_dict(self) -> dict:
        d = asdict(self)
        d.pop("fitted")
        d.pop("std_resid")
        return d


def _design(k: NDArray, with_inverse: bool) -> NDArray:
    cols = [np.ones_like(k), np.log(k)]
    if with_inverse:
        cols.append(1.0 / k)
    return np.column_stack(cols)


def _jackknife_reweighted(coefs_with_weights, b: NDArray[np.float64]) -> NDArray[np.float64]:
    """Delete-one-block jackknife SE (the formula of :func:`jackknife`) of a weighted fit whose weights are
    re-estimated from the remaining blocks in every replicate: ``coefs_with_weights(mean, mcse)`` ->
    coefficients, with ``(mean, mcse)`` of the replicate from :func:`mean_mcse`."""
    n = b.shape[0]
    reps = []
    for i in range(n):
        m, s = mean_mcse(np.delete(b, i, axis=0))
        reps.append(np.atleast_1d(coefs_with_weights(m, s)))
    reps = np.array(reps, dtype=float)
    return np.sqrt((n - 1) / n * np.sum((reps - reps.mean(axis=0)) ** 2, axis=0))


def fit_rate(k: ArrayLike, blocks: ArrayLike, k_min: int, *, with_inverse: bool = True,
             level: float = 0.95, reweight: bool = False) -> RateFit:
    """Weighted least squares of log gap_k on log k (and 1/k) over k >= k_min; jackknife errors.

    Parameters
    ----------
    k : array_like, shape (G,)
        Grid of k.
    blocks : array_like, shape (n_blocks, G)
        Per-block estimates of gap_k (independent blocks, CRN across k within a block).
    k_min : int
        Smallest k in the fit.
    with_inverse : bool
        Include the 1/k regressor, modelling the O(1/k^2) term of gap_k (docs/theory.md C1), so that
        the slope is the asymptotic rate rather than a local one.
    level : float
        Confidence level of the reported interval.
    reweight : bool
        Re-estimate the weights in every jackknife replicate (from the blocks left in) instead of
        holding the full sample's weights fixed. Default False (the analysis of every committed
        dataset); see Notes.

    Notes
    -----
    Weights are ``(gap_k / mcse_k)^2`` (inverse variance of log gap by the delta method), estimated
    from the full sample. The jackknife re-fits the regression with each block left out, with those
    weights held fixed (default) or re-estimated (``reweight``). Held fixed, the jackknife misses the
    weights' own sampling variability, which is correlated with the curve (a block that raises gap_k
    raises its MCSE too): with 24-32 blocks the SE is too small, the t statistic's mean square about
    1.2 against 1.07-1.10 for Student t (tests/stats/test_rate_analysis.py; the calibrations of search_ce and
    asymmetry show 1.2-1.5 on the real pipeline, data/calibration/NOTES.md). Re-estimated, the mean
    square is about 1.0.
    A gap that is not positive in the fit range cannot be fitted on the log scale: the result is
    all-NaN then (a study reports it as a failure, never silently).
    """
    k = np.asarray(k, dtype=float)
    b = np.asarray(blocks, dtype=float)
    if b.ndim != 2 or b.shape[1] != k.size:
        raise ValueError(f"'blocks' must have shape (n_blocks, {k.size}), got {b.shape}")
    b = b[np.all(np.isfinite(b), axis=1)]
    n = b.shape[0]
    mean, mcse = mean_mcse(b)
    sel = k >= k_min
    nan = float("nan")
    n_par = 3 if with_inverse else 2
    empty = RateFit(nan, nan, nan, nan, level, nan, nan, nan, nan, nan, int(k_min), int(sel.sum()), n, max(n - 1, 0),
                    np.full(k.size, nan), np.full(k.size, nan))
    if (n < 3 or sel.sum() < n_par + 1 or np.any(mean[sel] <= 0) or np.any(~np.isfinite(mcse[sel]))
            or np.any(mcse[sel] <= 1e-12 * np.abs(mean[sel]))):  # a constant column: no error estimate
        return empty
    ks = k[sel]
    x = _design(ks, with_inverse)
    se_log = mcse[sel] / mean[sel]
    w = 1.0 / se_log**2

    def coefs(curve, weights=w):
        c = curve[sel]
        if weights is None or np.any(c <= 0):
            return np.full(n_par, np.nan)
        return sm.WLS(np.log(c), x, weights=weights).fit().params

    model = sm.WLS(np.log(mean[sel]), x, weights=w).fit()
    if reweight:
        full = np.atleast_1d(coefs(b.sum(axis=0) / n))  # the full-sample fit, formed as jackknife() forms it
        se = _jackknife_reweighted(lambda m, s: coefs(m, (m[sel] / s[sel]) ** 2 if np.all(s[sel] > 0) else None), b)
    else:
        full, se, _ = jackknife(coefs, b)
    slope, slope_se = float(full[1]), float(se[1])
    df = n - 1
    q = stats.t.ppf(0.5 + level / 2, df)
    with np.errstate(divide="ignore", invalid="ignore"):  # a jackknife SE of exactly 0 (noiseless input)
        p_half = float(2 * stats.t.sf(np.abs(np.float64(slope + 0.5) / slope_se), df))
        p_one = float(2 * stats.t.sf(np.abs(np.float64(slope + 1.0) / slope_se), df))
    xall = _design(k, with_inverse)
    fitted = xall @ model.params
    with np.errstate(invalid="ignore", divide="ignore"):
        std_resid = (np.log(mean) - fitted) / (mcse / mean)
    return RateFit(slope=slope, slope_se=slope_se, ci_low=slope - q * slope_se, ci_high=slope + q * slope_se,
                   level=level, p_half=p_half, p_one=p_one, intercept=float(full[0]),
                   curvature=float(full[2]) if with_inverse else nan, slope_se_wls=float(model.bse[1]),
                   k_min=int(k_min), n_points=int(sel.sum()), n_blocks=n, df=df, fitted=fitted,
                   std_resid=std_resid)


@dataclass(frozen=True)
class CurveFit:
    """gap_k = sum_j c_j / k^j fitted by WLS (see :func:`fit_inverse_powers`)."""

    coef: NDArray[np.float64]
    se: NDArray[np.float64]
    k_min: int
    n_blocks: int
    fitted: NDArray[np.float64]
    std_resid: NDArray[np.float64]


def fit_inverse_powers(k: ArrayLike, blocks: ArrayLike, k_min: int, n_terms: int = 2, *,
                       reweight: bool = False) -> CurveFit:
    """WLS of gap_k on (1/k, ..., 1/k^n_terms) without intercept over k >= k_min; jackknife errors.

    ``coef[0]`` estimates c1 of claim C1. Weights ``1 / mcse_k^2`` from the full sample, held fixed in
    the jackknife (default) or re-estimated in each replicate (``reweight``; see :func:`fit_rate`).
    """
    k = np.asarray(k, dtype=float)
    b = np.asarray(blocks, dtype=float)
    b = b[np.all(np.isfinite(b), axis=1)]
    n = b.shape[0]
    mean, mcse = mean_mcse(b)
    sel = k >= k_min
    nan = np.full(n_terms, np.nan)
    if (n < 3 or sel.sum() < n_terms + 1 or np.any(~np.isfinite(mcse[sel]))
            or np.any(mcse[sel] <= 1e-12 * np.abs(mean[sel]))):  # a constant column: no error estimate
        return CurveFit(nan, nan, int(k_min), n, np.full(k.size, np.nan), np.full(k.size, np.nan))
    powers = np.arange(1, n_terms + 1)
    x = k[sel, None] ** -powers
    w = 1.0 / mcse[sel] ** 2

    def coefs(curve, weights=w):
        if weights is None:
            return np.full(n_terms, np.nan)
        return sm.WLS(curve[sel], x, weights=weights).fit().params

    if reweight:
        full = np.atleast_1d(coefs(b.sum(axis=0) / n))  # the full-sample fit, formed as jackknife() forms it
        se = _jackknife_reweighted(lambda m, s: coefs(m, 1.0 / s[sel] ** 2 if np.all(s[sel] > 0) else None), b)
    else:
        full, se, _ = jackknife(coefs, b)
    fitted = (k[:, None] ** -powers) @ full
    return CurveFit(coef=full, se=se, k_min=int(k_min), n_blocks=n, fitted=fitted, std_resid=(mean - fitted) / mcse)


def z_score(estimate: float, se: float, reference: float, reference_se: float = 0.0) -> float:
    """``(estimate - reference) / sqrt(se^2 + reference_se^2)``."""
    return float((estimate - reference) / np.sqrt(se**2 + reference_se**2))


def combine_verdicts(verdicts) -> str:
    """One verdict for several checks: "error" if any errored, else "fail" if any failed, else "pass"
    if any passed, else "not assessed" (every check was not assessed at the design that ran: its
    false-failure rate there is too high for a failure to mean anything, simkit.claims.validate)."""
    v = {str(x) for x in np.asarray(verdicts, dtype=object).ravel()}
    if "error" in v:
        return "error"
    if "fail" in v:
        return "fail"
    return "not assessed" if v and v <= {"not assessed"} else "pass"


def worst_slope(slope: ArrayLike, se: ArrayLike, target: float = -1.0) -> int:
    """Index of the slope farthest from ``target`` in standard errors (a non-finite slope counts as
    farthest): the estimate a claim table reports for a check over several settings."""
    slope, se = np.asarray(slope, dtype=float), np.asarray(se, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        dev = np.where(np.isfinite(slope), np.abs(slope - target) / se, np.inf)
    return int(np.argmax(dev))


#: per-setting fields of :func:`rate_verdict` ("const" is c1 for gap_k, d1 for D_k)
RATE_FIELDS = ("slope", "slope_se", "slope_ci_low", "slope_ci_high", "slope_p_half", "slope_p_one",
                "slope_verdict_low", "slope_verdict_high", "curvature", "slope_se_wls", "const_estimate",
                "const_estimate_mcse", "const2_estimate", "const2_estimate_mcse", "const_z", "k_min", "sign",
                "k_sign")


def rate_verdict(k: np.ndarray, blocks: np.ndarray, scale: float, k_min_factor: float, ref: float,
                 ref_mcse: float, *, alpha: float, test_constant: bool, failed_blocks: bool = False) -> dict:
    """The rate verdict of one curve (gap_k for C1, D_k for C2, either for C7) from its replicate blocks.

    One rule for every rate claim: k_min = smallest grid k >= ``k_min_factor * scale``; at
    least 4 grid points k >= k_min; the block means must keep one sign there (search_ce; for a
    positive curve this is rate_k's analysis exactly); WLS of log(sign x curve) on log k and 1/k
    (:func:`fit_rate`, jackknife SE, 95% interval); WLS of the curve on 1/k and 1/k^2
    (:func:`fit_inverse_powers`) for the constant. Pass when the level-(1 - alpha) interval contains
    -1, slope = -1/2 is rejected at ``alpha`` and, if ``test_constant`` (C1), the standardised
    difference of the constant from ``ref`` is within the two-sided Student t critical value on
    n_blocks - 1 degrees of freedom (the jackknife SE has that many; a normal critical value
    understates the false-failure rate: 1.6e-3 instead of 1e-3 at 64 blocks).

    Returns
    -------
    dict
        :data:`RATE_FIELDS` (floats, NaN where undefined), ``fit_abs``, ``resid_rate`` and
        ``resid_const`` (arrays over k), ``verdict`` (pass, fail or error) and ``reason``.
    """
    out = {n: math.nan for n in RATE_FIELDS}
    nan_k = np.full(k.size, np.nan)
    out.update(fit_abs=nan_k, resid_rate=nan_k.copy(), resid_const=nan_k.copy(), verdict="fail", reason="")
    mean, _ = mean_mcse(blocks, axis=0)
    blocks = blocks[np.all(np.isfinite(blocks), axis=1)]
    if not np.isfinite(scale):
        out.update(verdict="error", reason="preparation failed (see cell_error)")
        return out
    if blocks.shape[0] < 3:
        out.update(verdict="error" if failed_blocks else "fail", reason=f"too few finished blocks ({blocks.shape[0]})")
        return out
    k_min = choose_k_min(k, scale, k_min_factor)
    out["k_min"] = k_min
    sel = k >= k_min
    sgn = np.sign(mean)
    flips = np.nonzero(sgn[1:] != sgn[:-1])[0]
    out["k_sign"] = k[flips[-1] + 1] if flips.size else k[0]
    if np.sum(sel) < 4:
        out["reason"] = (f"k_max = {int(k[-1])} is too small: {int(np.sum(sel))} grid point(s) >= k_min = {k_min}, "
                         f"4 needed; raise k_max")
        return out
    signs = set(np.sign(mean[sel]).tolist())
    if len(signs) != 1 or 0.0 in signs:
        out["sign"] = 0.0
        out["reason"] = (f"the curve changes sign within the fit range k >= {k_min} (means "
                         f"{', '.join(f'{v:+.3g}' for v in mean[sel])}): no log-log fit")
        return out
    sign = signs.pop()
    out["sign"] = sign
    fit = fit_rate(k, sign * blocks, k_min, with_inverse=True, level=0.95)
    curve = fit_inverse_powers(k, blocks, k_min, n_terms=2)
    if not np.isfinite(fit.slope):
        out["reason"] = "the rate fit failed (a leave-one-block-out mean changed sign)"
        return out
    lo, hi = fit.interval(1 - alpha)
    z = z_score(curve.coef[0], curve.se[0], ref, ref_mcse)
    out.update(slope=fit.slope, slope_se=fit.slope_se, slope_ci_low=fit.ci_low, slope_ci_high=fit.ci_high,
               slope_p_half=fit.p_half, slope_p_one=fit.p_one, slope_verdict_low=lo, slope_verdict_high=hi,
               curvature=fit.curvature, slope_se_wls=fit.slope_se_wls, const_estimate=curve.coef[0],
               const_estimate_mcse=curve.se[0], const2_estimate=curve.coef[1], const2_estimate_mcse=curve.se[1],
               const_z=z, fit_abs=np.exp(fit.fitted), resid_rate=fit.std_resid, resid_const=curve.std_resid)
    zcrit = stats.t.isf(alpha / 2, blocks.shape[0] - 1)
    problems = []
    if not (lo <= -1.0 <= hi):
        problems.append(f"slope interval at level {1 - alpha:g} [{lo:.4f}, {hi:.4f}] excludes -1")
    if not (fit.p_half < alpha):
        problems.append(f"slope = -1/2 not rejected (p = {fit.p_half:.3g})")
    if test_constant and not (abs(z) <= zcrit):
        problems.append(f"c1 z-score {z:+.2f} beyond +-{zcrit:.2f}")
    out["verdict"] = "pass" if not problems else "fail"
    if failed_blocks:
        out["verdict"] = "error"
        problems.insert(0, "some block(s) failed (see cell_error); summaries use the finished blocks; run again "
                           "to retry")
    out["reason"] = "; ".join(problems)
    return out


#: dataset names of :func:`rate_verdict`'s constant fields when the curve is gap_k (its constant is c1)
C1_NAMES = {"const_estimate": "c1_estimate", "const_estimate_mcse": "c1_estimate_mcse", "const2_estimate": "c2_estimate",
            "const2_estimate_mcse": "c2_estimate_mcse", "const_z": "c1_z"}


def rate_columns(rows: list[dict], keep, *, prefix: str = "", names: dict | None = None) -> dict[str, list]:
    """The fields of several :func:`rate_verdict` results as columns (one entry per row), named
    ``names.get(field, prefix + field)`` and kept when that name is in ``keep`` (e.g. a study's schema)."""
    fields = (*RATE_FIELDS, "fit_abs", "resid_rate", "resid_const", "verdict", "reason")
    cols = {(names or {}).get(f, prefix + f): f for f in fields}
    return {name: [r[f] for r in rows] for name, f in cols.items() if name in keep}


def setting_pvalues(ds, alpha: float, tests: dict[str, tuple[str, str]], *,
                    keep=None) -> dict[str, tuple[float, float]]:
    """Per-setting component tests of a rate check as ``{"<setting>:<test>": (p-value, alpha)}``
    (``Check.pvalues``, for :mod:`simkit.claims.calibrate`): each p-value is Uniform(0, 1) when the claim holds
    and the check rejects at ``p < alpha``.

    ``tests`` maps each test's name, in the order wanted, to ``("p", variable)`` for a dataset variable
    that is already a p-value (``slope_p_one``, the two-sided t test of slope = -1; ``curve_p``) or
    ``("t", variable)`` for a statistic compared two-sided with Student t on ``n_blocks - 1`` df
    (``c1_z``, ``c2_t``: :func:`rate_verdict` and :func:`truth_verdict` reject at
    ``|t| > t_{1 - alpha/2, n_blocks - 1}``, so ``p < alpha`` is the same rule). NaN statistics (a fit
    that could not be made) give NaN p-values, which calibration counts as missing. ``keep``, if given,
    is a boolean per setting: only those settings have tests (digits' C2 exists only for label kernels).
    """
    n = ds.sizes["block"]
    out = {}
    # string labels: the coordinate in memory, ``setting_label`` once written (integer index coordinate)
    labels = ds["setting_label"].values if "setting_label" in ds.variables else ds["setting"].values
    for i, s in enumerate(labels):
        if keep is not None and not keep[i]:
            continue
        out.update(cell_pvalues({var: ds[var].values[i] for _, var in tests.values()}, alpha, tests, n_blocks=n,
                                label=str(s)))
    return out


def t_pvalue(t: ArrayLike, df: int) -> NDArray[np.float64] | float:
    """Two-sided Student-t p-value ``2 P(T_df >= |t|)`` of a statistic (or an array of them) compared with
    ``t_{1 - alpha/2, df}``; NaN stays NaN."""
    with np.errstate(invalid="ignore"):
        return 2 * stats.t.sf(np.abs(t), df)


def cell_pvalues(values, alpha: float, tests: dict[str, tuple[str, str]], *, n_blocks: int,
                 label: str) -> dict[str, tuple[float, float]]:
    """The scalar counterpart of :func:`setting_pvalues`: the component tests of one cell as
    ``{"<label>:<test>": (p-value, alpha)}``.

    ``values`` maps each variable of ``tests`` to a scalar (a dict, or a dataset of one cell); ``tests``
    is as in :func:`setting_pvalues` (``("p", var)`` a p-value, ``("t", var)`` a statistic compared
    two-sided with Student t on ``n_blocks - 1`` df); a NaN statistic gives a NaN p-value.
    """
    out = {}
    for name, (kind, var) in tests.items():
        v = float(np.asarray(values[var]))
        if kind == "t":
            v = float(t_pvalue(v, n_blocks - 1)) if np.isfinite(v) else math.nan
        elif kind != "p":
            raise ValueError(f"'tests' entries must be ('p' or 't', variable), got {kind!r} for {name!r}")
        out[f"{label}:{name}"] = (v, alpha)
    return out


#: per-setting fields of :func:`truth_verdict` (Hotelling reference, ``reference="F"``)
TRUTH_FIELDS = ("c2_t", "curve_t2", "curve_p", "dgap_t2", "dgap_p")
#: the same with ``reference="max-t"``: the statistics are max_k |t_k|, not T^2
TRUTH_FIELDS_MAX_T = ("c2_t", "curve_max_t", "curve_p", "dgap_max_t", "dgap_p")


def truth_fields(reference: str = "F") -> tuple[str, ...]:
    """The fields :func:`truth_verdict` returns with this ``reference``."""
    return TRUTH_FIELDS_MAX_T if reference == "max-t" else TRUTH_FIELDS


def truth_rng(seed: int, setting: str) -> np.random.Generator:
    """The generator of the bootstrap in :func:`truth_verdict` for ``setting`` of a run at ``seed``: a
    function of those two alone (not of the study, the engine, the order of evaluation or the data), so a
    dataset stays bit-identical across engines, a p-value moves only with its inputs, and two studies that
    analyse the same blocks of one setting (asymmetry and rate_k) get the same p-value."""
    return np.random.default_rng([int(seed), 0xB0075, *str(setting).encode()])


def truth_verdict(k: np.ndarray, gap_blocks: np.ndarray, dgap_blocks: np.ndarray, gap_exact: np.ndarray,
                  gap_exact_cov: np.ndarray | None, c2: tuple[float, float], c2_exact: tuple[float, float], *,
                  alpha: float, standardise: bool = False, reference: str = "F",
                  rng: np.random.Generator | None = None) -> tuple[dict, list[str]]:
    """Tests of a Monte Carlo gap curve against the exact one, independent of the estimator's constants.

    (i) The block-mean curve against ``gap_exact`` at every k jointly (:func:`simkit.stats.truth_tests.curve_test`:
    Hotelling T^2 with the between-block covariance, plus ``gap_exact_cov`` where the exact curve is
    itself Monte Carlo); (ii) the Z-free ``dgap_k = gap_k - gap_2k`` blocks (every k whose double is
    on the grid and whose blocks are finite) against the exact dgap; (iii) the fitted c2 against the
    exact c2, Student t on n_blocks - 1 df. Each rejects at ``alpha``.

    ``standardise``: both Hotelling tests on columns scaled by 1 / their between-block sd
    (:func:`simkit.stats.truth_tests.curve_test`'s ``standardise``: the same p-values where the plain form
    works, and a usable covariance over the long k grids at small tau where it does not; hard_regime).

    ``reference``: "F" (default; hard_regime's pre-registered analysis) runs (i) and (ii) as Hotelling
    tests; "max-t" runs them as :func:`simkit.stats.truth_tests.max_t_test` (the largest studentised deviation
    over k, Efron bootstrap reference), which keeps its size on heavy-tailed blocks where the F reference
    does not (asymmetry's brown-vmf-d3: 4/200 seeds at 1e-3). ``rng`` (required with "max-t";
    :func:`truth_rng`) is split into one generator per test.

    Returns ``({field: value for truth_fields(reference)}, problems)``; the fields are NaN when the inputs
    are not finite (then no problem is reported: the rate verdict says why).
    """
    from simkit.stats.truth_tests import curve_test, dgap_test

    fields = truth_fields(reference)
    out = {n: math.nan for n in fields}
    if reference == "max-t":
        if not isinstance(rng, np.random.Generator):
            raise ValueError("'rng' must be a numpy Generator when reference='max-t' (see truth_rng)")
        r_curve, r_dgap = rng.spawn(2)
        kw = {"reference": "max-t"}
    elif reference == "F":
        r_curve = r_dgap = None
        kw = {"standardise": standardise}
    else:
        raise ValueError(f"'reference' must be 'F' or 'max-t', got {reference!r}")
    gap = gap_blocks[np.all(np.isfinite(gap_blocks), axis=1)]
    if gap.shape[0] < 3 or not np.all(np.isfinite(gap_exact)):
        return out, []
    cov = gap_exact_cov if gap_exact_cov is not None and np.any(gap_exact_cov) else None
    ct = curve_test(gap, gap_exact, exact_cov=cov, rng=r_curve, **kw)
    dg = dgap_blocks[np.any(np.isfinite(dgap_blocks), axis=1)]  # drop failed (all-NaN) blocks
    cols = np.all(np.isfinite(dg), axis=0) if dg.shape[0] else np.zeros(k.size, bool)
    m = int(np.argmin(cols)) if not cols.all() else cols.size  # dgap is finite on a prefix of the grid
    sub = None if cov is None else cov[: m + 1, : m + 1]  # the differences keep the curve's correlation
    if m >= 1 and dg.shape[0] >= 3:
        dgt = dgap_test(dg[:, :m], k[: m + 1], gap_exact[: m + 1], exact_gap_cov=sub, rng=r_dgap, **kw)
    else:  # no k with 2k on the grid and finite blocks: the dgap test cannot be made
        dgt = None
    c2_se = float(np.hypot(c2[1], c2_exact[1]))
    out.update({fields[1]: ct.statistic, "curve_p": ct.p_value, "c2_t": (c2[0] - c2_exact[0]) / c2_se})
    if dgt is not None:
        out.update({fields[3]: dgt.statistic, "dgap_p": dgt.p_value})
    tcrit = stats.t.isf(alpha / 2, gap.shape[0] - 1)
    problems = []
    if not abs(out["c2_t"]) <= tcrit:
        problems.append(f"c2 t {out['c2_t']:+.2f} beyond +-{tcrit:.2f}")
    name = "max |t|" if reference == "max-t" else "T^2"
    if not ct.p_value >= alpha:
        problems.append(f"Monte Carlo curve differs from the exact curve ({name} p = {ct.p_value:.2g})")
    if dgt is not None and not dgt.p_value >= alpha:
        problems.append(f"dgap differs from the exact dgap ({name} p = {dgt.p_value:.2g})")
    return out, problems


def truth_verdict_standardised(k: np.ndarray, gap_blocks: np.ndarray, dgap_blocks: np.ndarray, gap_exact: np.ndarray,
                               gap_exact_cov: np.ndarray | None, c2: tuple[float, float],
                               c2_exact: tuple[float, float], *, alpha: float) -> tuple[dict, list[str]]:
    """:func:`truth_verdict` with ``standardise=True`` (every column scaled by 1 / its between-block sd
    before the Hotelling tests; see its Notes)."""
    return truth_verdict(k, gap_blocks, dgap_blocks, gap_exact, gap_exact_cov, c2, c2_exact, alpha=alpha,
                         standardise=True)



def truth_columns(out: dict, k: np.ndarray, gap_blocks: np.ndarray, dgap_blocks: np.ndarray, labels, seed: int, *,
                  alpha: float, gap_exact_cov: np.ndarray | None = None, c2_exact_mcse=None, verdict: str = "verdict",
                  reason: str = "verdict_reason", slope: str = "slope") -> None:
    """:func:`truth_verdict` (max-t reference, :func:`truth_rng` per label) of every setting, into ``out``.

    Reads ``out``'s ``gap_exact``, ``c2_estimate`` (and ``_mcse``), ``c2_exact`` per setting; writes the
    :data:`TRUTH_FIELDS_MAX_T` columns, and turns the rate verdict ``out[verdict][i]`` to "fail", its
    problems appended to ``out[reason][i]``, where the rate verdict is not "error", the slope is finite
    and a truth test rejects. ``gap_exact_cov`` (setting, k, k) and ``c2_exact_mcse``: default exact.
    """
    n = len(out[verdict])
    for name in TRUTH_FIELDS_MAX_T:
        out[name] = np.full(n, np.nan)
    for i in range(n):
        fields, problems = truth_verdict(
            k, gap_blocks[i], dgap_blocks[i], out["gap_exact"][i], None if gap_exact_cov is None else gap_exact_cov[i],
            (out["c2_estimate"][i], out["c2_estimate_mcse"][i]),
            (out["c2_exact"][i], 0.0 if c2_exact_mcse is None else c2_exact_mcse[i]), alpha=alpha,
            reference="max-t", rng=truth_rng(seed, str(labels[i])))
        for name, v in fields.items():
            out[name][i] = v
        if out[verdict][i] != "error" and np.isfinite(out[slope][i]) and problems:
            out[verdict][i] = "fail"
            out[reason][i] = "; ".join(p for p in (out[reason][i], *problems) if p)


def rate_truth_verdict(rate: dict, k: np.ndarray, gap_blocks: np.ndarray, dgap_blocks: np.ndarray,
                       gap_exact: np.ndarray, gap_exact_cov: np.ndarray | None, c2: tuple[float, float],
                       c2_exact: tuple[float, float], *, alpha: float, reference: str = "F",
                       rng: np.random.Generator | None = None) -> tuple[str, str, dict]:
    """A rate verdict (``rate`` from :func:`rate_verdict`) combined with the exact-curve tests (c2 t, the
    Monte Carlo curve and the Z-free dgap against the exact curve at every k, each at ``alpha``): "fail"
    when either finds a problem; the rate verdict as it is when it is "error" or its slope is not finite.
    Returns ``(verdict, reason, truth fields)`` (the fields of :func:`truth_fields` of ``reference``).

    ``reference="F"``: :func:`truth_verdict_standardised`, the Hotelling tests on columns divided by their
    between-block sd (the statistics are invariant under that rescaling): over a long k grid at small tau
    the block sd of gap_k spans orders of magnitude and the raw covariance is too ill-conditioned to
    solve, although its correlation matrix is not (hard_regime: k = 1..2^20 at tau = 0.02).
    ``reference="max-t"``: :func:`truth_verdict` with the bootstrap max-t tests (``rng`` required,
    :func:`truth_rng`), which invert no covariance and keep their size on heavy-tailed blocks.
    """
    if reference == "F":
        fields, problems = truth_verdict_standardised(k, gap_blocks, dgap_blocks, gap_exact, gap_exact_cov, c2,
                                                      c2_exact, alpha=alpha)
    else:
        fields, problems = truth_verdict(k, gap_blocks, dgap_blocks, gap_exact, gap_exact_cov, c2, c2_exact,
                                         alpha=alpha, reference=reference, rng=rng)
    if rate["verdict"] == "error" or not np.isfinite(rate["slope"]):
        return rate["verdict"], rate["reason"], fields
    problems = [p for p in (rate["reason"], *problems) if p]
    return ("pass" if not problems else "fail"), "; ".join(problems), fields


def size_slopes(sizes: ArrayLike, blocks: ArrayLike) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Slope of log mean on log size (:func:`fit_rate` without the 1/k term, jackknife SE) of each curve
    of ``blocks`` (..., block, size) over ``sizes`` (e.g. a train/test gap over training sizes n); NaN
    with fewer than 3 sizes or a non-finite block value."""
    sizes, b = np.asarray(sizes), np.asarray(blocks, dtype=float)
    slope, se = np.full(b.shape[:-2], np.nan), np.full(b.shape[:-2], np.nan)
    for idx in np.ndindex(*b.shape[:-2]):
        if sizes.size >= 3 and np.all(np.isfinite(b[idx])):
            f = fit_rate(sizes, b[idx], int(sizes[0]), with_inverse=False)
            slope[idx], se[idx] = f.slope, f.slope_se
    return slope, se
