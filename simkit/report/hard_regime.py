"""Report of the hard-regime C1 study (confirmatory cell ``hard``): protocol and verdict, the curves
against the exact curve, and the exploratory sensitivity tables of the rate verdict; prose in
``pages/hard_regime.md``."""

from __future__ import annotations

import numpy as np
import xarray as xr

from simkit.report.document import COLORS, ReportDocument
from simkit.report.spec import FigurePage, Panel, Table, Text, TitlePage, View, fill, fin, prose

P = prose("hard_regime")


def _verdict_table(doc: ReportDocument, one: xr.Dataset) -> None:
    """The confirmatory cell's estimates, tests and the verdicts of its two rules."""
    alpha = float(one.attrs.get("alpha", np.nan))
    doc.heading("Confirmatory verdicts (protocols/hard_regime.md §5; protocols/hard_regime_maxt.md §2)")
    rows = [[fill(q, one), fill(v, one)] for q, v in (
        ("k_min (16 × expansion scale {expansion_scale:.4g})", "{k_min:.0f}"),
        ("independent blocks (anchors each)", "{n_units:.0f} ({block_size:.0f})"),
        ("slope of log gap_k on log k (with 1/k term) ± jackknife SE", "{slope±slope_se}"),
        ("95% interval", "[{slope_ci_low:.4f}, {slope_ci_high:.4f}]"),
        (f"{100 * (1 - alpha):g}% interval (verdict: must contain −1)",
         "[{slope_verdict_low:.4f}, {slope_verdict_high:.4f}]"),
        ("p of slope = −1/2 (verdict: < {alpha:g})", "{slope_p_half:.2g}"),
        ("c1 estimate ± MCSE  |  exact  |  t", "{c1_estimate±c1_estimate_mcse}  |  {c1_exact:.6g}  |  {c1_z:+.2f}"),
        ("c2 estimate ± MCSE  |  exact  |  t", "{c2_estimate±c2_estimate_mcse}  |  {c2_exact:.6g}  |  {c2_t:+.2f}"),
        ("Monte Carlo curve vs exact curve at every k: T² (p; verdict: ≥ {alpha:g})",
         "{curve_t2:.4g} (p = {curve_p:.3g})"),
        ("Z-free dgap_k = gap_k − gap_2k vs exact: T² (p)", "{dgap_t2:.4g} (p = {dgap_p:.3g})"),
        ("CE estimate ± MCSE  |  exact", "{ce_estimate±ce_estimate_mcse}  |  {ce_exact:.7g}"),
        ("rate fit on the exact curve: slope | c1 (the method's bias at k_min)",
         "{slope_exact_fit:.6f}  |  {c1_exact_fit:.6f}"))]
    maxt = [[fill(q, one), fill(v, one)] for q, v in (
        ("curve vs exact, bootstrap max-t: max |t| (p; verdict: ≥ {alpha:g})", "{curve_max_t:.4g} (p = {curve_max_t_p:.3g})"),
        ("dgap vs exact, bootstrap max-t: max |t| (p)", "{dgap_max_t:.4g} (p = {dgap_max_t_p:.3g})"))]
    verdict, verdict_mt = str(one["verdict"].values), str(one["max_t_verdict"].values)
    rows = rows + [["verdict, Hotelling rule (protocols/hard_regime.md)", verdict.upper()]] + maxt + [
        ["verdict, max-t rule (protocols/hard_regime_maxt.md)", verdict_mt.upper()]]
    doc.table(["quantity", "uniform π on S², κ_M = 50, τ = 0.02 (scale 50)"], rows, [3.2, 3.0],
              colors={(len(rows) - 4, 1): COLORS.get(verdict, COLORS["fail"]),
                      (len(rows) - 1, 1): COLORS.get(verdict_mt, COLORS["fail"])})
    for name, rule in (("verdict_reason", "Hotelling"), ("max_t_verdict_reason", "max-t")):
        if str(one[name].values) not in ("", "nan"):
            doc.text(f"Reason ({rule} rule): {one[name].values}", weight="bold")


