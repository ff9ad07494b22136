"""Report pages of the C7 study (``asymmetry``), read from its saved dataset alone.

:func:`asymmetry_sections` adds the study's pages to a :class:`~simkit.report.ReportDocument`;
the study's ``report()`` (:func:`simkit.report.study_report`) adds the provenance pages and writes
the PDF. Built from the generic pieces of :mod:`simkit.report.document` and
:mod:`simkit.report.search_ce`; nothing is recomputed.

Pages: (1) claim C7, the design (kernels, why each is not reversible, the non-reversibility
statistics), method, the C1 and C2 results and verdicts, the verdict rules and false-failure rates;
then per group of up to three settings: (2) |gap_k| on log-log axes; (3) k gap_k against the exact
c1; (4) |D_k| on log-log axes; (5) k D_k against the predicted d1; (6) residuals of both rate fits;
then (7) the non-reversibility statistics against their exact values; (8) provenance (added by study_report).
"""

from __future__ import annotations

import math
import textwrap

import numpy as np
import xarray as xr
from matplotlib.axes import Axes
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from scipy import stats

from simkit.report.document import (COLORS, SETTINGS_PER_PAGE, SMALL, TITLE, ReportDocument, _fit_mask, _json_attr,
                                    _label, _legend, _line, _log_axes, _marker, _num, _v, format_pm, residual_legend,
                                    residual_panel)
from simkit.report.spec import fin as _fin

__all__ = ["asymmetry_sections"]

C7_TEXT = (
    "Claim C7 (no symmetry). The results of the paper need no symmetry of the positive-pair kernel M: C1–C3 hold "
    "for kernels that are not π-reversible, i.e. for which the joint law π(dx) M(x, dy) of a positive pair is not "
    "symmetric in (x, x⁺) (docs/theory.md, C7). This study repeats the rate analyses of C1 (gap_k = R_k − log k − CE = "
    "c1/k + O(1/k²), study rate_k) and C2 (D_k = R_k − E CE(M_k, Q_k) = O(1/k), study search_ce) for such kernels: "
    "both log–log slopes must be −1 (and reject −1/2), and k·gap_k must approach the exact c1.")

_REQUIRED = ("setting", "k", "kernel", "gap", "gap_mcse", "k_gap", "k_gap_mcse", "fit_gap_abs", "gap_slope", "d",
             "d_mcse", "k_d", "k_d_mcse", "fit_d_abs", "d_slope", "c1_exact", "d1_exact", "asym_cross", "asym_shift",
             "verdict_c1", "verdict_c2", "verdict")

#: the two analyses: curve variable, constant, claim, labels
_ANALYSES = {
    "gap": {"const": "c1", "const2": "c2", "claim": "c1", "name": "gap_k", "long": "gap_k = R_k − log k − CE",
            "exact": "exact c1"},
    "d": {"const": "d1", "const2": "d2", "claim": "c2", "name": "D_k", "long": "D_k = R_k − E CE(M_k, Q_k)",
          "exact": "predicted d1"},
}


def _check(ds: xr.Dataset) -> None:
    missing = [v for v in _REQUIRED if v not in ds.variables]
    if missing:
        raise ValueError(f"'ds' must be an asymmetry dataset; it lacks {', '.join(map(repr, missing))} "
                         f"(open the output of 'simkit run asymmetry')")


def _kernel_text(ds: xr.Dataset, i: int) -> str:
    kind = str(_v(ds, "kernel", i))
    if kind == "rotated":
        return f"vMF(Rx, κ_M = {float(_v(ds, 'kappa_m', i)):g}), R: {float(_v(ds, 'angle', i)):.3g} rad in (e₁, e₂)"
    if kind == "brownian":
        return f"Brownian motion, t = {float(_v(ds, 't', i)):g}"
    return f"vMF(x, κ_M = {float(_v(ds, 'kappa_m', i)):g}) (control)"


def _pi_text(ds: xr.Dataset, i: int) -> str:
    fam = str(_v(ds, "pi", i))
    return fam if fam == "uniform" else f"{fam}, κ_π = {float(_v(ds, 'kappa_pi', i)):g}"


