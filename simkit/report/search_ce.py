"""Report of the C2 study (``search_ce``): results and rule, retrieval quality, |D_k| with its fit, k·D_k
against d1, residuals and the control-variate gain."""

from __future__ import annotations

import math

import numpy as np
import xarray as xr

from simkit.report.document import format_pm
from simkit.report.spec import (RESIDUAL_KEY, Failures, FigurePage, Panel, Table, Text, TitlePage, config, render,
                                require, verdict_heading)

__all__ = ["search_ce_sections"]

C2_TEXT = (
    "Claim C2 (similarity-search interpretation). Take a query x ~ π and a database of k unseen points y_1, …, y_k "
    "~ π. The empirical softmax kernel Q_k(x, y_j) = e^{s(x,y_j)} / Σ_i e^{s(x,y_i)} is what a trained embedding "
    "retrieves; the ideal empirical kernel M_k(x, y_j) = m(x, y_j) / Σ_i m(x, y_i), with m = dM(x, ·)/dπ, is what "
    "the positive-pair generator M implies. C2 says that the InfoNCE risk with k negatives is the expected "
    "cross-entropy of ideal against softmax retrieval up to O(1/k): D_k = R_k − E CE(M_k, Q_k) = O(1/k), "
    "CE(P, Q) = −Σ_j P_j log Q_j (docs/theory.md, C2). So minimising InfoNCE learns retrieval that mimics the ideal "
    "retrieval, and a log–log regression of |D_k| on k must give slope −1 and reject −1/2.")

_REQUIRED = ("setting", "k", "d", "d_mcse", "d_abs", "k_d", "k_d_mcse", "fit_d_abs", "resid_rate", "resid_d1",
             "top1", "top1_mcse", "recall", "recall_mcse", "d_rb_mcse", "d_plain_mcse", "verdict")


def _method(ds: xr.Dataset) -> str:
    cfg, n_blocks = config(ds), ds.sizes.get("block", "?")
    return (
        f"Method. For each setting (π, kernel M = vMF(x, κ_M), temperature τ, φ = identity on S^(d−1)) the study "
        f"runs {n_blocks} independent replicate blocks; each draws one database of {int(ds['k'].values.max())} points "
        f"shared by {cfg.get('block_anchors', '?')} queries, and one streaming pass gives every k = 1, 2, 4, … "
        f"(common random numbers). Since CE(M_k, Q_k) = log S_k − V_k/W_k with S_k = Σ e^{{s_j}}, W_k = Σ m_j, "
        f"V_k = Σ m_j s_j, D_k = E log(1 + e^{{s0}}/S_k) + E[V_k/W_k − s0]. The estimator replaces the positive's "
        f"score s0 by its exact conditional mean and subtracts six control variates whose conditional means are "
        f"exactly zero (e.g. (1/k) Σ m_j (s_j − μ_s(x)), since E_π m = 1 and E_π[m s] = μ_s), with coefficients per "
        f"k from an independent pilot: it is exactly unbiased. The rate is the slope of a weighted least-squares fit "
        f"of log |D_k| on log k and 1/k over k ≥ k_min, k_min = smallest grid k ≥ {cfg.get('k_min_factor', '?')} × "
        f"max(E[Z2/Z²], E[m1/Z], w2), fixed in advance: the expansion of D_k is in powers of these over k, w2 = "
        f"E_x E_π[m²] being the importance weights' second moment. d1 and d2 come from a WLS fit of D_k on 1/k and "
        f"1/k²; d1 is compared with the value derived by the delta method, d1 = E_x[m1/Z] − E_x Cov_M(m, s), "
        f"by a t test inside the verdict (protocols/search_ce.md). The Monte Carlo curve is tested against the "
        f"exact D_k (simkit.exact.search_curve: Gauss rules, no Monte Carlo; uniform and single-vMF π) at every k "
        f"jointly by the largest studentised deviation with an Efron-bootstrap reference (max-t). Standard errors are delete-one-block jackknives; intervals use "
        f"Student t with {n_blocks} − 1 degrees of freedom. Values are printed as estimate ± MCSE (or SE).")


