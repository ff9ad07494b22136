"""PDF report of the hard-regime C1 study (``studies/hard_regime.py``; confirmatory cell ``hard``), from its dataset.

Built from the generic pieces of :mod:`simkit.report.document`; nothing is recomputed. Pages: (1) the claim,
the protocol (path, SHA-256, commit), the confirmatory verdict with every component test, the runtime;
(2) gap_k and k * gap_k against the exact curve with the fit range, and the residuals of the rate fit;
(3) the exploratory sensitivity tables of the rate verdict (k_min factor, block size, pilot size) for the
hard regime and each rate_k setting; then the provenance pages (added by :meth:`simkit.runner.Study.report`).
"""

from __future__ import annotations

import json

import numpy as np
import xarray as xr
from simkit.report.document import COLORS, ReportDocument, format_pm
from simkit.report.spec import FigurePage, Panel, protocol_block, render
from simkit.report.spec import fin as _fin

__all__ = ["hard_regime_sections"]

C1_TEXT = (
    "Claim C1 (finite-k bias, rate 1/k): gap_k = R_k − log k − CE = c1/k + O(1/k²), not O(1/√k). The study "
    "rate_k tests C1 only where the expansion scale max(E[Z2/Z²], E[m1/Z]) — the k beyond which the 1/k term "
    "dominates — is about 10. Here π is uniform on S², M(x,·) = vMF(x, 50) and τ = 0.02 = 1/κ (so Q = M): the scale "
    "is 50, k·gap_k climbs to a maximum near k ≈ 300 before settling to c1 = (κ coth κ + 1)/2 = 25.5, and k runs to "
    "2^20. The verdict uses the rule of rate_k unchanged (simkit.stats.analysis.rate_verdict and truth_verdict), "
    "pre-registered in protocols/hard_regime.md.")


def _attr(ds: xr.Dataset, name: str, default="?"):
    return ds.attrs.get(name, default)


def _cells(ds: xr.Dataset) -> list[str]:
    return [str(c) for c in ds["cell"].values]


def _idx(ds: xr.Dataset, cell: str) -> int | None:
    cells = _cells(ds)
    return cells.index(cell) if cell in cells else None


def _g(ds: xr.Dataset, name: str, i: int):
    return ds[name].values[i] if name in ds.variables else np.nan


def _verdict_table(doc: ReportDocument, ds: xr.Dataset, i: int) -> None:
    alpha = float(_attr(ds, "alpha", np.nan))
    g = lambda n: _g(ds, n, i)  # noqa: E731
    se = float(g("slope_se"))
    rows = [
        ["k_min (16 × expansion scale " + _fin(g("expansion_scale"), ".4g") + ")", _fin(g("k_min"), ".0f")],
        ["independent blocks (anchors each)", f"{_fin(g('n_units'), '.0f')} ({_fin(g('block_size'), '.0f')})"],
        ["slope of log gap_k on log k (with 1/k term) ± jackknife SE", format_pm(g("slope"), se)],
        ["95% interval", f"[{_fin(g('slope_ci_low'), '.4f')}, {_fin(g('slope_ci_high'), '.4f')}]"],
        [f"{100 * (1 - alpha):g}% interval (verdict: must contain −1)",
         f"[{_fin(g('slope_verdict_low'), '.4f')}, {_fin(g('slope_verdict_high'), '.4f')}]"],
        [f"p of slope = −1/2 (verdict: < {alpha:g})", _fin(g("slope_p_half"), ".2g")],
        ["c1 estimate ± MCSE  |  exact  |  t", f"{format_pm(g('c1_estimate'), g('c1_estimate_mcse'))}  |  "
         f"{_fin(g('c1_exact'), '.6g')}  |  {_fin(g('c1_z'), '+.2f')}"],
        ["c2 estimate ± MCSE  |  exact  |  t", f"{format_pm(g('c2_estimate'), g('c2_estimate_mcse'))}  |  "
         f"{_fin(g('c2_exact'), '.6g')}  |  {_fin(g('c2_t'), '+.2f')}"],
        [f"Monte Carlo curve vs exact curve at every k: T² (p; verdict: ≥ {alpha:g})",
         f"{_fin(g('curve_t2'), '.4g')} (p = {_fin(g('curve_p'), '.3g')})"],
        ["Z-free dgap_k = gap_k − gap_2k vs exact: T² (p)", f"{_fin(g('dgap_t2'), '.4g')} (p = {_fin(g('dgap_p'), '.3g')})"],
        ["CE estimate ± MCSE  |  exact", f"{format_pm(g('ce_estimate'), g('ce_estimate_mcse'))}  |  "
         f"{_fin(g('ce_exact'), '.7g')}"],
        ["rate fit on the exact curve: slope | c1 (the method's bias at k_min)",
         f"{_fin(g('slope_exact_fit'), '.6f')}  |  {_fin(g('c1_exact_fit'), '.6f')}"],
        ["verdict", str(g("verdict")).upper()],
    ]
    colors = {(len(rows) - 1, 1): COLORS.get(str(g("verdict")), COLORS["fail"])}
    doc.table(["quantity", "hard regime (uniform π on S², κ_M = 50, τ = 0.02)"], rows, [3.2, 3.0], colors=colors)
    reason = str(g("verdict_reason"))
    if reason:
        doc.text(f"Reason: {reason}", weight="bold")