def _symmetry_text(ds: xr.Dataset, i: int) -> str:
    """Why the kernel is (not) π-reversible, from the exact statistics."""
    cross, shift = float(_v(ds, "asym_cross_exact", i)), float(_v(ds, "asym_shift_exact", i))
    if abs(cross) < 1e-12 and abs(shift) < 1e-12:
        return "π-reversible (control)"
    inv = "π-invariant" if abs(shift) < 1e-12 else "π M ≠ π"
    kind = str(_v(ds, "kernel", i))
    sym = "M(x, y) = M(y, x)" if kind == "brownian" else "R ≠ Rᵀ"
    return f"not reversible: {inv}; {sym}"


def _stat_cell(ds: xr.Dataset, name: str, i: int) -> str:
    ex = float(_v(ds, f"{name}_exact", i))
    return f"{format_pm(_v(ds, name, i), _v(ds, f'{name}_mcse', i))}\nexact {_fin(ex, '+.4f')}"


def _design_table(ds: xr.Dataset):
    header = ["setting", "kernel M", "π", "d", "τ", "symmetry", "E[x₁x⁺₂ − x₂x⁺₁]\nMC ± MCSE", "E[x⁺₁ − x₁]\nMC ± MCSE",
              "queries / block (C2)"]
    rows = [[str(s), _kernel_text(ds, i), _pi_text(ds, i), f"{_v(ds, 'dim', i)}", f"{float(_v(ds, 'tau', i)):g}",
             _symmetry_text(ds, i), _stat_cell(ds, "asym_cross", i), _stat_cell(ds, "asym_shift", i),
             f"{_v(ds, 'search_anchors', i)}"] for i, s in enumerate(ds["setting"].values)]
    return header, rows, [0.95, 1.7, 0.8, 0.25, 0.35, 1.45, 1.05, 1.05, 0.6]


def _results_table(ds: xr.Dataset, var: str):
    an = _ANALYSES[var]
    const, claim = an["const"], an["claim"]
    alpha = float(ds.attrs.get("alpha", np.nan))
    header = ["setting", "k_min", "sign", "slope ± SE", f"95% CI\n{100 * (1 - alpha):g}% CI (verdict)",
              "p-value of slope = −1/2", f"{const} estimate ± MCSE", f"{an['exact']} ± MCSE",
              f"z of {const}" + ("" if claim == "c1" else " (diag.)"), "verdict"]
    rows, colors = [], {}
    for i, s in enumerate(ds["setting"].values):
        f = {n: float(_v(ds, f"{var}_{n}", i)) for n in ("slope", "slope_se", "slope_ci_low", "slope_ci_high",
                                                          "slope_verdict_low", "slope_verdict_high", "slope_p_half",
                                                          "k_min", "sign")}
        dec = max(0, min(12, 1 - math.floor(math.log10(f["slope_se"])))) if f["slope_se"] > 0 else 4
        ci = (f"[{_num(f['slope_ci_low'], dec)}, {_num(f['slope_ci_high'], dec)}]\n"
              f"[{_num(f['slope_verdict_low'], dec)}, {_num(f['slope_verdict_high'], dec)}]"
              if math.isfinite(f["slope_ci_low"]) else "n/a")
        sign = {1.0: "+", -1.0: "−", 0.0: "changes"}.get(f["sign"], "n/a")
        verdict = str(_v(ds, f"verdict_{claim}", i))
        rows.append([str(s), _fin(f["k_min"], "g"), sign, format_pm(f["slope"], f["slope_se"]), ci,
                     _fin(f["slope_p_half"], ".2g"),
                     format_pm(_v(ds, f"{const}_estimate", i), _v(ds, f"{const}_estimate_mcse", i)),
                     format_pm(_v(ds, f"{const}_exact", i), _v(ds, f"{const}_exact_mcse", i)),
                     _fin(float(_v(ds, f"{const}_z", i)), "+.2f"), verdict.upper()])
        colors[(i, len(header) - 1)] = COLORS.get(verdict, COLORS["fail"])
    return header, rows, [1.0, 0.45, 0.45, 1.2, 1.3, 0.75, 1.15, 1.2, 0.6, 0.55], colors


