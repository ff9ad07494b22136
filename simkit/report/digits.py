"""Report of the real-data study (``digits``), declared with :mod:`simkit.report.spec`: verdict tables
for C1 and C2, the gap curves (Monte Carlo beside the exact curve), k·gap_k against c1, D_k, and the
C3 train/test gap; prose in ``pages/digits.md``."""

from __future__ import annotations

import numpy as np
import xarray as xr

from simkit.report.document import format_pm
from simkit.report.spec import (ClaimTable, Failures, FigurePage, Panel, Table, Text, TitlePage, View, prose,
                                rate_columns, rate_page, verdict_heading)

P = prose("digits")


C1_TABLE = Table((("setting", "facet"), ("τ", "tau")) + rate_columns() + (("c1 predicted ± MCSE", "c1_exact"),
    ("c1 fitted ± MCSE", "c1_estimate"), ("z", "c1_z:+.2f"), ("CE ± MCSE", "ce")),
    heading=verdict_heading("C1 — the gap rate and c1"), size=8.0)
C2_TABLE = Table((("setting", "facet"),) + rate_columns("d_") + (("d1 = E m1/Z (exact)", "d1_exact:.4f"),
    ("d1 fitted ± MCSE", "d1_estimate"), ("top-1", "top1"), ("recall@10", "recall10")),
    heading=verdict_heading("C2 — D_k and retrieval", "d_verdict", "same-digit settings"), verdict="d_verdict",
    size=8.0)

_RATE = (
    TitlePage(texts=(P["intro"], P["design"]), then=(C1_TABLE, C2_TABLE, Text(P["rule"]),
                                           Failures(verdicts=("verdict", "d_verdict")))),
    rate_page("Finite-k gap on real data: Monte Carlo against the exact curve", "gap", "fit", P["gap_caption"],
              reference="gap_exact", reference_band="gap_exact_mcse", label="Monte Carlo gap ± 2 MCSE",
              reference_label="exact gap", title="{facet}: slope {slope±slope_se}; max |z| vs exact {gap_zmax:.2f}"),
    FigurePage(
        "k · gap_k approaches the predicted c1",
        (Panel("k_gap", hline="c1_exact", fit_range="k_min", fit=("c1_estimate", "c2_estimate"),
               reference="k_gap_exact", label="k·gap_k ± 2 MCSE",
               title="{facet}: c1 predicted {c1_exact±c1_exact_mcse}, fitted {c1_estimate±c1_estimate_mcse}",
               fit_label="fit c1 + c2/k", reference_label="k × exact gap", hline_label="predicted c1 (± 2 MCSE)"),),
        caption=P["kgap_caption"],
        subtitle="predicted and fitted c1 in each panel title"),
)

D_PAGE = FigurePage(
    "C2: InfoNCE risk minus the cross-entropy of same-digit retrieval",
    (Panel("d", also=("d_plain", "d1_over_k"), fit="d_fit", fit_range="d_k_min", reference="d_exact",
           reference_band="d_exact_mcse", slopes=(-0.5,), logy=True, label="D_k (control variate) ± 2 MCSE",
           title="{facet}: slope {d_slope±d_slope_se}; max |z| vs exact {d_zmax:.2f}", fit_label="WLS fit",
           reference_label="exact D_k", reason="d_verdict_reason"),
     Panel("no_match", ylim=(0.0, 1.0), title="{facet}: databases without the query's digit",
           label="share of databases without a match")),
    caption=P["d_caption"],
    subtitle="slope ± jackknife SE in each panel title")


def derive(ds: xr.Dataset) -> xr.Dataset:
    """Display quantities from the saved variables: k × exact gap, d1/k, and the largest |z| per setting."""
    k, out = ds["k"].astype(float), ds.copy()
    out["k_gap_exact"] = (k * ds["gap_exact"]).assign_attrs(long_name="k times the exact gap, in nats", units="1")
    out["d1_over_k"] = (ds["d1_exact"] / k).assign_attrs(long_name="d1/k with the exact d1, in nats", units="1")
    for z in ("gap_z", "d_z"):
        if z in ds:
            out[z.replace("_z", "_zmax")] = np.abs(ds[z]).max("k", skipna=True)
    alpha, n_c2 = float(ds.attrs.get("alpha", np.nan)), sum(str(v) != "n/a" for v in ds["d_verdict"].values)
    return out.assign_attrs(test_sha=str(ds.attrs.get("test_index_sha256", "?"))[:16], ff_c1=1 - (1 - 2 * alpha) ** ds.sizes["setting"],
                            ff_c2=1 - (1 - alpha) ** n_c2)


C3_PAGE = FigurePage("C3: train/test gap of the trained MLP against n and k", (
    Panel("c3_gap", x="n_train", series="k_train", logy=True, ylabel="G = R_test − R̂_train (nats)",
          title="{facet}: slope of log G on log n {c3_slopes}"),),
    caption=P["c3_caption"])
C3_TABLE = Table((("setting", "setting"), ("n", "n_train"), ("k", "k_train"), ("R̂_{n,k} train", "c3_risk_train"),
    ("R_k test", "c3_risk_test"), ("G", "c3_gap"), ("E", "c3_ce_gap"), ("converged", "c3_converged:.2f")),
    dim="cell", verdict=None, size=8.0,
    heading="C3 in numbers: G (train/test gap) and E = CE_test − (R̂ − log k), with MCSE; converged share")


def _c3(ds: xr.Dataset) -> xr.Dataset | None:
    """The trained settings, with their slopes per k as one title string."""
    trained = [i for i in range(ds.sizes["setting"]) if np.any(np.isfinite(ds["c3_gap"].values[i]))]
    if not trained:
        return None
    sub = ds.isel(setting=trained)
    return sub.assign(c3_slopes=("setting", ["; ".join(
        f"k={int(kk)}: {format_pm(sub['c3_slope_n'].values[i, j], sub['c3_slope_n_se'].values[i, j])}"
        for j, kk in enumerate(sub["k_train"].values)) for i in range(sub.sizes["setting"])]))


def _labelled(ds: xr.Dataset) -> xr.Dataset | None:
    """The settings with same-digit labels (a C2 verdict)."""
    lab = [i for i in range(ds.sizes["setting"]) if str(ds["d_verdict"].values[i]) != "n/a"]
    return ds.isel(setting=lab) if lab else None


def _c3_cells(ds: xr.Dataset) -> xr.Dataset:
    """The C3 variables with (setting, n, k) stacked into ``cell``: one table row each."""
    cells = ds[[v for v in ds.data_vars if set(ds[v].dims) >= {"n_train", "k_train"}]]
    return cells.stack(cell=("setting", "n_train", "k_train")).reset_index("cell")


PAGES = (_RATE[0], ClaimTable(), *_RATE[1:], View(_labelled, (D_PAGE,)),
         View(_c3, (C3_PAGE, View(_c3_cells, (C3_TABLE,)))))
