"""Report of the ``bounds`` study (C3 and C4 at the level of bounds), declared: the rule with the
per-(setting, n) results and the checks; the two bounds on E[G] and the realised gap against k; the C4
tightness table and means against k. Tables stack (setting, n) and (setting, k) into one row dimension;
nothing is recomputed; prose in ``pages/bounds.md``."""

from __future__ import annotations

import numpy as np
import xarray as xr

from simkit.report.spec import ClaimTable, FigurePage, Panel, Table, Text, TitlePage, View, cells, prose

P = prose("bounds")


def _cases(ds: xr.Dataset) -> xr.Dataset:
    return cells(ds, "case", "setting", "n")


CASES = Table((("setting, n", "facet"), ("bound_max growth\nper doubling", "growth_max:.3f"),
    ("bound_averaging growth\nper doubling", "growth_averaging:.4f"),
    ("E[G] trend per doubling\n± MCSE (nats)", "gap_trend"), ("φ̂ in Θ_s\n(fraction)", "in_class:.2f"),
    ("smallest σ_min/σ_max", "isometry_min:.3f"), ("primary", "growth_verdict")), dim="case",
    heading="Growth of the bounds per doubling of k (fit range k ≥ k_fit_min)", verdict="above_verdict")

FIGURE = FigurePage(
    "Two bounds on E[G] and the realised gap against k (log axes)",
    (Panel("gap", also=("bound_averaging", "bound_max", "trivial_bound_k"),
           also_labels=("averaging bound (paper)", "max/Lipschitz bound (earlier)", "trivial bound 4/τ"),
           absolute=True, logy=True, label="|E[G]| ± 2 MCSE (hollow: E[G] < 0)", title="{facet}"),),
    caption=P["gap_caption"],
    facet="case", per_page=4)


def _c4_rows(ds: xr.Dataset) -> xr.Dataset:
    k = ds["k"].values
    pick = [g for g, kk in enumerate(k) if kk in (1, 16, 256) or g == k.size - 1]
    sub = ds[[v for v in ds.data_vars if v.startswith("c4_") and "k" in ds[v].dims]].isel(k=pick)
    return cells(sub, "row", "setting", "k")


C4_TABLE = Table((("setting, k", "facet"), ("E |Δℓ|", "c4_dl"), ("E B_avg", "c4_bound_avg"),
    ("E B_max", "c4_bound_max"), ("E B_avg / E|Δℓ|", "c4_ratio_avg_dl"), ("E B_max / E|Δℓ|", "c4_ratio_max_dl"),
    ("largest |Δℓ|/B_avg · /B_max", "{c4_tightness_avg:.3f} · {c4_tightness_max:.3f}"),
    ("violations\nB_avg · B_max", "{c4_violations_avg:.0f} · {c4_violations_max:.0f}")), dim="row",
    heading="C4 (Prop. 4): tightness of B_avg and B_max against |Δℓ| on the same perturbations", verdict=None)

C4_FIGURE = FigurePage(
    "C4: E|Δℓ| and its two bounds against k",
    (Panel("c4_dl", also=("c4_bound_avg", "c4_bound_max"), also_labels=("E B_avg", "E B_max"),
           logy=True, label="E |Δℓ| ± 2 MCSE"),),
    caption=P["c4_caption"])


def derive(ds: xr.Dataset) -> xr.Dataset:
    """The trivial bound over k (a line on the figure) and the growth limits in per cent."""
    d = ds.assign_attrs(growth_max_min_pct=100 * float(ds.attrs.get("growth_max_min", np.nan)),
                        growth_avg_max_pct=100 * float(ds.attrs.get("growth_avg_max", np.nan)))
    d["trivial_bound_k"] = (d["trivial_bound"] * xr.ones_like(d["k"], dtype=float)).assign_attrs(
        long_name="trivial bound 4/tau, in nats", units="1")
    return d


def _c4_growth(ds: xr.Dataset) -> str:
    return "C4 growth per doubling of k (fit range): " + "; ".join(
        f"{s}: E B_avg {100 * ga:+.2f}% ± {100 * sa:.2f}%, E B_max {100 * gm:+.2f}% ± {100 * sm:.2f}%" for s, ga, sa, gm, sm
        in zip(ds["setting"].values, ds["c4_growth_avg"].values, ds["c4_growth_avg_se"].values,
               ds["c4_growth_max"].values, ds["c4_growth_max_se"].values))


PAGES = (
    View(_cases, (TitlePage(texts=(P["claim"], P["method"], P["rule"]), ademp=True, then=(CASES,)),)), ClaimTable(),
    View(_cases, (FIGURE,)), View(_c4_rows, (C4_TABLE,)), Text(_c4_growth), C4_FIGURE)