def _title_page(doc: ReportDocument, ds: xr.Dataset) -> None:
    cfg = _json_attr(ds, "config", {})
    cfg = cfg if isinstance(cfg, dict) else {}
    n_blocks, n_set = ds.sizes.get("block", cfg.get("n_blocks", "?")), ds.sizes["setting"]
    alpha = float(ds.attrs.get("alpha", np.nan))
    # the c1 check's critical value: Student t on n_blocks - 1 df (simkit.stats.analysis.rate_verdict)
    zcrit = stats.t.isf(alpha / 2, n_blocks - 1) if math.isfinite(alpha) and isinstance(n_blocks, int) else np.nan
    doc.new_page()
    doc.text(str(ds.attrs.get("title", "Claim C7")), size=TITLE, weight="bold", after=0.02)
    doc.text(f"simkit study '{ds.attrs.get('study', 'asymmetry')}' · dataset created {ds.attrs.get('created', '?')} · "
             f"seed {ds.attrs.get('seed', '?')} · commit {str(ds.attrs.get('git_commit', '?'))[:12]}"
             f"{' · quick design' if cfg.get('quick') else ''}", size=SMALL, color="0.3", after=0.12)
    doc.text(C7_TEXT, after=0.1)
    neg = [str(s) for s, c in zip(ds["setting"].values, ds["c1_exact"].values) if c < 0]
    neg = f"in {', '.join(neg)}" if neg else "in no setting of this design"
    doc.heading("Design: positive kernels that are not π-reversible")
    header, rows, widths = _design_table(ds)
    doc.table(header, rows, widths, size=7.5)
    doc.text(
        "A π-reversible kernel makes (x, x⁺) exchangeable, so both statistics on the right vanish; either one "
        "being non-zero proves that M is not reversible. The rotated kernel vMF(Rx, κ_M) has E[x⁺ | x] = A_d(κ_M) R x, "
        "so E[x x⁺ᵀ] = E[x xᵀ] A_d Rᵀ is not symmetric when R ≠ Rᵀ; over uniform π it keeps π invariant (R preserves "
        "the uniform law) but is still not reversible. Spherical Brownian motion has a symmetric transition density "
        "h_t(x·y), but its invariant law is uniform: over a vMF π, x⁺ is more spread than x (π M ≠ π, E[x⁺₁] < E[x₁]), "
        "so π(dx) M(x, dy) ≠ π(dy) M(y, dx). Monte Carlo values: mean ± MCSE over blocks of "
        f"{cfg.get('n_asym', '?')} pairs each; exact values from E[x⁺ | x] = B x and the moments of π.", size=SMALL)
    doc.text(
        f"Method. Per setting and replicate block ({n_blocks} blocks): C1 with rate_k's streaming InfoNCE estimator "
        f"(k_max = {int(ds['k'].values.max())} negatives shared by {cfg.get('block_anchors', '?')} anchors, control "
        f"variates with exactly known conditional means, pilot coefficients) and C2 with search_ce's estimator (one "
        f"independent database of k_max points shared by the setting's queries; the ideal kernel uses the exact "
        f"density ratio m(x, y) = dM(x, ·)/dπ(y) — for Brownian motion the heat-kernel series "
        f"h_t(x·y)/(|S^(d−1)| π(y)) summed per pair to 1e−12 relative). The analysis is that of rate_k and "
        f"search_ce: WLS of log|curve| on log k and 1/k over k ≥ k_min = smallest grid k ≥ "
        f"{cfg.get('k_min_factor', '?')} × the expansion scale (max(E[Z2/Z²], E[m1/Z]) for C1, and also "
        f"w2 = E_x E_π[m²] for C2), fitted only when the block means keep one sign there; WLS of the curve on 1/k "
        f"and 1/k² for the constant. The one-sign condition of search_ce is applied to gap_k too: once M is "
        f"asymmetric, c1 = E[m1/Z] − E[(Z2/Z² − 1)/2] can be negative (the positive is no longer the most similar "
        f"point; here {neg}). Standard errors are delete-one-block jackknives; intervals use Student t with "
        f"{n_blocks} − 1 degrees of freedom; values are estimate ± MCSE (or SE).", after=0.1)
    doc.new_page()
    for var, label in (("gap", "C1 rate: gap_k = R_k − log k − CE"), ("d", "C2 rate: D_k = R_k − E CE(M_k, Q_k)")):
        claim = _ANALYSES[var]["claim"]
        verdicts = [str(v) for v in ds[f"verdict_{claim}"].values]
        doc.heading(f"{label}: {verdicts.count('pass')} of {n_set} settings pass")
        header, rows, widths, colors = _results_table(ds, var)
        doc.table(header, rows, widths, colors=colors, size=7.5)
    doc.text(
        f"Verdict rules (α = {alpha:g}, dataset attribute 'alpha'), per setting and claim: (i) the block means keep "
        f"one sign for k ≥ k_min (else no fit is attempted and the check fails); (ii) the level-{1 - alpha:g} "
        f"jackknife t-interval of the slope (second line of the CI column) contains −1; (iii) slope = −1/2 is "
        f"rejected at level α; for C1 also (iv) |z| ≤ t_(1−α/2, {n_blocks} − 1) = {zcrit:.2f} (Student t: "
        f"the jackknife SE has n_blocks − 1 degrees of freedom), z = (c1 estimate − c1 exact)/"
        f"√(MCSE² + MCSE_exact²) (c1 is exact by quadrature for isotropic kernels over a single vMF π and a Monte "
        f"Carlo value over x, with MCSE, for the rotated kernel). The d1 z-score is a diagnostic (d1 is derived here, "
        f"not in the paper). A setting passes C7 when it passes both. False-failure rate if C1 and C2 hold: (ii) and "
        f"(iv) fail with probability α each (nominal), (i) and (iii) only for lack of precision; so at most 2α for a "
        f"C1 check and α for a C2 check, and at most {1 - (1 - 2 * alpha) ** n_set * (1 - alpha) ** n_set:.2g} for "
        f"all {2 * n_set} checks together.", size=SMALL)
    verdicts = [str(v) for v in ds["verdict"].values]
    errs = ds["cell_error"].values if "cell_error" in ds else [""] * n_set
    bad = [i for i in range(n_set) if verdicts[i] != "pass" or str(errs[i])]
    if bad:
        doc.heading("Failures and task errors")
        rows = []
        for i in bad:
            why = "; ".join(f"{c.upper()}: {_v(ds, f'verdict_{c}_reason', i)}" for c in ("c1", "c2")
                            if str(_v(ds, f"verdict_{c}_reason", i)))
            rows.append([str(ds["setting"].values[i]), f"{verdicts[i]}: {why or '—'}", str(errs[i]) or "—"])
        doc.table(["setting", "verdict: why", "task errors (variable cell_error)"], rows, [1.0, 4.0, 4.0],
                  colors={(r, 0): COLORS.get(verdicts[i], COLORS["fail"]) for r, i in enumerate(bad)})
    else:
        doc.text("All settings pass both checks; no task raised an error.", size=SMALL, weight="bold")


