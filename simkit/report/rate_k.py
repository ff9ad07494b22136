"""Report of the C1 study (``rate_k``), declared: the verdict table, gap_k with its fit, k·gap_k
against c1, residuals and the control-variate gain; prose in ``pages/rate_k.md``."""

from __future__ import annotations

import math
import os
from types import SimpleNamespace

import xarray as xr

from simkit.report.document import study_report
from simkit.report.spec import (VMF_SETTING, Failures, FigurePage, Panel, Table, Text, TitlePage, constant_page, prose,
                                rate_columns, rate_page, residual_page, study_sections, verdict_heading)

P = prose("rate_k")
RESULTS = Table(VMF_SETTING + rate_columns() + (
    ("c1 estimate ± MCSE\nc1 exact ± MCSE", "{c1_estimate±c1_estimate_mcse}\n{c1_exact±c1_exact_mcse}"),
    ("t of c1", "c1_z:+.2f"),
    ("c2 estimate ± MCSE\nc2 exact ± MCSE", "{c2_estimate±c2_estimate_mcse}\n{c2_exact±c2_exact_mcse}"),
    ("t of c2", "c2_t:+.2f"), ("p: MC curve vs exact\np: dgap vs exact", "{curve_p:.2g}\n{dgap_p:.2g}")),
    heading=verdict_heading("Regression results and verdicts"), size=8.0)

PAGES = (
    TitlePage(texts=(P["claim"], P["method"]), then=(RESULTS, Text(P["rule"]), Failures())),
    rate_page("Finite-k gap on log–log axes: the rate is 1/k", "gap", "fit_gap", P["gap_caption"],
              reference="gap_exact", label="gap_k ± 2 MCSE", reference_label="exact gap (uniform π)"),
    constant_page("k · gap_k approaches the predicted constant c1", "k_gap", "k·gap_k", ("c1", "c2"), P["kgap_caption"],
                  top=dict(reference="k_gap_exact", reference_label="k · exact gap_k"),
                  zoom=dict(reference=("c1_exact", "c2_exact"), reference_label="exact c1 + c2/k")),
    residual_page("Residuals of the two fits", P["residual_caption"], ("resid_rate", "rate fit", "k_min"),
                  ("resid_c1", "c1 fit", "k_min")),
    FigurePage(
        "Variance reduction by the control variates",
        (Panel("gap_mcse", also=("gap_plain_mcse",), logy=True, label="with control variates (gap_mcse)"),
         Panel("cv_gain", logy=True, label="(plain / control-variate MCSE)²")),
        caption=P["cv_caption"]),
)


def derive(ds: xr.Dataset) -> xr.Dataset:
    """Display quantities computed from the saved variables (no re-run): k·exact gap, the CV gain and the
    numbers the prose quotes."""
    k, alpha, nb = ds["k"].astype(float), float(ds.attrs.get("alpha", math.nan)), ds.sizes.get("block", 0)
    out = ds.assign(cv_gain=((ds["gap_plain_mcse"] / ds["gap_mcse"]) ** 2).assign_attrs(
        long_name="variance-reduction factor", units="1"))
    if "gap_exact" in ds:
        out["k_gap_exact"] = (k * ds["gap_exact"]).assign_attrs(long_name="k times the exact gap, in nats", units="1")
    return out.assign_attrs(ff_setting=5 * alpha, ff_all=5 * alpha * ds.sizes["setting"],
                            cv_uncertainty_pct=200 / math.sqrt(nb - 1) if nb > 1 else math.nan)


def rate_k_report(ds: xr.Dataset, path: str | os.PathLike) -> int:
    """Write the C1 study's PDF (its pages, then the provenance) from its dataset alone; return the page count."""
    return study_report(SimpleNamespace(name="rate_k", claim="C1", title="the finite-k InfoNCE bias decays as c1/k",
                                        report_sections=study_sections("rate_k")), ds, path)
