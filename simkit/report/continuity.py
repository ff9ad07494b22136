"""Report of the C4 study (``continuity``): the bounds, the pre-registered rule (protocols/continuity.md)
with its cells, the exploratory checks, and the bound and growth figures; prose in ``pages/continuity.md``."""

from __future__ import annotations

import numpy as np
import xarray as xr

from simkit.report.spec import Failures, FigurePage, Panel, Table, Text, TitlePage, View, cells, prose

P = prose("continuity")


_CELL_COLS = (("setting", "setting"), ("ε", "eps:g"))
CONFIRMATORY = Table(_CELL_COLS + (
    ("E B_avg growth per doubling ± SE (%)", "growth_pct±growth_pct_se"),
    ("non-inferiority t · p", "{ni_avg_t:.1f} · {ni_avg_p:.2g}"),
    ("max_j‖Δw_j‖ growth % (p)", "{negmax_pct:+.2f} ({ni_negmax_p:.2g})"),
    ("B_max growth % (p)", "{max_pct:+.2f} ({ni_max_p:.2g})"), ("S1 p · S2 p", "{s1_p:.1e} · {s2_p:.1e}")),
    dim="cell", verdict=("verdict", "control_verdict", "secondary_verdict"), size=7.0,
    heading="Pre-registered rule (protocols/continuity.md): C4 {conclusion}")
EXPLORATORY = Table(_CELL_COLS + (
    ("violations (B_score · B_avg · B_max)", "{viol_score:.0f} · {viol_avg:.0f} · {viol_max:.0f}"),
    ("B_avg slope ± SE (two-sided p)", "{slope_avg±slope_avg_se} ({slope_avg_p:.2g})"),
    ("slope detected by the B_avg test (90%)", "slope_avg_mde:.1e"),
    ("B_max slope ± SE (one-sided p)", "{slope_max±slope_max_se} ({slope_max_p:.1e})"),
    ("E B_max / E B_avg at k_max", "max_avg_end"),
    ("E max|Δw| / E avg|Δw| at k_max", "negmax_negavg_end±negmax_negavg_mcse_end"),
    ("largest |Δℓ| / B_avg", "tight_avg:.3f")), dim="cell", verdict="flat_verdict", size=7.0,
    heading="Exploratory (pre-protocol rule, unchanged)")
GROWTH = FigurePage("Growth of E B_avg per doubling of k against the pre-registered margin", (
    Panel("growth_pct", x="eps", band="growth_pct_se", level="delta_pct", level_label="margin δ",
          title="{facet}: {verdict_all}", label="growth per doubling ± 2 SE (%)", ylabel="growth of E B_avg per doubling (%)"),),
    caption=P["growth_caption"], facet="setting")


# ------------------------------------------------------------------------------------------------
# figure pages

_CELL = "{setting}, ε = {facet}"
BOUNDS = FigurePage(
    "Loss differences and their bounds against k",
    (Panel("dl", also=("bound_score", "bound_avg", "bound_max"), logy=True,
           title=_CELL + ": slopes avg {slope_avg:.1e}, max {slope_max:.3f}", label="E |Δℓ| ± 2 MCSE",
           also_labels=("E B_score (1)", "E B_avg (AVG)", "E B_max (MAX)"), ylabel="nats"),),
    caption=P["bounds_caption"],
    subtitle="averaging bound B_avg flat in k, max bound B_max growing", facet=("setting", "eps"))
NEGATIVES = FigurePage(
    "The negatives' term: softmax average against maximum",
    (Panel("neg_avg", also=("neg_max",), hline="neg_plain",
           title=_CELL + ": max/avg {negmax_negavg_end±negmax_negavg_mcse_end}", ylabel="‖φ(x⁻) − ψ(x⁻)‖",
           label="softmax average over the first k negatives ± 2 MCSE",
           also_labels=("maximum over the first k negatives",), hline_label="unweighted mean ± 2 MCSE"),),
    caption=P["negatives_caption"], facet=("setting", "eps"))