def _curves(ds: xr.Dataset) -> FigurePage:
    c1 = float(ds["c1_exact"])
    k = dict(fit_range="k_min", logx=True)
    return FigurePage(
        "The hard regime: gap_k and k·gap_k against the exact curve",
        (Panel("gap", band="gap_mcse", fit="fit_gap", reference="gap_exact", logy=True, title="slope {slope±slope_se}",
               label="Monte Carlo ± 2 MCSE", fit_label="WLS rate fit", reference_label="exact curve", **k),
         Panel("k_gap", band="k_gap_mcse", hline="c1_exact", reference=("c1_exact", "c2_exact"),
               title=f"c1 {{c1_estimate±c1_estimate_mcse}} (exact {c1:g})", label="Monte Carlo ± 2 MCSE",
               reference_label="c1 + c2/k", hline_label="exact c1", **k),
         Panel("resid_rate", kind="residual", title="rate-fit residuals", **k)),
        caption="Left: gap_k (block means, band and error bars ± 2 MCSE) on log–log axes with the exact curve "
                "(simkit.exact.curve.gap_curve) and the WLS fit of log gap on log k and 1/k over the shaded fit range. "
                "Middle: k·gap_k with the exact c1 and c1 + c2/k (the expansion, over the fit range); the hump is the "
                "pre-asymptotic regime below the expansion scale. Right: standardised residuals of the rate fit.",
        facet=None)


def _color(v: str) -> str:
    return COLORS.get(v, COLORS["fail"]) if v in ("pass", "fail", "error") else "white"