def _rule(ds: xr.Dataset) -> str:
    alpha, n_set = float(ds.attrs.get("alpha", np.nan)), ds.sizes["setting"]
    n_tests = 2 * n_set + (int(np.all(np.isfinite(ds["d_exact"].values), axis=1).sum()) if "d_exact" in ds else -n_set)
    return (
        f"Verdict rule (α = {alpha:g}, dataset attribute 'alpha'). A setting passes when (i) the block means of D_k "
        f"keep one sign for k ≥ k_min (otherwise no log-log fit is attempted and the setting fails), (ii) the "
        f"level-{1 - alpha:g} jackknife t-interval of the slope (second line of the CI column) contains −1 and "
        f"(iii) slope = −1/2 is rejected at level α, (iv) the fitted d1 is within the two-sided Student t critical "
        f"value of the derived d1 and (v) where the exact curve exists, the D_k curve's t tests against it at k = 16, 256, 4096, "
        f"k_max (Bonferroni at α/4) have p ≥ α (pre-registered: {ds.attrs.get('protocol_path', 'protocols/search_ce.md')}). A setting one of whose tasks raised is marked 'error'. "
        f"False-failure rate: if C2 holds, (ii), (iv) and (v) each fail with probability α (nominal); (i) and (iii) "
        f"fail only by lack of precision; so {1 - (1 - alpha) ** n_tests:.2g} for the {n_tests} null tests of the "
        f"{n_set} settings together. Intervals and p are functions of the "
        f"estimates and standard errors shown, and carry no separate MCSE.")



def _sign(ds: xr.Dataset, i: int) -> str:
    sign = {1.0: "positive", -1.0: "negative", 0.0: "changes"}.get(float(ds["d_sign"].values[i]), "n/a")
    ks = float(ds["k_sign"].values[i]) if "k_sign" in ds else math.nan
    return sign + (f"\n(one sign from k = {ks:g})" if math.isfinite(ks) and ks > 1 else "")


def _curve_p(ds: xr.Dataset, i: int) -> str:
    name = "d_curve_p_bonferroni" if "d_curve_p_bonferroni" in ds else "d_curve_p"  # the verdict's curve test
    p = float(ds[name].values[i]) if name in ds else math.nan
    return f"{p:.3g}" if math.isfinite(p) else "not tested\n(no exact curve)"


RESULTS = Table((
    ("setting", "{facet}"), ("π", "{pi}\nκ_π = {kappa_pi}"), ("d", "{dim}"), ("κ_M", "{kappa_m}"), ("τ", "{tau}"),
    ("k_min", "{k_min}"), ("sign of D_k (k ≥ k_min)", _sign), ("slope ± SE", "{slope±slope_se}"),
    ("CI 95%\nCI of the verdict", "[{slope_ci_low:.4f}, {slope_ci_high:.4f}]\n"
                                  "[{slope_verdict_low:.4f}, {slope_verdict_high:.4f}]"),
    ("p-value of slope = −1/2", "{slope_p_half:.2g}"), ("d1 estimate ± MCSE", "{d1_estimate±d1_estimate_mcse}"),
    ("d1 predicted ± MCSE", "{d1_exact±d1_exact_mcse}"), ("z of d1", "{d1_z:+.2f}"),
    ("p of D_k vs exact", _curve_p),
), heading=verdict_heading("Regression results and verdicts"),
    widths=(0.78, 0.55, 0.25, 0.33, 0.35, 0.42, 0.9, 1.1, 1.35, 0.6, 1.0, 1.0, 0.45, 0.55))


