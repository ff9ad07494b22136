"""Report of the hard-regime C1 study (confirmatory cell ``hard``): protocol and verdict, the curves
against the exact curve, and the exploratory sensitivity tables of the rate verdict; prose in
``pages/hard_regime.md``."""

from __future__ import annotations

import numpy as np
import xarray as xr

from simkit.report.document import COLORS, ReportDocument
from simkit.report.spec import FigurePage, Panel, Table, Text, config, fill, fin, prose, protocol_block, render

P = prose("hard_regime")


def _verdict_table(doc: ReportDocument, ds: xr.Dataset, i: int) -> None:
    one, alpha = ds.isel(cell=i), float(ds.attrs.get("alpha", np.nan))
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


def _curves(ds: xr.Dataset) -> FigurePage:
    c1 = float(ds["c1_exact"])
    k = dict(fit_range="k_min", logx=True)
    return FigurePage(
        "Expansion scale 50: gap_k and k·gap_k against the exact curve",
        (Panel("gap", fit="fit_gap", reference="gap_exact", logy=True, title="slope {slope±slope_se}",
               label="Monte Carlo ± 2 MCSE", fit_label="WLS rate fit", reference_label="exact curve", **k),
         Panel("k_gap", hline="c1_exact", reference=("c1_exact", "c2_exact"),
               title=f"c1 {{c1_estimate±c1_estimate_mcse}} (exact {c1:g})", label="Monte Carlo ± 2 MCSE",
               reference_label="c1 + c2/k", hline_label="exact c1 ± 2 MCSE", **k),
         Panel("resid_rate", kind="residual", title="rate-fit residuals", **k)),
        caption=P["curves_caption"],
        facet=None)


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


def _sensitivity(doc: ReportDocument, ds: xr.Dataset, base: str) -> None:
    bases = [str(b) for b in ds["base"].values]
    one = ds.isel(cell=bases.index(base))
    title = ("hard regime (confirmatory cell; these tables are exploratory)" if base == "hard"
             else f"rate_k setting {base} (k_max {fin(one['k_max'], '.0f')}; exploratory)")
    cand = sorted((j for j, b in enumerate(bases) if b == base), key=lambda j: float(ds["block_size"].values[j]))
    render(doc, one, (Text(P["sensitivity"], heading=f"Sensitivity of the rate verdict: {title}"), KMF))
    render(doc, ds.isel(cell=cand), (BLOCKS,))
    render(doc, one, (PILOT,))


def _pages(doc: ReportDocument, ds: xr.Dataset) -> None:
    """The study's pages (all but provenance), from the dataset alone."""
    quick, cfg = "quick" in str(ds.attrs.get("analysis", "")), config(ds)
    doc.heading("Claim C1 at expansion scale 50 (τ = 0.02, k ≤ 2^20)" + (" — QUICK DESIGN (not confirmatory)" if quick else ""))
    doc.text(P["claim"])
    protocol_block(doc, ds, f"k_max {cfg.get('k_max', '?')}, {cfg.get('n_blocks', '?')} blocks of 256 anchors, pilot "
                            f"{cfg.get('pilot_blocks', '?')} blocks, k_min factor {cfg.get('k_min_factor', '?')}; seed "
                            f"{ds.attrs.get('seed', '?')}")
    cells = [str(c) for c in ds["cell"].values]
    if "hard" not in cells:
        doc.text("The dataset has no 'hard' cell.", weight="bold")
        return
    i = cells.index("hard")
    doc.heading("Confirmatory verdicts (protocols/hard_regime.md §5; protocols/hard_regime_maxt.md §2)")
    _verdict_table(doc, ds, i)
    n_k = int(np.log2(float(ds["k_max"].values[i]))) + 1
    render(doc, ds.isel({"cell": i, "k": slice(0, n_k)}), (_curves(ds.isel(cell=i)),))
    doc.new_page()
    doc.text(P["exploratory"], size=8)
    for base in dict.fromkeys(map(str, ds["base"].values)):
        _sensitivity(doc, ds, base)


PAGES = (_pages,)