def _sensitivity(doc: ReportDocument, ds: xr.Dataset, base: str) -> None:
    main = [i for i, c in enumerate(_cells(ds)) if c == base]
    if not main:
        return
    i = main[0]
    role = str(_g(ds, "role", i))
    title = ("hard regime (confirmatory cell; these tables are exploratory)" if base == "hard"
             else f"rate_k setting {base} (k_max {_fin(_g(ds, 'k_max', i), '.0f')}; exploratory)")
    doc.heading(f"Sensitivity of the rate verdict: {title}")
    doc.text(f"π {_g(ds, 'pi', i)}, d = {_g(ds, 'dim', i)}, κ_π = {_fin(_g(ds, 'kappa_pi', i), 'g')}, κ_M = "
             f"{_fin(_g(ds, 'kappa_m', i), 'g')}, τ = {_fin(_g(ds, 'tau', i), 'g')}; expansion scale "
             f"{_fin(_g(ds, 'expansion_scale', i), '.4g')}, c2/c1 = {_fin(_g(ds, 'c2_over_c1', i), '.3g')}. Verdict = the "
             f"rate rule (slope interval, slope = −1/2 rejected, c1 t) at α = {_attr(ds, 'alpha')}"
             + ("; the confirmatory verdict adds the exact-curve tests." if role == "confirmatory" else "."), size=8)
    # k_min factor
    rows, colors = [], {}
    for j, f in enumerate(ds["kmf"].values):
        v = str(ds["kmf_verdict"].values[i][j])
        rows.append([f"{f:g}" + (" (protocol)" if f == 16 else ""), _fin(ds["kmf_k_min"].values[i][j], ".0f"),
                     format_pm(ds["kmf_slope"].values[i][j], ds["kmf_slope_se"].values[i][j]),
                     _fin(ds["kmf_slope_exact_fit"].values[i][j], ".5f"),
                     format_pm(ds["kmf_c1_estimate"].values[i][j], ds["kmf_c1_estimate_mcse"].values[i][j]),
                     _fin(ds["kmf_c1_z"].values[i][j], "+.2f"), _fin(ds["kmf_c1_exact_fit"].values[i][j], ".5f"),
                     v, str(ds["kmf_reason"].values[i][j])])
        colors[(j, 7)] = _color(v)
    doc.table(["k_min factor f", "k_min", "slope ± SE", "slope of the fit to the exact curve", "c1 ± MCSE", "t of c1",
               "c1 of the fit to the exact curve", "verdict", "reason"], rows,
              [0.8, 0.5, 1.0, 0.9, 1.0, 0.5, 0.9, 0.5, 2.6], colors=colors)
    # block size
    rows, colors = [], {}
    cand = [j for j, c in enumerate(_cells(ds)) if str(_g(ds, "base", j)) == base]
    cand.sort(key=lambda j: (float(_g(ds, "block_size", j)), str(_g(ds, "role", j)) == "block_size"))
    for r, j in enumerate(cand):
        v = str(_g(ds, "rate_verdict", j))
        rows.append([_cells(ds)[j], _fin(_g(ds, "block_size", j), ".0f"), _fin(_g(ds, "n_units", j), ".0f"),
                     _fin(_g(ds, "anchors_total", j), ".0f"), format_pm(_g(ds, "slope", j), _g(ds, "slope_se", j)),
                     format_pm(_g(ds, "c1_estimate", j), _g(ds, "c1_estimate_mcse", j)), _fin(_g(ds, "c1_z", j), "+.2f"),
                     v, str(_g(ds, "verdict_reason", j)) if str(_g(ds, "role", j)) == "block_size" else ""])
        colors[(r, 7)] = _color(v)
    doc.table(["cell", "anchors per block", "blocks", "anchors in all", "slope ± SE", "c1 ± MCSE", "t of c1",
               "rate verdict", "reason"], rows, [1.0, 0.6, 0.5, 0.6, 1.0, 1.0, 0.5, 0.6, 2.6], colors=colors)
    # pilot size
    rows, colors = [], {}
    try:
        pilot_main = int(json.loads(str(_attr(ds, "config", "{}"))).get("pilot_blocks", -1))
    except (TypeError, ValueError):
        pilot_main = -1
    for j, p in enumerate(ds["pilot"].values):
        v = str(ds["pilot_verdict"].values[i][j])
        rows.append([("0 (Taylor coefficients 1, 1, −1/2)" if p == 0 else f"{p:g} × 256 anchors")
                     + (" (protocol)" if p == pilot_main else ""),
                     format_pm(ds["pilot_slope"].values[i][j], ds["pilot_slope_se"].values[i][j]),
                     format_pm(ds["pilot_c1_estimate"].values[i][j], ds["pilot_c1_estimate_mcse"].values[i][j]),
                     _fin(ds["pilot_c1_z"].values[i][j], "+.2f"), _fin(ds["pilot_gap_mcse_kmax"].values[i][j], ".3g"),
                     v, str(ds["pilot_reason"].values[i][j])])
        colors[(j, 5)] = _color(v)
    try:
        n_pil = int(json.loads(str(_attr(ds, "config", "{}"))).get("sens_pilot_blocks", -1))
    except (TypeError, ValueError):
        n_pil = -1
    doc.text(f"Pilot size: the first {n_pil} blocks of the cell re-weighted with each pilot's coefficients (so the "
             "protocol's row differs from the main result, which uses every block).", size=8)
    doc.table(["pilot for the control-variate coefficients", "slope ± SE", "c1 ± MCSE", "t of c1",
               "MCSE of gap at k_max", "rate verdict", "reason"], rows, [1.5, 1.0, 1.0, 0.5, 0.8, 0.6, 2.6],
              colors=colors)


def hard_regime_sections(doc: ReportDocument, ds: xr.Dataset) -> None:
    """The study's pages (all but provenance), from the dataset alone."""
    quick = "quick" in str(_attr(ds, "analysis", ""))
    doc.heading("Claim C1 in the hard regime (τ = 0.02, k ≤ 2^20)" + (" — QUICK DESIGN (not confirmatory)" if quick else ""))
    doc.text(C1_TEXT)
    try:
        cfg = json.loads(_attr(ds, "config", "{}"))
    except (TypeError, ValueError):
        cfg = {}
    protocol_block(doc, ds, f"k_max {cfg.get('k_max', '?')}, {cfg.get('n_blocks', '?')} blocks of 256 anchors, pilot "
                            f"{cfg.get('pilot_blocks', '?')} blocks, k_min factor {cfg.get('k_min_factor', '?')}; seed "
                            f"{_attr(ds, 'seed')}")
    i = _idx(ds, "hard")
    if i is None:
        doc.text("The dataset has no 'hard' cell.", weight="bold")
        return
    doc.heading("Confirmatory verdict (protocol section 5)")
    _verdict_table(doc, ds, i)
    n_k = int(np.log2(float(_g(ds, "k_max", i)))) + 1
    render(doc, ds.isel({"cell": i, "k": slice(0, n_k)}), (_curves(ds.isel(cell=i)),))
    doc.new_page()
    doc.text("The tables below are exploratory (descriptive): they show how the rate verdict moves with the "
             "analyst's choices — the k_min factor (re-analysis of the same blocks), the block size at a fixed total "
             "number of anchors (separate cells, their own blocks) and the pilot size of the control-variate "
             "coefficients (the same blocks re-weighted) — and are not part of the confirmatory rule.", size=8)
    seen = []
    for c in ds["base"].values:
        if str(c) not in seen:
            seen.append(str(c))
    for base in seen:
        _sensitivity(doc, ds, base)
