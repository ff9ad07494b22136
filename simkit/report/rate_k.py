"""Report of the C1 study (``rate_k``), declared: the verdict table, gap_k with its fit, k·gap_k
against c1, residuals and the control-variate gain."""

from __future__ import annotations

import math
import os
from types import SimpleNamespace

import numpy as np
import xarray as xr
from scipy import stats

from simkit.report.document import study_report
from simkit.report.spec import (RESIDUAL_KEY, Failures, FigurePage, Panel, Table, Text, TitlePage, config, render,
                                require, verdict_heading)

__all__ = ["rate_k_sections", "rate_k_report", "PAGES"]

C1_TEXT = (
    "Claim C1 (finite-k bias, rate 1/k). The InfoNCE risk with k negatives exceeds log k plus the cross-entropy "
    "CE(M, Q) of the positive kernel M against the softmax retrieval kernel Q by gap_k = R_k − log k − CE, and this "
    "gap vanishes at rate 1/k, not at the rate 1/√k of earlier analyses. More precisely gap_k = c1/k + O(1/k²) with "
    "the exactly computable constant c1 = E_x[ m1(x)/Z(x) − (Z2(x)/Z(x)² − 1)/2 ] (docs/theory.md, C1). So a log–log "
    "regression of gap_k on k must give slope −1 and reject −1/2, and k·gap_k must approach c1.")


def _method(ds: xr.Dataset) -> str:
    cfg, n_blocks = config(ds), ds.sizes.get("block", "?")
    return (
        f"Method. For each setting (π, kernel M = vMF(x, κ_M), temperature τ, φ = identity on S^(d−1)) the study "
        f"runs {n_blocks} independent replicate blocks of {cfg.get('block_anchors', '?')} anchors. A streaming "
        f"InfoNCE estimator evaluates gap_k for every k = 1, 2, 4, …, {int(ds['k'].values.max())} from the same "
        f"negatives (common random numbers across k), with control variates whose conditional means are known "
        f"exactly, so that gap_k is estimated without the Monte Carlo noise of R_k and CE separately. The rate is the "
        f"slope of a weighted least-squares fit of log gap_k on log k and 1/k over k ≥ k_min (the 1/k term absorbs "
        f"the O(1/k²) correction; k_min = smallest grid k ≥ {cfg.get('k_min_factor', '?')} × the expansion scale); "
        f"c1 and c2 come from a WLS fit of gap_k on 1/k and 1/k² over the same range, and are compared with their "
        f"exact values. Every standard error is a delete-one-block jackknife over the independent blocks, which "
        f"accounts for the correlation across k; intervals use Student t with {n_blocks} − 1 degrees of freedom. "
        f"Values are printed as estimate ± MCSE (or SE).")


def _rule(ds: xr.Dataset) -> str:
    alpha, n_blocks, n_set = float(ds.attrs.get("alpha", np.nan)), ds.sizes.get("block", 0), ds.sizes["setting"]
    tcrit = stats.t.isf(alpha / 2, n_blocks - 1) if math.isfinite(alpha) and n_blocks > 1 else np.nan
    return (
        f"Verdict rule (α = {alpha:g}, dataset attribute 'alpha'). A setting passes when (i) the level-{1 - alpha:g} "
        f"jackknife t-interval of the slope (second line of the CI column) contains −1, (ii) slope = −1/2 is "
        f"rejected at level α, (iii) |t| ≤ t_(1−α/2, n−1) = {tcrit:.2f} for c1 and for c2, where t = (estimate − "
        f"exact)/√(MCSE² + MCSE_exact²) on n − 1 = {n_blocks} − 1 degrees of freedom, and (iv) the Monte Carlo gap "
        f"curve and the Z-free dgap_k = gap_k − gap_2k agree with the exact curve at every k jointly: the largest "
        f"studentised deviation over k, max_k |t_k|, against its Efron bootstrap law (9999 resamples of the blocks; "
        f"the exact curve's own error drawn from its covariance where it is Monte Carlo), p ≥ α. The exact curve "
        f"and c2 are computed by simkit.exact.curve, which shares no constant with the estimator's control "
        f"variates. A setting one of whose tasks raised is marked 'error' whatever its checks (its summaries use the "
        f"finished blocks only). False-failure rate: if C1 holds, checks (i), (iii) (two tests) and (iv) (two tests) "
        f"each fail with probability α (nominally; simkit calibrate measures the real rates); check (ii) fails only "
        f"for lack of power. So a setting for which C1 is true fails with probability at most 5α = {5 * alpha:g}, and "
        f"at least one of the {n_set} settings with probability at most {5 * alpha * n_set:g} (union bound). "
        f"Intervals, p and t are functions of the estimates and standard errors shown, and carry no separate MCSE.")