def _empty(ax: Axes, ds: xr.Dataset, i: int, var: str) -> bool:
    if np.any(np.isfinite(ds[var].values[i])):
        return False
    claim = _ANALYSES[var]["claim"]
    why = f"no estimates: {_v(ds, f'verdict_{claim}_reason', i) or 'failed'}. "
    why += str(_v(ds, "cell_error", i)) if "cell_error" in ds else ""
    ax.text(0.5, 0.5, "\n".join(textwrap.wrap(why, 40)), transform=ax.transAxes, ha="center", va="center",
            fontsize=SMALL, color=COLORS["fit"])
    ax.set(xticks=[], yticks=[], title=str(ds["setting"].values[i]))
    return True


def _rate_page(doc: ReportDocument, ds: xr.Dataset, idx: list[int], var: str) -> None:
    an = _ANALYSES[var]
    k = ds["k"].values.astype(float)
    cap = (f"Points: |{an['name']}| estimated with control variates, filled where {an['name']} > 0 and hollow where "
           f"{an['name']} < 0; error bars ±2 MCSE (clipped at the axis). Red line: the fitted log|{an['name']}| = "
           f"a + b log k + c/k over the shaded fit range k ≥ k_min; grey: reference slopes 1/k (dashed) and 1/√k "
           f"(dotted) through the data at k_min, the claim predicting the first.")
    claim = "C1" if var == "gap" else "C2"
    fig, axes, ly = doc.figure(f"{claim} for non-reversible kernels: |{an['long']}| on log–log axes", 1, len(idx),
                               caption=cap, subtitle="slope of the WLS fit ± jackknife SE in each panel title")
    for ax, i in zip(axes[0], idx):
        if _empty(ax, ds, i, var):
            continue
        y, se, kmin = ds[var].values[i], ds[f"{var}_mcse"].values[i], float(_v(ds, f"{var}_k_min", i))
        ay = np.abs(y)
        sel = _fit_mask(k, kmin)
        if sel.any():
            ax.axvspan(kmin / 1.25, k[-1] * 1.25, color=COLORS["span"], zorder=0)
            j = int(np.argmax(sel))
            ax.plot(k, ay[j] * k[j] / k, "--", color=COLORS["ref"], lw=0.9)
            ax.plot(k, ay[j] * np.sqrt(k[j] / k), ":", color=COLORS["ref"], lw=1.1)
            fit = ds[f"fit_{var}_abs"].values[i]
            if np.any(np.isfinite(fit[sel])):
                ax.plot(k[sel], fit[sel], color=COLORS["fit"], lw=2.4, zorder=3)
        ok = np.isfinite(ay) & (ay > 0)
        for pos, mfc in ((True, COLORS["data"]), (False, "white")):
            m = ok & ((y > 0) == pos)
            if m.any():
                ax.errorbar(k[m], ay[m], yerr=[np.minimum(2 * se[m], 0.999 * ay[m]), 2 * se[m]], fmt="o", ms=3.5,
                            color=COLORS["data"], mfc=mfc, zorder=5)
        _log_axes(ax, k, ay[ok])
        ax.set_title(f"{ds['setting'].values[i]}: slope "
                     f"{format_pm(_v(ds, f'{var}_slope', i), _v(ds, f'{var}_slope_se', i))}")
        ax.set(xlabel=_label(ds, "k"), ylabel=f"|{an['name']}| (nats)")
    _legend(fig, ly, [_marker(COLORS["data"], label=f"{an['name']} > 0, ± 2 MCSE"),
                      _marker(COLORS["data"], hollow=True, label=f"{an['name']} < 0 (absolute value)"),
                      _line(COLORS["fit"], lw=2.4, label="WLS fit (log k and 1/k)"),
                      _line(COLORS["ref"], "--", label="reference slope 1/k"),
                      _line(COLORS["ref"], ":", label="reference slope 1/√k"),
                      Patch(color=COLORS["span"], label="fit range k ≥ k_min")])
    doc.save(fig)