RATIOS = FigurePage("Ratios of means", tuple(
    Panel(v, series="eps", logy=True, title="{facet}: " + t, ylabel="ratio")
    for v, t in (("ratio_max_avg", "E B_max / E B_avg"), ("ratio_avg_dl", "E B_avg / E |Δℓ|"),
                 ("ratio_score_dl", "E B_score / E |Δℓ|"))),
    caption=P["ratios_caption"])


VALIDITY = FigurePage(
    "Validity on every tuple: the largest |Δℓ| / bound",
    tuple(Panel(f"tightness_{tag}", series="eps", level=1.0, level_label="equality (1)", ylim=(0.0, 1.1),
                title=f"{{facet}}: {name}, {{violations_{tag}_total:.0f}} violations", ylabel=f"max |Δℓ| / {name}")
          for tag, name in (("score", "B_score"), ("avg", "B_avg"), ("max", "B_max"))),
    caption=P["validity_caption"])


def derive(ds: xr.Dataset) -> xr.Dataset:
    """Display quantities from the saved variables: growth in per cent, end-of-grid ratios, totals."""
    pct = lambda v: (100 * ds[v]).assign_attrs(long_name="growth per doubling (%)", units="1")  # noqa: E731
    tags = [t for t in ("score", "avg", "max") if f"tightness_{t}" in ds]
    out = ds.assign(
        delta_pct=xr.DataArray(100 * float(ds.attrs.get("delta", np.nan))), growth_pct=pct("ni_avg_growth"),
        growth_pct_se=pct("ni_avg_growth_se"), negmax_pct=pct("ni_negmax_growth"),
        max_pct=pct("ni_max_growth"), max_avg_end=ds["ratio_max_avg"].isel(k=-1),
        max_avg_end_mcse=ds["ratio_max_avg_mcse"].isel(k=-1), tight_avg=ds["tightness_avg"].max("k"),
        verdict_all=xr.DataArray([" · ".join(f"ε = {e:g} {str(v).upper()}" for e, v in zip(ds["eps"].values, row))
                                  for row in ds["verdict"].values], dims="setting"),
        **{f"viol_{t}": ds[f"violations_{t}"].sum("k") for t in ("score", "avg", "max")},
        **{f"violations_{t}_total": ds[f"violations_{t}"].sum(("eps", "k")) for t in tags},
        **{f"{n}_end": ds[f"ratio_{n}"].isel(k=-1) for n in ("negmax_negavg", "negmax_negavg_mcse")
           if f"ratio_{n}" in ds})
    settings = "; ".join(
        f"{s} ({ds['family'].values[i]}, p = {int(ds['p'].values[i])}, d = {int(ds['d'].values[i])}, π "
        f"{ds['pi'].values[i]}, τ = {float(ds['tau'].values[i]):g}, {ds['perturbation'].values[i]} perturbation)"
        for i, s in enumerate(ds["setting"].values)) if "family" in ds and "perturbation" in ds else ""
    alpha = float(ds.attrs.get("alpha", np.nan))
    note = "" if "protocol_path" in ds.attrs else " · not the pre-registered design: exploratory"
    return out.assign_attrs(settings_text=settings, bump_factor=float(ds.attrs.get("bump_gain", 4)), note=note,
                            ff_all=1 - (1 - alpha) ** (ds.sizes["setting"] * ds.sizes["eps"]))


FAILURES = Failures(dim="cell", reasons=("verdict_reason", "control_reason", "secondary_reason"),
                    verdicts=("verdict", "control_verdict", "secondary_verdict"))
PAGES = (
    TitlePage(texts=(P["claim"], P["bounds"], P["method"]), note="{note}"),
    View(lambda ds: cells(ds, "cell", "setting", "eps", "ε"),
         (CONFIRMATORY, EXPLORATORY, Text(P["exploratory"]), FAILURES)),
    GROWTH, BOUNDS, NEGATIVES, RATIOS, VALIDITY)
