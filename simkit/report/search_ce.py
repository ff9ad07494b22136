"""Report of the C2 study (``search_ce``): results and rule, retrieval quality, |D_k| with its fit, k·D_k
against d1, residuals and the control-variate gain; prose in ``pages/search_ce.md``."""

from __future__ import annotations

import math

import numpy as np
import xarray as xr

from simkit.report.spec import (VMF_SETTING, Failures, FigurePage, Panel, Table, Text, TitlePage, config,
                                constant_page, format_pm, prose, rate_columns, rate_page, render, residual_page,
                                verdict_heading)

P = prose("search_ce")


def _sign(ds: xr.Dataset, i: int) -> str:
    sign = {1.0: "positive", -1.0: "negative", 0.0: "changes"}.get(float(ds["d_sign"].values[i]), "n/a")
    ks = float(ds["k_sign"].values[i]) if "k_sign" in ds else math.nan
    return sign + (f"\n(one sign from k = {ks:g})" if math.isfinite(ks) and ks > 1 else "")


def _curve_p(ds: xr.Dataset, i: int) -> str:
    name = "d_curve_p_bonferroni" if "d_curve_p_bonferroni" in ds else "d_curve_p"  # the verdict's curve test
    p = float(ds[name].values[i]) if name in ds else math.nan
    return f"{p:.3g}" if math.isfinite(p) else "not tested\n(no exact curve)"


RESULTS = Table(VMF_SETTING + (("sign of D_k (k ≥ k_min)", _sign),) + rate_columns() + (
    ("d1 estimate ± MCSE", "d1_estimate"), ("d1 predicted ± MCSE", "d1_exact"), ("z of d1", "d1_z:+.2f"),
    ("p of D_k vs exact", _curve_p)),
    heading=verdict_heading("Regression results and verdicts"))


def _retrieval(doc, ds: xr.Dataset) -> None:
    """Top-1 agreement and recall at a handful of k spread over the grid (always k_max)."""
    k, n_top = ds["k"].values, int(ds.attrs.get("n_top", 10))
    show = [int(kk) for kk in k if kk >= n_top]
    if len(show) > 5:
        show = [show[j] for j in np.unique(np.round(np.linspace(0, len(show) - 1, 5)).astype(int))]
    cols = [("setting", "facet")]
    for kk in show:
        g = int(np.nonzero(k == kk)[0][0])
        cols.append((f"k = {kk}\ntop-1 · recall@{n_top}", lambda ds, i, g=g: "\n".join(
            _pm(ds[n].values[i, g], ds[f"{n}_mcse"].values[i, g]) for n in ("top1", "recall"))))
    render(doc, ds, (
        Table(tuple(cols), heading="Retrieval quality: softmax retrieval Q_k against the ideal retrieval M_k",
              verdict=None),
        Text(P["retrieval_note"])))


def _pm(value: float, se: float) -> str:
    """A proportion ± MCSE: an MCSE of 0 means no variation over blocks, not an exact value."""
    return f"{value:.4f} ± 0 (no variation)" if math.isfinite(value) and se == 0 else format_pm(value, se)


PAGES = (
    TitlePage(texts=(P["claim"], P["method"]), then=(RESULTS, Text(P["rule"]), _retrieval, Failures())),
    rate_page("|D_k| = |R_k − E CE(M_k, Q_k)| on log–log axes: the rate is 1/k", "d", "fit_d_abs", P["d_caption"],
              absolute=True, label="D_k > 0, ± 2 MCSE", reference="d_exact", reference_label="exact D_k"),
    constant_page("k · D_k approaches the derived constant d1 = E[m1/Z] − E Cov_M(m, s)", "k_d", "k·D_k", ("d1", "d2"),
                  P["kd_caption"], "derived", reference="k_d_exact", reference_label="k × exact D_k",
                  top=dict(also=("k_pos_term", "k_snis_term"))),
    FigurePage(
        "Retrieval quality: softmax search against ideal search on the same database",
        (Panel("top1", ylim=(-0.02, 1.05), label="block mean ± 2 MCSE"),
         Panel("recall", ylim=(-0.02, 1.05), label="block mean ± 2 MCSE")),
        caption=P["retrieval_caption"]),
    residual_page("Residuals of the two fits", P["residual_caption"], ("resid_rate", "rate fit", "k_min"),
                  ("resid_d1", "d1 fit", "k_min")),
    FigurePage(
        "Variance reduction: conditional mean of the positive's score and control variates",
        (Panel("d_mcse", also=("d_rb_mcse", "d_plain_mcse"), logy=True, label="control variates (d_mcse)"),
         Panel("cv_gain", also=("rb_gain",), logy=True, label="(plain / CV MCSE)²")),
        caption=P["cv_caption"]),
)


def derive(ds: xr.Dataset) -> xr.Dataset:
    """Display quantities from the saved variables (no re-run): k times the two parts of D_k, the
    variance-reduction factors of the C2 estimator, and the numbers the prose quotes."""
    alpha, n_set, cfg = float(ds.attrs.get("alpha", np.nan)), ds.sizes["setting"], config(ds)
    n_tests = 2 * n_set + (int(np.all(np.isfinite(ds["d_exact"].values), axis=1).sum()) if "d_exact" in ds else -n_set)
    n_rank = min(int(cfg.get("rank_anchors", 0) or 0), int(cfg.get("block_anchors", 0) or 0))
    k, out = ds["k"].astype(float), ds.assign_attrs(n_tests=n_tests, ff_all=1 - (1 - alpha) ** n_tests,
                                                    n_top=int(ds.attrs.get("n_top", 10)), n_rank=n_rank or "?")
    new = {"k_pos_term": (k * ds["pos_term"], "k times the positive-weight term, in nats"),
           "k_snis_term": (k * ds["snis_term"], "k times the self-normalisation term, in nats"),
           "cv_gain": ((ds["d_plain_mcse"] / ds["d_mcse"]) ** 2, "variance-reduction factor"),
           **({"k_d_exact": (k * ds["d_exact"], "k times the exact D_k, in nats")} if "d_exact" in ds else {}),
           "rb_gain": ((ds["d_rb_mcse"] / ds["d_mcse"]) ** 2, "(conditional-mean-only / CV MCSE)²")}
    for name, (value, long_name) in new.items():
        out[name] = value.assign_attrs(long_name=long_name, units="1")
    return out