def _constant_page(doc: ReportDocument, ds: xr.Dataset, idx: list[int], var: str) -> None:
    an = _ANALYSES[var]
    const, const2 = an["const"], an["const2"]
    k = ds["k"].values.astype(float)
    kv = "k_gap" if var == "gap" else "k_d"
    cap = (f"Top: k·{an['name']} over the whole grid; bottom: the fit range k ≥ k_min enlarged. Error bars ±2 MCSE. "
           f"Green: the {an['exact']} with a band of ±2 MCSE (a line where it is exact). Red: the fitted "
           f"{const} + {const2}/k from the WLS fit of {an['name']} on 1/k and 1/k².")
    if var == "d":
        cap += (" d1 = E_x[m1/Z] − E_x Cov_M(m, s) is derived here by the delta method (a diagnostic, outside the "
                "verdict); it is a Monte Carlo value over x ~ π, x⁺ ~ M(x).")
    else:
        cap += " For the rotated kernel c1 is a Monte Carlo value over x (exact inner terms), hence its band."
    title = (f"k · {an['name']} approaches the {an['exact']}" + (" (C1)" if var == "gap" else " (C2)"))
    fig, axes, ly = doc.figure(title, 2, len(idx), caption=cap,
                               subtitle=f"estimated {const} ± jackknife MCSE in each panel title")
    for col, i in enumerate(idx):
        for row, ax in enumerate(axes[:, col]):
            if _empty(ax, ds, i, var):
                continue
            kg, se, kmin = ds[kv].values[i], ds[f"{kv}_mcse"].values[i], float(_v(ds, f"{var}_k_min", i))
            fsel = _fit_mask(k, kmin)
            sel = fsel if (row and fsel.any()) else np.ones(k.shape, bool)
            c, cse = float(_v(ds, f"{const}_exact", i)), float(_v(ds, f"{const}_exact_mcse", i))
            if math.isfinite(c):
                if cse > 0:
                    ax.axhspan(c - 2 * cse, c + 2 * cse, color=COLORS["band"], alpha=0.25, lw=0)
                ax.axhline(c, color=COLORS["band"], lw=0.8)
            a, b = float(_v(ds, f"{const}_estimate", i)), float(_v(ds, f"{const2}_estimate", i))
            if math.isfinite(a) and math.isfinite(b) and fsel.any():
                kk = np.geomspace(k[fsel][0], k[-1], 200)
                ax.plot(kk, a + b / kk, color=COLORS["fit"], lw=1.3, zorder=3)
            ax.errorbar(k[sel], kg[sel], yerr=2 * se[sel], fmt="o", ms=3.5, mfc="white", color=COLORS["data"],
                        zorder=5)
            _log_axes(ax, k)
            if row:
                yv = np.concatenate([kg[sel] - 2 * se[sel], kg[sel] + 2 * se[sel], [c - 2 * cse, c + 2 * cse]])
                yv = yv[np.isfinite(yv)]
                if yv.size:
                    pad = 0.08 * (yv.max() - yv.min()) + 1e-9 * max(1.0, abs(yv.max()))
                    ax.set_ylim(yv.min() - pad, yv.max() + pad)
                ax.set_xlim(k[sel][0] / 1.4, k[-1] * 1.4)
                ax.ticklabel_format(axis="y", useOffset=False)
                ax.set_title(f"fit range k ≥ {kmin:g}; {an['exact']} {format_pm(c, cse).replace(' (exact)', '')}",
                             fontsize=8.5)
            else:
                ax.set_title(f"{ds['setting'].values[i]}: {const} "
                             f"{format_pm(_v(ds, f'{const}_estimate', i), _v(ds, f'{const}_estimate_mcse', i))}")
            ax.set(xlabel=_label(ds, "k"), ylabel=f"k · {an['name']} (nats)")
    _legend(fig, ly, [_marker(COLORS["data"], hollow=True, label=f"k·{an['name']} ± 2 MCSE"),
                      Patch(color=COLORS["band"], alpha=0.5, label=f"{an['exact']} ± 2 MCSE"),
                      _line(COLORS["fit"], lw=1.3, label=f"fit {const} + {const2}/k (k ≥ k_min)")])
    doc.save(fig)