CURVES = FigurePage(
    "Expansion scale 50: gap_k and k·gap_k against the exact curve",
    (Panel("gap", fit="fit_gap", reference="gap_exact", logy=True, title="slope {slope±slope_se}", fit_range="k_min",
           label="Monte Carlo ± 2 MCSE", fit_label="WLS rate fit", reference_label="exact curve"),
     Panel("k_gap", hline="c1_exact", reference=("c1_exact", "c2_exact"), fit_range="k_min",
           title="c1 {c1_estimate±c1_estimate_mcse} (exact {c1_exact:g})", label="Monte Carlo ± 2 MCSE",
           reference_label="c1 + c2/k", hline_label="exact c1 ± 2 MCSE"),
     Panel("resid_rate", kind="residual", title="rate-fit residuals", fit_range="k_min")),
    caption=P["curves_caption"], facet=None)


KMF = Table((("k_min factor f", "facet:g"), ("k_min", "kmf_k_min:.0f"), ("slope ± SE", "kmf_slope±kmf_slope_se"),
    ("slope of the fit to the exact curve", "kmf_slope_exact_fit:.5f"), ("c1 ± MCSE", "kmf_c1_estimate"),
    ("t of c1", "kmf_c1_z:+.2f"), ("c1 of the fit to the exact curve", "kmf_c1_exact_fit:.5f"),
    ("reason", "kmf_reason")), dim="kmf", verdict="kmf_verdict")
BLOCKS = Table((("cell", "facet"), ("anchors per block", "block_size:.0f"), ("blocks", "n_units:.0f"),
    ("anchors in all", "anchors_total:.0f"), ("slope ± SE", "slope±slope_se"), ("c1 ± MCSE", "c1_estimate"),
    ("t of c1", "c1_z:+.2f"), ("reason", "verdict_reason")), dim="cell", verdict="rate_verdict")
PILOT = Table((("pilot blocks of 256 anchors (0: Taylor coefficients 1, 1, −1/2)", "facet:g"),
    ("slope ± SE", "pilot_slope±pilot_slope_se"), ("c1 ± MCSE", "pilot_c1_estimate"),
    ("t of c1", "pilot_c1_z:+.2f"), ("MCSE of gap at k_max", "pilot_gap_mcse_kmax:.3g"),
    ("reason", "pilot_reason")), dim="pilot", verdict="pilot_verdict")


def _hard(ds: xr.Dataset) -> xr.Dataset | None:
    """The confirmatory cell on its own k grid (k ≤ its k_max); None without one."""
    cells = list(map(str, ds["cell"].values))
    i = cells.index("hard") if "hard" in cells else None
    return None if i is None else ds.isel(cell=i, k=slice(0, int(np.log2(float(ds["k_max"].values[i]))) + 1))


def _bases(ds: xr.Dataset) -> list[xr.Dataset]:
    """Per setting the cells that vary its analysis (by block size), with the setting's own cell named ``base``."""
    out, cells = [], list(map(str, ds["cell"].values))
    for base in dict.fromkeys(map(str, ds["base"].values)):
        cand = sorted(np.flatnonzero(ds["base"].values == base), key=lambda j: float(ds["block_size"].values[j]))
        title = ("hard regime (confirmatory cell; these tables are exploratory)" if base == "hard" else
                 f"rate_k setting {base} (k_max {fin(ds['k_max'].values[cells.index(base)], '.0f')}; exploratory)")
        out.append(ds.isel(cell=cand).assign_attrs(base=base, sensitivity=title))
    return out


def _base(ds: xr.Dataset) -> xr.Dataset:
    return ds.isel(cell=list(map(str, ds["cell"].values)).index(ds.attrs["base"]))


_DESIGN = (" · design: k_max {k_max}, {n_blocks} blocks of 256 anchors, pilot {pilot_blocks} blocks, k_min factor "
           "{k_min_factor} · {analysis}")
_HEADING = "Sensitivity of the rate verdict: {sensitivity}"
SENSITIVITY = View(_bases, (View(_base, (Text(P["sensitivity"], heading=_HEADING), KMF)), BLOCKS, View(_base, (PILOT,))))
PAGES = (
    TitlePage(texts=(P["claim"],), note=_DESIGN),
    View(lambda ds: ds if _hard(ds) is None else None, (Text("The dataset has no 'hard' cell."),)),
    View(_hard, (_verdict_table, CURVES)), Text(P["exploratory"], size=8), SENSITIVITY)