def _retrieval(doc, ds: xr.Dataset) -> None:
    """Top-1 agreement and recall at a handful of k spread over the grid (always k_max)."""
    k, n_top, cfg = ds["k"].values, int(ds.attrs.get("n_top", 10)), config(ds)
    show = [int(kk) for kk in k if kk >= n_top]
    if len(show) > 5:
        show = [show[j] for j in np.unique(np.round(np.linspace(0, len(show) - 1, 5)).astype(int))]
    cols = [("setting", "{facet}")]
    for kk in show:
        g = int(np.nonzero(k == kk)[0][0])
        cols.append((f"k = {kk}\ntop-1 · recall@{n_top}", lambda ds, i, g=g: "\n".join(
            _pm(ds[n].values[i, g], ds[f"{n}_mcse"].values[i, g]) for n in ("top1", "recall"))))
    n_rank = min(int(cfg.get("rank_anchors", 0) or 0), int(cfg.get("block_anchors", 0) or 0))
    render(doc, ds, (
        Table(tuple(cols), heading="Retrieval quality: softmax retrieval Q_k against the ideal retrieval M_k",
              verdict=None, widths=(1.0,) + (1.2,) * len(show)),
        Text(f"Top-1: fraction of queries whose most similar database point under Q_k is also the most likely under "
             f"M_k; recall@{n_top}: overlap of the two top-{n_top} sets divided by {n_top}. Means over {n_rank or '?'} "
             f"queries per block, ± MCSE over the {ds.sizes.get('block', '?')} blocks. For uniform π with τ = 1/κ_M, "
             f"Q = M and both orders coincide (exactly 1); elsewhere Q_k ranks by x·y, M_k by κ_M x·y − log π(y), and "
             f"the agreement falls as the database grows: C2 is a statement about the cross-entropy, not about exact "
             f"ranks.")))


def _pm(value: float, se: float) -> str:
    """A proportion ± MCSE: an MCSE of 0 means no variation over blocks, not an exact value."""
    return f"{value:.4f} ± 0 (no variation)" if math.isfinite(value) and se == 0 else format_pm(value, se)