def _resid_page(doc: ReportDocument, ds: xr.Dataset, idx: list[int]) -> None:
    k = ds["k"].values.astype(float)
    cap = ("Standardised residuals (estimate − fit)/MCSE of the two rate fits, on the log scale: C1 (top, log|gap_k|) "
           "and C2 (bottom, log|D_k|). Filled points: k ≥ k_min, in the fit; hollow grey points: k < k_min, outside "
           "it, where higher orders of the expansion dominate and residuals are large by design; grey triangles at the "
           "edge: residuals beyond the axis range (the largest is given in the panel title). Dashed: ±2; dotted: ±3.")
    fig, axes, ly = doc.figure("Residuals of the rate fits", 2, len(idx), caption=cap)
    for col, i in enumerate(idx):
        for row, (var, what) in enumerate((("gap", "C1 rate fit"), ("d", "C2 rate fit"))):
            ax = axes[row, col]
            if _empty(ax, ds, i, var):
                continue
            r, sel = ds[f"resid_{var}_rate"].values[i], _fit_mask(k, float(_v(ds, f"{var}_k_min", i)))
            worst = residual_panel(ax, k, r, sel)
            big = f"; off scale up to {worst}" if worst else ""
            ax.set_title(f"{ds['setting'].values[i]}: {what}{big}", fontsize=8.5)
            ax.set(xlabel=_label(ds, "k"), ylabel="standardised residual")
    residual_legend(fig, ly)
    doc.save(fig)