RESULTS = Table((
    ("setting", "{facet}"), ("π", "{pi}\nκ_π = {kappa_pi}"), ("d", "{dim}"), ("κ_M", "{kappa_m}"), ("τ", "{tau}"),
    ("k_min", "{k_min}"), ("slope ± jackknife SE", "{slope±slope_se}"),
    ("CI 95%\nCI of the verdict", "[{slope_ci_low:.4f}, {slope_ci_high:.4f}]\n"
                                  "[{slope_verdict_low:.4f}, {slope_verdict_high:.4f}]"),
    ("p-value of slope = −1/2", "{slope_p_half:.2g}"),
    ("c1 estimate ± MCSE\nc1 exact ± MCSE", "{c1_estimate±c1_estimate_mcse}\n{c1_exact±c1_exact_mcse}"),
    ("t of c1", "{c1_z:+.2f}"),
    ("c2 estimate ± MCSE\nc2 exact ± MCSE", "{c2_estimate±c2_estimate_mcse}\n{c2_exact±c2_exact_mcse}"),
    ("t of c2", "{c2_t:+.2f}"), ("p: MC curve vs exact\np: dgap vs exact", "{curve_p:.2g}\n{dgap_p:.2g}"),
), heading=verdict_heading("Regression results and verdicts"), widths=(0.82, 0.62, 0.25, 0.36, 0.36, 0.42, 1.2, 1.3, 0.62, 1.15, 0.42, 1.2, 0.42, 0.82, 0.52),
    size=8.0)

_K = dict(fit_range="k_min")
_KGAP = dict(band="k_gap_mcse", hline="c1_exact", hline_band="c1_exact_mcse", fit=("c1_estimate", "c2_estimate"),
             label="k·gap_k ± 2 MCSE", fit_label="fit c1 + c2/k (k ≥ k_min)", hline_label="exact c1 ± 2 MCSE", **_K)