_K = dict(fit_range="k_min")
PAGES = (
    TitlePage(texts=(C2_TEXT, _method), then=(RESULTS, Text(_rule), _retrieval, Failures())),
    FigurePage(
        "|D_k| = |R_k − E CE(M_k, Q_k)| on log–log axes: the rate is 1/k",
        (Panel("d", band="d_mcse", absolute=True, fit="fit_d_abs", slopes=(-1.0, -0.5), logy=True,
               title="{facet}: slope {slope±slope_se}", label="D_k > 0, ± 2 MCSE", fit_label="WLS fit (log k and 1/k)",
               reference="d_exact", reference_label="exact D_k", **_K),),
        caption="Points: |D_k| estimated with control variates, filled where D_k > 0 and hollow where D_k < 0; band "
                "and error bars ±2 MCSE (clipped at the axis). D_1 > 0 always, so a negative limit d1 means one sign "
                "change, at small k. Black line: the exact |D_k| (simkit.exact.search_curve; none for the mixture), "
                "against which the points are tested at every k (max-t, d_curve_p in the table). Red: the fitted "
                "log |D_k| = a + b log k + c/k over the shaded fit range "
                "k ≥ k_min; grey: reference slopes 1/k (dashed) and 1/√k (dotted) through the data at k_min, C2 "
                "predicting the first.",
        subtitle="slope of the WLS fit ± jackknife SE in each panel title"),
    FigurePage(
        "k · D_k approaches the derived constant d1 = E[m1/Z] − E Cov_M(m, s)",
        (Panel("k_d", band="k_d_mcse", also=("k_pos_term", "k_snis_term"), hline="d1_exact", hline_band="d1_exact_mcse",
               fit=("d1_estimate", "d2_estimate"), title="{facet}: d1 {d1_estimate±d1_estimate_mcse}", label="k·D_k",
               fit_label="fit d1 + d2/k", hline_label="derived d1 ± 2 MCSE", reference="k_d_exact",
               reference_label="k × exact D_k", **_K),
         Panel("k_d", band="k_d_mcse", hline="d1_exact", hline_band="d1_exact_mcse", fit=("d1_estimate", "d2_estimate"),
               zoom=True, title="k ≥ {k_min}: derived d1 {d1_exact±d1_exact_mcse}", label="k·D_k",
               fit_label="fit d1 + d2/k", hline_label="derived d1 ± 2 MCSE", reference="k_d_exact",
               reference_label="k × exact D_k", **_K)),
        caption="Top: k·D_k and its two parts over the whole grid: k·E log(1 + e^{s0}/S_k), which tends to E[m1/Z], "
                "and k·(E[V_k/W_k] − E s0), which tends to −E Cov_M(m, s), the bias of self-normalised retrieval. "
                "Bottom: k·D_k in the fit range k ≥ k_min, band and error bars ±2 MCSE; green band: the derived "
                "d1 ± 2 MCSE (a line where exact); red: the fitted d1 + d2/k from the WLS fit of D_k on 1/k and 1/k².",
        subtitle="estimated d1 ± jackknife MCSE in each top panel title"),
    FigurePage(
        "Retrieval quality: softmax search against ideal search on the same database",
        (Panel("top1", band="top1_mcse", ylim=(-0.02, 1.05), label="block mean ± 2 MCSE"),
         Panel("recall", band="recall_mcse", ylim=(-0.02, 1.05), label="block mean ± 2 MCSE")),
        caption=lambda ds: (
            "Top: top-1 agreement, the fraction of queries for which the most similar database point under the "
            "softmax kernel Q_k is also the most likely under the ideal kernel M_k. Bottom: recall@{n}, the overlap "
            "of the two top-{n} sets over {n} (k ≥ {n}). Band and error bars ±2 MCSE over blocks. For uniform π with "
            "τ = 1/κ_M both kernels order the database identically.").format(n=int(ds.attrs.get("n_top", 10)))),
    FigurePage(
        "Residuals of the two fits",
        (Panel("resid_rate", kind="residual", title="{facet}: rate fit", **_K),
         Panel("resid_d1", kind="residual", title="{facet}: d1 fit", **_K)),
        caption="Standardised residuals (estimate − fit)/MCSE of the rate fit (top, on the log scale) and of the d1 "
                "fit (bottom). " + RESIDUAL_KEY),
    FigurePage(
        "Variance reduction: conditional mean of the positive's score and control variates",
        (Panel("d_mcse", also=("d_rb_mcse", "d_plain_mcse"), logy=True, label="control variates (d_mcse)"),
         Panel("cv_gain", also=("rb_gain",), logy=True, label="(plain / CV MCSE)²")),
        caption="Top: Monte Carlo standard error of D_k for three estimators: the plain difference l_k − "
                "CE(M_k, Q_k) (d_plain_mcse), the same with the positive's score replaced by its exact conditional "
                "mean (d_rb_mcse), and with the six control variates on top (d_mcse). Bottom: variance-reduction "
                "factors (plain / control-variate MCSE)² and (conditional-mean-only / control-variate MCSE)²: how many "
                "times more blocks the simpler estimator would need for the same precision."),
)


def derived(ds: xr.Dataset, prefix: str = "") -> xr.Dataset:
    """Display quantities from the saved variables (no re-run): k times the two parts of D_k and the
    variance-reduction factors of the C2 estimator (``prefix`` names a study's C2 variables)."""
    k, out = ds["k"].astype(float), ds.copy()
    new = {"k_pos_term": (k * ds["pos_term"], "k times the positive-weight term, in nats"),
           "k_snis_term": (k * ds["snis_term"], "k times the self-normalisation term, in nats"),
           "cv_gain": ((ds["d_plain_mcse"] / ds["d_mcse"]) ** 2, "variance-reduction factor"),
           **({"k_d_exact": (k * ds["d_exact"], "k times the exact D_k, in nats")} if "d_exact" in ds else {}),
           "rb_gain": ((ds["d_rb_mcse"] / ds["d_mcse"]) ** 2, "(conditional-mean-only / CV MCSE)²")}
    for name, (value, long_name) in new.items():
        out[prefix + name] = value.assign_attrs(long_name=long_name, units="1")
    return out


def search_ce_sections(doc, ds: xr.Dataset, study=None) -> None:
    """The pages of the C2 study (all but provenance), for its own report or the validation report."""
    require(ds, _REQUIRED, "search_ce")
    render(doc, derived(ds), PAGES, study=study)