def _asymmetry_page(doc: ReportDocument, ds: xr.Dataset) -> None:
    names = [str(s) for s in ds["setting"].values]
    n = len(names)
    cap = ("Each kernel's non-reversibility, measured on independent pairs x ~ π, x⁺ ~ M(x, ·): left, the "
           "antisymmetric part E[x₁x⁺₂ − x₂x⁺₁] of the cross-moment matrix E[x x⁺ᵀ]; right, the shift E[x⁺₁ − x₁] of "
           "the mean from x to x⁺. Both are exactly 0 for a π-reversible kernel (grey line). Points: Monte Carlo mean "
           "± 2 MCSE over blocks; black crosses: exact values. A rotated kernel is not reversible through the "
           "first (R ≠ Rᵀ), Brownian motion over a vMF π through the second (π is not its invariant law).")
    fig, axes, ly = doc.figure("The positive kernels are not π-reversible: two exchangeability statistics", 1, 2,
                               caption=cap,
                               subtitle="Monte Carlo estimate ± 2 MCSE against the exact value, per setting")
    ypos = np.arange(n)[::-1]
    for col, (ax, (name, what)) in enumerate(zip(axes[0], (("asym_cross", "E[x₁x⁺₂ − x₂x⁺₁]"),
                                                            ("asym_shift", "E[x⁺₁ − x₁]")))):
        est, se, ex = ds[name].values, ds[f"{name}_mcse"].values, ds[f"{name}_exact"].values
        ax.axvline(0.0, color=COLORS["ref"], lw=1.0)
        ax.errorbar(est, ypos, xerr=2 * se, fmt="o", color=COLORS["data"], ms=5, zorder=4)
        ax.plot(ex, ypos, "x", color=COLORS["exact"], ms=8, mew=1.5, zorder=5)
        ax.set_yticks(ypos)
        ax.set_yticklabels(names if col == 0 else [""] * n)  # the settings share the rows of both panels
        ax.set_ylim(-0.7, n - 0.3)
        ax.grid(axis="y", alpha=0)
        ax.set(xlabel=what, title=what + ("" if col == 0 else " (rows as on the left)"))
    _legend(fig, ly, [Line2D([], [], marker="o", color=COLORS["data"], label="Monte Carlo ± 2 MCSE"),
                      _marker(COLORS["exact"], "x", label="exact value"),
                      _line(COLORS["ref"], label="0: reversible kernel")])
    doc.save(fig)


def asymmetry_sections(doc: ReportDocument, ds: xr.Dataset) -> None:
    """The pages of the C7 study (all but provenance), for its own report or the validation report."""
    _check(ds)
    n = ds.sizes["setting"]
    # at most SETTINGS_PER_PAGE panels a page, balanced (4 settings: 2 + 2, not 3 + 1)
    groups = [list(g) for g in np.array_split(np.arange(n), -(-n // SETTINGS_PER_PAGE))]
    _title_page(doc, ds)
    for var in ("gap", "d"):
        for idx in groups:
            _rate_page(doc, ds, idx, var)
        for idx in groups:
            _constant_page(doc, ds, idx, var)
    for idx in groups:
        _resid_page(doc, ds, idx)
    _asymmetry_page(doc, ds)