PAGES = (
    TitlePage(texts=(C1_TEXT, _method), then=(RESULTS, Text(_rule), Failures())),
    FigurePage(
        "Finite-k gap on log–log axes: the rate is 1/k",
        (Panel("gap", band="gap_mcse", fit="fit_gap", reference="gap_exact", slopes=(-1.0, -0.5), logy=True,
               title="{facet}: slope {slope±slope_se}", label="gap_k ± 2 MCSE", fit_label="WLS fit (log k and 1/k)",
               reference_label="exact gap (uniform π)", **_K),),
        caption="Points: gap_k estimated with control variates, with a band and error bars of ±2 MCSE (sd over "
                "blocks / √n_blocks; mostly hidden by the markers). Red: the fitted log gap_k = a + b log k + c/k over "
                "the shaded fit range k ≥ k_min; grey: reference slopes 1/k (dashed) and 1/√k (dotted) through the "
                "data at k_min, C1 predicting the first; black: the exact gap (closed form, uniform π only).",
        subtitle="slope of the WLS fit ± jackknife SE in each panel title"),
    FigurePage(
        "k · gap_k approaches the predicted constant c1",
        (Panel("k_gap", reference="k_gap_exact", title="{facet}: c1 {c1_estimate±c1_estimate_mcse}",
               reference_label="k · exact gap_k", **_KGAP),
         Panel("k_gap", reference=("c1_exact", "c2_exact"), zoom=True,
               title="k ≥ {k_min}: exact c1 {c1_exact±c1_exact_mcse}", reference_label="exact c1 + c2/k", **_KGAP)),
        caption="Top: k·gap_k over the whole grid; bottom: the fit range k ≥ k_min enlarged. Band and error bars ±2 "
                "MCSE (k_gap_mcse). Green: the exact c1 with a band of ±2 MCSE of the exact value (a line where c1 is "
                "exact). Red: the fitted c1 + c2/k from the WLS fit of gap_k on 1/k and 1/k². Black dashed (bottom): "
                "the exact c1 + c2/k; black line (top): k times the exact gap curve (simkit.exact.curve.gap_curve), "
                "independent of the estimator's constants.",
        subtitle="estimated c1 ± jackknife MCSE in each top panel title"),
    FigurePage(
        "Residuals of the two fits",
        (Panel("resid_rate", kind="residual", title="{facet}: rate fit", **_K),
         Panel("resid_c1", kind="residual", title="{facet}: c1 fit", **_K)),
        caption="Standardised residuals (estimate − fit)/MCSE of the rate fit (top, on the log scale) and of the c1 "
                "fit (bottom). " + RESIDUAL_KEY),
    FigurePage(
        "Variance reduction by the control variates",
        (Panel("gap_mcse", also=("gap_plain_mcse",), logy=True, label="with control variates (gap_mcse)"),
         Panel("cv_gain", logy=True, label="(plain / control-variate MCSE)²")),
        caption=lambda ds: (
            "Top: Monte Carlo standard error of gap_k with the control variates (gap_mcse) and without them "
            "(gap_plain_mcse: the exact per-anchor limit subtracted only). Bottom: the variance-reduction factor "
            "(gap_plain_mcse / gap_mcse)², i.e. how many times more blocks the plain estimator would need for the "
            "same precision." + (f" Each MCSE is itself estimated from {ds.sizes['block']} blocks, so the factor is "
                                 f"uncertain by roughly ±{200 / math.sqrt(ds.sizes['block'] - 1):.0f}% "
                                 f"(2/√(n_blocks − 1))." if ds.sizes.get("block", 0) > 1 else ""))),
)

_REQUIRED = ("setting", "k", "gap", "gap_mcse", "gap_plain_mcse", "k_gap", "k_gap_mcse", "fit_gap", "resid_rate",
             "resid_c1", "verdict")


def _derived(ds: xr.Dataset) -> xr.Dataset:
    """Display quantities computed from the saved variables (no re-run): k·exact gap and the CV gain."""
    k = ds["k"].astype(float)
    out = ds.assign(cv_gain=(ds["gap_plain_mcse"] / ds["gap_mcse"]) ** 2)
    out["cv_gain"].attrs = {"long_name": "variance-reduction factor", "units": "1"}
    if "gap_exact" in ds:
        out["k_gap_exact"] = k * ds["gap_exact"]
        out["k_gap_exact"].attrs = {"long_name": "k times the exact gap, in nats", "units": "1"}
    return out


def rate_k_sections(doc, ds: xr.Dataset, study=None) -> None:
    """The pages of the C1 study (all but provenance), for its own report or the validation report."""
    require(ds, _REQUIRED, "rate_k")
    render(doc, _derived(ds), PAGES, study=study)


def rate_k_report(ds: xr.Dataset, path: str | os.PathLike) -> int:
    """Write the C1 study's PDF (its pages, then the provenance) from its dataset alone; return the page count."""
    require(ds, _REQUIRED, "rate_k")
    return study_report(SimpleNamespace(name="rate_k", claim="C1", title="the finite-k InfoNCE bias decays as c1/k",
                                        report_sections=rate_k_sections), ds, path)
