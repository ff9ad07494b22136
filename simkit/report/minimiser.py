"""Report of the minimiser study (``minimiser``, docs/theory.md §17), declared: exact results and
verdicts; the exact excess CE(θ_k) − CE(θ*) and k²·excess against ½gᵀH⁻¹g; k(θ_k − θ*) against −H⁻¹g;
the empirical minimiser's excess against n beside the exact k-bias (the crossover); prose in
``pages/minimiser.md``."""

from __future__ import annotations

import numpy as np
import xarray as xr

from simkit.report.document import format_pm
from simkit.report.spec import (ClaimTable, Failures, FigurePage, Panel, Table, Text, TitlePage, config, fin, prose,
                                verdict_heading)

P = prose("minimiser")


EXACT = Table((("class", "facet"), ("description", "description"), ("P", "n_params"),
    ("θ*", lambda ds, i: ", ".join(fin(v, ".5g") for v in ds["theta_star"].values[i] if np.isfinite(v))),
    ("½gᵀH⁻¹g\nlim k²·excess", "{excess_const_exact:.6g}\n{excess_const_limit:.6g}"),
    ("−H⁻¹g\nlim k(θ_k − θ*)", lambda ds, i: "\n".join(
        ", ".join(fin(v, ".5g") for v in ds[n].values[i] if np.isfinite(v)) for n in ("shift_const", "shift_limit"))),
    ("slope [local range]\n→ limit", "{excess_slope:.4f} [{excess_slope_low:.4f}, {excess_slope_high:.4f}]\n"
                                     "→ {excess_slope_limit:.4f}"),
    ("max |θ_k − θ0|", "well_max_dev:.2g")),
    heading=verdict_heading("Exact results and verdicts", noun="classes"), size=7.0)


def _crossover_table(doc, ds: xr.Dataset) -> None:
    ns = ds["n"].values
    rows_ds = []
    header = ["class", "k", "exact k-bias"] + [f"n = {int(n)}" for n in ns] + ["crossover n", "p (θ_k)", "p* (θ*)"]
    for i, s in enumerate(ds["setting"].values):
        for j, k in enumerate(ds["k_emp"].values):
            well = bool(int(ds["well_specified"].values[i]))
            rows_ds.append([str(s), str(int(k)), "0 (well specified)" if well else fin(ds["emp_bias"].values[i, j], ".3g")]
                           + [format_pm(ds["emp_excess"].values[i, j, q], ds["emp_excess_mcse"].values[i, j, q])
                              for q in range(ns.size)]
                           + [format_pm(ds["emp_n_cross"].values[i, j], ds["emp_n_cross_mcse"].values[i, j]),
                              fin(ds["emp_p"].values[i, j], ".2g"), fin(ds["emp_p_star"].values[i, j], ".2g")])
    doc.heading("Empirical minimiser: E CE(θ̂_{n,k}) − CE(θ*) ± MCSE against the exact k-bias CE(θ_k) − CE(θ*)")
    doc.table(header, rows_ds, [1.1, 0.3, 0.7] + [0.95] * ns.size + [0.95, 0.45, 0.45], size=6.5)
    doc.text(P["crossover_note"], size=7.0)


_FIT = dict(fit_range="k_fit_min")
PAGES = (
    TitlePage(texts=(P["claim"], P["method"]), then=(EXACT, Text(P["rule"]), ClaimTable(), Failures())),
    FigurePage(
        "The exact excess CE(θ_k) − CE(θ*) on log–log axes: the rate is 1/k², not 1/k",
        (Panel("excess", reference=("zero", "zero", "excess_const_exact"), slopes=(-2.0, -1.0), logy=True,
               absolute=True, title="{facet}: slope {excess_slope:.4f} → {excess_slope_limit:.4f}",
               label="|CE(θ_k) − CE(θ*)| (exact)", reference_label="½gᵀH⁻¹g / k²", **_FIT),
         Panel("k2_excess", hline="excess_const_exact", title="{facet}: ½gᵀH⁻¹g = {excess_const_exact:.5g}",
               label="k² · excess (exact)", hline_label="½gᵀH⁻¹g (closed form)", **_FIT)),
        caption=P["excess_caption"],
        subtitle="least-squares slope on the fit range → Richardson limit of the local slope in each panel title"),
    FigurePage("The shift: k (θ_k − θ*) approaches −H⁻¹g", (
        Panel("k_shift", series="param", series_hline="shift_const", title="{facet}", ylabel="k (θ_k − θ*)"),),
        caption=P["shift_caption"], per_page=(2, 3)),
    _crossover_table,
    FigurePage("The empirical crossover: sampling error (order 1/n) against the k-bias (order 1/k²)", (
        Panel("emp_excess", x="n", series="k_emp", series_hline="emp_bias_shown", logy=True,
              title="{facet}", ylabel="excess CE (nats)"),), caption=P["crossover_caption"], per_page=(2, 3)),
)


def derive(ds: xr.Dataset) -> xr.Dataset:
    """Display quantities from the saved variables: a zero coefficient, the fit range's first k, the k-bias
    of the misspecified classes, and the numbers the prose quotes."""
    k_fit_min = float(config(ds).get("k_fit_min", np.nan))
    out = ds.assign(
        zero=xr.zeros_like(ds["excess_const_exact"]).assign_attrs(long_name="zero", units="1"),
        k_fit_min=xr.full_like(ds["excess_const_exact"], k_fit_min).assign_attrs(long_name="first k of the fit"),
        emp_bias_shown=ds["emp_bias"].where(ds["well_specified"] == 0).assign_attrs(
            long_name="exact k-bias CE(θ_k) − CE(θ*)", units="1"))
    out["shift_const"] = ds["shift_const"].assign_attrs(long_name="−H⁻¹g (predicted limit)")
    return out
