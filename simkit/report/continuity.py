"""PDF report of the C4 study (``studies/continuity.py``), read from its saved dataset alone.

Built from the generic pieces of :mod:`simkit.report` (:class:`~simkit.report.ReportDocument`,
:func:`~simkit.report.format_pm` and the plotting helpers); nothing is recomputed. The study's
``report()`` (:meth:`simkit.runner.Study.report`) adds these pages and the provenance pages.

Pages: (1) claim C4, the two bounds and their derivation, the pre-registered rule
(protocols/continuity.md) with its per-cell results, controls, secondaries and conclusion, then the
exploratory pre-protocol checks; (2) growth per doubling of k against the margin (primary and
controls); (3) mean |dl| and the three bounds against k; (4) the negatives' term, softmax average
against max; (5) ratios of means; (6) validity on every tuple (largest |dl|/bound); (7) provenance.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import xarray as xr
from matplotlib import colormaps
from matplotlib.lines import Line2D
from scipy import stats

from simkit.report.document import (COLORS, SMALL, ReportDocument, _json_attr, _legend, _line, _log_axes, _marker,
                                    format_pm, label)
from simkit.report.spec import FigurePage, Panel, TitlePage, fin, render, require

__all__ = ["continuity_sections"]

C4_TEXT = (
    "Claim C4 (averaging continuity bound, Prop. 4). For two embeddings φ, ψ the InfoNCE losses ℓ_k(φ), ℓ_k(ψ) of a "
    "tuple (x, x⁺, x⁻_1..x⁻_k) differ by at most a bound built from a softmax-weighted average over the negatives of "
    "‖φ(x⁻_i) − ψ(x⁻_i)‖ (plus anchor and positive terms), because the Gâteaux derivative of the log-sum-exp along "
    "a perturbation is a softmax average, not a max. The standard Lipschitz argument uses the max over the k "
    "negatives instead, which grows with k; the averaging bound does not (docs/theory.md, C4).")

BOUNDS_TEXT = (
    "The bounds (derived here; proofs in the docstring of studies/continuity.py). Write u = φ(x), v = φ(x⁺), "
    "w_j = φ(x⁻_j), primes for ψ, r_j = u·(w_j − v)/τ, so ℓ_k = log(1 + Σ_j e^{r_j}) = G(r) with G convex. Its Gâteaux "
    "derivative is dG(r)[h] = Σ_j P_j h_j with the softmax weights P_j = e^{r_j}/(1 + Σ_i e^{r_i}) of the negatives "
    "(Σ_j P_j ≤ 1). On the segment r(t) = r + t(r′ − r), g(t) = G(r(t)) is convex, so g′(0) ≤ ℓ_k(ψ) − ℓ_k(φ) ≤ "
    "g′(1): the loss difference is bracketed by the two endpoint derivatives, and (1) |Δℓ| ≤ B_score = max over "
    "P ∈ {P(φ), P(ψ)} of Σ_j P_j |r′_j − r_j|. Since τ|r′_j − r_j| ≤ 2‖Δu‖ + ‖Δv‖ + ‖Δw_j‖,\n"
    "    (AVG)  |Δℓ| ≤ B_avg = (1/τ) [ 2‖Δu‖ + ‖Δv‖ + max over q ∈ {q(φ), q(ψ)} of Σ_j q_j ‖Δw_j‖ ],  "
    "q_j = e^{s(x,x⁻_j)} / Σ_i e^{s(x,x⁻_i)};\n"
    "    (MAX)  |Δℓ| ≤ B_max = (1/τ) [ 2‖Δu‖ + ‖Δv‖ + max_j ‖Δw_j‖ ]  (G is 1-Lipschitz in the sup norm).\n"
    "So B_score ≤ B_avg ≤ B_max always; B_avg and B_max differ only in averaging or maximising ‖φ(x⁻_j) − ψ(x⁻_j)‖ "
    "over the negatives.")

_REQUIRED = ("setting", "eps", "k", "dl", "bound_avg", "bound_max", "bound_score", "neg_avg", "neg_max",
             "violations_avg", "violations_max", "slope_avg", "slope_avg_se", "slope_avg_p", "slope_max",
             "slope_max_se", "slope_max_p", "ratio_max_avg", "verdict", "flat_verdict", "ni_avg_growth", "ni_avg_p",
             "ni_negmax_growth", "ni_max_growth", "control_verdict", "secondary_verdict", "s1_p", "s2_p",
             "conclusion")


def _eps_colors(n: int) -> list:
    """Shades of one hue for the eps values (light = small eps)."""
    cmap = colormaps["viridis"]
    return [cmap(0.15 + 0.7 * i / max(n - 1, 1)) for i in range(n)]


# ------------------------------------------------------------------------------------------------
# title page

def _checks_table(ds: xr.Dataset):
    k = ds["k"].values
    kmax = int(k[-1])
    header = ["setting", "ε", "tuples × k checked", "violations (B_score · B_avg · B_max)",
              "B_avg slope ± SE\n(two-sided p)", "slope detected by the B_avg test (80%)",
              "B_max slope ± SE\n(one-sided p)", f"E B_max / E B_avg\nat k = {kmax}",
              f"E max|Δw| / E avg|Δw|\nat k = {kmax}", "largest |Δℓ| / B_avg", "verdict"]
    rows, colors = [], {}
    n_tuples = int(ds.attrs.get("tuples_per_k", 0))
    for i, s in enumerate(ds["setting"].values):
        for j, e in enumerate(ds["eps"].values):
            v = str(ds["flat_verdict"].values[i, j])
            viol = " · ".join(str(int(ds[f"violations_{t}"].values[i, j].sum())) for t in ("score", "avg", "max"))
            rows.append([
                str(s), f"{e:g}", f"{n_tuples} × {k.size}", viol,
                f"{format_pm(ds['slope_avg'].values[i, j], ds['slope_avg_se'].values[i, j])}\n"
                f"(p = {fin(ds['slope_avg_p'].values[i, j], '.2g')})",
                fin(ds["slope_avg_detect80"].values[i, j], ".1e") if "slope_avg_detect80" in ds else "n/a",
                f"{format_pm(ds['slope_max'].values[i, j], ds['slope_max_se'].values[i, j])}\n"
                f"(p = {fin(ds['slope_max_p'].values[i, j], '.1e')})",
                format_pm(ds["ratio_max_avg"].values[i, j, -1], ds["ratio_max_avg_mcse"].values[i, j, -1]),
                format_pm(ds["ratio_negmax_negavg"].values[i, j, -1], ds["ratio_negmax_negavg_mcse"].values[i, j, -1])
                if "ratio_negmax_negavg" in ds else "n/a",
                fin(np.nanmax(ds["tightness_avg"].values[i, j]), ".3f") if "tightness_avg" in ds else "n/a",
                v.upper()])
            colors[(len(rows) - 1, len(header) - 1)] = COLORS.get(v, COLORS["fail"])
    return header, rows, [0.85, 0.35, 0.75, 0.85, 1.15, 0.8, 1.05, 0.95, 0.95, 0.6, 0.5], colors


def _pct(ds, name, i, j, se=True) -> str:
    g = float(ds[name].values[i, j]) * 100
    if not se:
        return f"{fin(g, '+.2f')}%"
    return f"{format_pm(g, float(ds[name + '_se'].values[i, j]) * 100)}%"


def _confirmatory_table(ds: xr.Dataset):
    header = ["setting", "ε", "E B_avg growth per doubling ± SE", "non-inferiority t · p", "primary",
              "max_j|Δw_j| growth (p)", "B_max growth (p)", "control", "S1 p · S2 p", "secondary"]
    rows, colors = [], {}
    for i, s in enumerate(ds["setting"].values):
        bump = str(ds["perturbation"].values[i]) == "bump" if "perturbation" in ds else False
        for j, e in enumerate(ds["eps"].values):
            rows.append([
                str(s), f"{e:g}", _pct(ds, "ni_avg_growth", i, j),
                f"{fin(ds['ni_avg_t'].values[i, j], '.1f')} · {fin(ds['ni_avg_p'].values[i, j], '.2g')}",
                str(ds["verdict"].values[i, j]).upper(),
                f"{_pct(ds, 'ni_negmax_growth', i, j, False)} ({fin(ds['ni_negmax_p'].values[i, j], '.2g')})",
                f"{_pct(ds, 'ni_max_growth', i, j, False)} ({fin(ds['ni_max_p'].values[i, j], '.2g')})"
                + ("" if bump else " ·descr."),
                str(ds["control_verdict"].values[i, j]).upper(),
                f"{fin(ds['s1_p'].values[i, j], '.1e')} · {fin(ds['s2_p'].values[i, j], '.1e')}",
                str(ds["secondary_verdict"].values[i, j]).upper()])
            for c, name in ((4, "verdict"), (7, "control_verdict"), (9, "secondary_verdict")):
                colors[(len(rows) - 1, c)] = COLORS.get(str(ds[name].values[i, j]), COLORS["fail"])
    return header, rows, [0.85, 0.35, 1.35, 0.95, 0.55, 1.05, 1.15, 0.55, 0.95, 0.65], colors


def _title_page(doc: ReportDocument, ds: xr.Dataset) -> None:
    cfg = _json_attr(ds, "config", {})
    cfg = cfg if isinstance(cfg, dict) else {}
    nb = ds.sizes.get("block", "?")
    alpha = float(ds.attrs.get("alpha", np.nan))
    alpha_ni = float(ds.attrs.get("alpha_ni", np.nan))
    delta = float(ds.attrs.get("delta", np.nan))
    k = ds["k"].values
    n_cells = ds.sizes["setting"] * ds.sizes["eps"]
    render(doc, ds, (TitlePage(note="" if "protocol_path" in ds.attrs else
                               " · not the pre-registered design: exploratory"),))
    doc.text(C4_TEXT, after=0.08)
    doc.text(BOUNDS_TEXT, size=SMALL, after=0.08)
    settings = ", ".join(f"{s} ({ds['family'].values[i]}, p = {int(ds['p'].values[i])}, d = {int(ds['d'].values[i])}, "
                         f"π {ds['pi'].values[i]}, τ = {float(ds['tau'].values[i]):g}"
                         + (f", bump on a cap of π-mass {float(ds['cap_fraction'].values[i]):.3g}"
                            if "perturbation" in ds and str(ds["perturbation"].values[i]) == "bump" else "") + ")"
                         for i, s in enumerate(ds["setting"].values)) if "family" in ds else ""
    doc.text(
        f"Method. Settings: {settings}. Each of {nb} independent blocks draws φ from its family's initialisation and, "
        f"for every ε in {{{', '.join(f'{e:g}' for e in ds['eps'].values)}}}, ψ: for a parametric setting ψ = φ with "
        f"parameters θ + ε‖θ‖e, e a uniform random unit vector; for the bump setting ψ(x) = normalise(φ(x) + "
        f"{float(ds.attrs.get('bump_gain', 4)):g}ε·b(x)·e), b a bump on a random cap, e ⊥ φ(cap centre), so that only "
        f"the rare negatives in the cap are displaced (the bounds are proved for any map into the sphere, this ψ "
        f"included). Then {cfg.get('block_anchors', '?')} tuples x ~ π, x⁺ ~ vMF(x, κ_M) with "
        f"K = {int(k[-1])} i.i.d. negatives each, and evaluates |Δℓ|, B_score, B_avg and B_max exactly for every "
        f"k = 1, 2, 4, …, K from the first k negatives (running log-sum-exp; common random numbers across k). Means "
        f"are over tuples and blocks, with MCSE = sd over blocks/√n_blocks; ratios are ratios of means with delete-one-"
        f"block jackknife MCSE.", after=0.08)
    doc.heading(f"Pre-registered rule (protocols/continuity.md): C4 {ds['conclusion'].values.item()}")
    header, rows, widths, colors = _confirmatory_table(ds)
    doc.table(header, rows, widths, colors=colors, size=7.0)
    doc.text(
        f"Rule. Primary, per (setting, ε): b = OLS slope of log2 E B_avg on log2 k over k ≥ {cfg.get('k_fit_min', '?')} "
        f"(equal weights, block-mean curve, delete-one-block jackknife SE), growth per doubling 2^b − 1; one-sided "
        f"non-inferiority t test of H0: growth ≥ δ = {100 * delta:g}% per doubling at α = {alpha_ni:g} on n_blocks − 1 "
        f"df; intersection–union: the primary passes only if all {n_cells} cells reject (level α, no correction). "
        f"Positive control: the same rule applied to E max_j‖Δw_j‖ (every cell) and to E B_max (bump cells) must not "
        f"pass; B_max in the parametric cells is put through it descriptively ('descr.'). Secondary: S1 E B_max and S2 "
        f"E B_max / E B_avg grow (one-sided t of OLS slope > 0 at α). Deterministic: no tuple violates any bound "
        f"({_n_viol(ds)} violations). Conclusion: confirmed when the deterministic, primary and control checks pass; "
        f"not confirmed (inconclusive) when the control fails. False-failure rate of the primary (claim rows of "
        f"simkit validate): P(some cell fails | flat in every cell) with the run's SEs (Bonferroni bound).",
        size=SMALL)
    doc.heading(f"Exploratory (pre-protocol rule, unchanged): "
                f"{[str(v) for v in ds['flat_verdict'].values.ravel()].count('pass')} of {n_cells} cells pass")
    header, rows, widths, colors = _checks_table(ds)
    doc.table(header, rows, widths, colors=colors, size=7.0)
    doc.text(
        f"Exploratory rule (α = {alpha:g} per test, dataset attribute 'alpha'). A cell passes when (i) no tuple violates "
        f"B_score, B_avg or B_max at any k (allowance for rounding: {ds.attrs.get('tolerance', '?')}); (ii) the "
        f"two-sided test of zero WLS slope (simkit.stats.analysis.fit_rate) for E B_avg is not rejected at level α; (iii) "
        f"the one-sided test of H0: slope ≤ 0 for E B_max rejects at level α. A point null for (ii) is the wrong "
        f"question for C4 (the protocol's reason for the one-sided rule above); it is kept, unchanged, for "
        f"comparison with earlier runs. Overall false-failure rate 1 − (1 − α)^{n_cells} = "
        f"{1 - (1 - alpha) ** n_cells:.2g}. Intervals and p-values are functions of the estimates and SEs shown and "
        f"carry no separate MCSE.", size=SMALL)
    doc.text(_findings(ds), size=SMALL)
    errs = ds["cell_error"].values if "cell_error" in ds else [""] * ds.sizes["setting"]
    bad = [(i, j) for i in range(ds.sizes["setting"]) for j in range(ds.sizes["eps"])
           if any(str(ds[n].values[i, j]) != "pass" for n in ("verdict", "control_verdict", "secondary_verdict"))]
    if bad or any(str(e) for e in errs):
        doc.heading("Pre-registered checks not passed, and task errors")
        rows = [[str(ds["setting"].values[i]), f"{ds['eps'].values[j]:g}",
                 "; ".join(f"{lab} {ds[n].values[i, j]}: {ds[r].values[i, j] or '—'}"
                           for lab, n, r in (("primary", "verdict", "verdict_reason"),
                                             ("control", "control_verdict", "control_reason"),
                                             ("secondary", "secondary_verdict", "secondary_reason"))
                           if str(ds[n].values[i, j]) != "pass"), str(errs[i]) or "—"]
                for i, j in bad]
        rows += [[str(ds["setting"].values[i]), "all", "task error", str(e)]
                 for i, e in enumerate(errs) if str(e) and not any(b[0] == i for b in bad)]
        doc.table(["setting", "ε", "verdict: why", "task errors (variable cell_error)"], rows, [1.0, 0.4, 5.0, 3.0],
                  colors={(r, 0): COLORS["fail"] for r in range(len(rows))})
    else:
        doc.text("All pre-registered checks pass in every cell; no task raised an error.", size=SMALL, weight="bold")


def _n_viol(ds: xr.Dataset) -> int:
    return int(sum(ds[f"violations_{t}"].values.sum() for t in ("score", "avg", "max")))


def _growth_page(doc: ReportDocument, ds: xr.Dataset) -> None:
    """Forest plot: growth per doubling of k with one-sided upper 1 - alpha confidence bounds, against delta."""
    delta = float(ds.attrs.get("delta", np.nan))
    alpha = float(ds.attrs.get("alpha_ni", 0.01))
    df = np.maximum(ds["ni_blocks"].values - 1, 1)
    labels = [f"{s}, ε = {e:g}" for s in ds["setting"].values for e in ds["eps"].values]
    y = np.arange(len(labels))[::-1]
    cap = (f"Left: growth of E B_avg per doubling of k (2^b − 1, b the OLS slope of log2 E B_avg on log2 k), ± its "
           f"jackknife SE (thick) and its one-sided upper {100 * (1 - alpha):g}% confidence bound (thin, t on "
           f"n_blocks − 1 df); the cell shows non-inferiority exactly when that bound lies left of the margin δ = "
           f"{100 * delta:g}% (dashed red). Right: the same for the positive controls, E max_j‖Δw_j‖ (squares, every "
           f"cell) and E B_max (diamonds; a control in the bump cells, descriptive elsewhere), on a log axis: a "
           f"control behaves when its lower end stays right of δ. Growth of E B_avg is shown on a linear axis in %.")
    fig, axes, ly = doc.figure("Growth per doubling of k against the pre-registered margin", 1, 2, caption=cap)
    left, right = axes[0, 0], axes[0, 1]
    g, se = 100 * ds["ni_avg_growth"].values.ravel(), 100 * ds["ni_avg_growth_se"].values.ravel()
    q = stats.t.isf(alpha, df.ravel())
    left.errorbar(g, y, xerr=se, fmt="o", color=COLORS["data"], lw=2.2, ms=4, zorder=4)
    left.errorbar(g, y, xerr=[np.zeros_like(g), q * se], fmt="none", color=COLORS["data"], lw=0.9, capsize=3)
    left.axvline(100 * delta, color=COLORS["fit"], ls="--", lw=1.0)
    left.axvline(0.0, color=COLORS["ref"], lw=0.8)
    left.set_yticks(y, labels, fontsize=7)
    left.set(xlabel="growth of E B_avg per doubling of k (%)", title="primary: E B_avg")
    for name, mk, off in (("ni_negmax", "s", 0.15), ("ni_max", "D", -0.15)):
        gg, ss = 100 * ds[f"{name}_growth"].values.ravel(), 100 * ds[f"{name}_growth_se"].values.ravel()
        ok = np.isfinite(gg) & (gg > 0)
        right.errorbar(gg[ok], y[ok] + off, xerr=[np.minimum(q[ok] * ss[ok], 0.99 * gg[ok]), ss[ok]], fmt=mk,
                       color=COLORS["fit"] if name == "ni_negmax" else COLORS["plain"], ms=4, lw=1.0)
    right.axvline(100 * delta, color=COLORS["fit"], ls="--", lw=1.0)
    right.set_xscale("log")
    right.set_yticks(y, [""] * len(labels))  # the rows of the left panel
    right.set(xlabel="growth per doubling of k (%)", title="controls: E max_j‖Δw_j‖, E B_max")
    _legend(fig, ly, [_marker(COLORS["data"], label="E B_avg ± SE, upper confidence bound"),
                      _marker(COLORS["fit"], "s", label="E max_j‖Δw_j‖"),
                      _marker(COLORS["plain"], "D", label="E B_max"),
                      _line(COLORS["fit"], "--", label=f"margin δ = {100 * delta:g}% per doubling")])
    doc.save(fig)


def _findings(ds: xr.Dataset) -> str:
    """The findings paragraph, with its numbers read from the dataset."""
    kmax = int(ds["k"].values[-1])
    nv = int(sum(ds[f"violations_{t}"].values.sum() for t in ("score", "avg", "max")))
    rng = lambda name, fmt=".3g": (f"{fin(np.nanmin(ds[name].values), fmt)}–"  # noqa: E731
                                   f"{fin(np.nanmax(ds[name].values), fmt)}")
    end = lambda name: ds[name].values[..., -1]  # noqa: E731
    n_flat_rej = int(np.sum(ds["slope_avg_p"].values < float(ds.attrs.get("alpha", np.nan))))
    out = [f"Findings to read with the figures. {'Both bounds hold on every tuple' if nv == 0 else f'{nv} violations'} "
           f"({int(ds.attrs.get('tuples_per_k', 0))} tuples at each of {ds.sizes['k']} values of k, for every setting "
           f"and ε).",
           f"The mean averaging bound changes little with k (pre-registered growth per doubling "
           f"{fin(100 * np.nanmin(ds['ni_avg_growth'].values), '.2g')}% to "
           f"{fin(100 * np.nanmax(ds['ni_avg_growth'].values), '.2g')}%; exploratory WLS slopes "
           f"{rng('slope_avg', '.1e')}, the two-sided test of zero slope rejects in {n_flat_rej} of "
           f"{ds['slope_avg_p'].size} cells), while the "
           f"mean max bound grows with slope {rng('slope_max')} per unit of log k, like the maximum of k draws of "
           f"‖φ(x⁻) − ψ(x⁻)‖. At k = {kmax}, E B_max / E B_avg = {fin(np.nanmin(end('ratio_max_avg')))}–"
           f"{fin(np.nanmax(end('ratio_max_avg')))}: where it is near 1 the shared anchor/positive term "
           f"2‖Δu‖ + ‖Δv‖ dominates both bounds (parametric ψ); where it is large the max has picked up rare displaced "
           f"negatives (bump ψ); on the negatives' term alone the max is {fin(np.nanmin(end('ratio_negmax_negavg')))}–"
           f"{fin(np.nanmax(end('ratio_negmax_negavg')))} times the softmax average (page 4), and the ratio keeps "
           f"growing with k.",
           f"B_avg is conservative by a factor {fin(np.nanmin(end('ratio_avg_dl')))}–"
           f"{fin(np.nanmax(end('ratio_avg_dl')))} against the mean |Δℓ| (the step |w′_j − v′| ≤ 2 and the 1/τ), while "
           f"the score-level bound B_score is within a factor {fin(np.nanmin(end('ratio_score_dl')))}–"
           f"{fin(np.nanmax(end('ratio_score_dl')))} and nearly attained on some tuples (largest |Δℓ|/B_score "
           f"1 − {fin(1 - np.nanmax(ds['tightness_score'].values), '.1e')}, page 6)."]
    return " ".join(out)


# ------------------------------------------------------------------------------------------------
# figure pages

_CELL = "{setting}, ε = {facet}"
BOUNDS = FigurePage(
    "Loss differences and their bounds against k",
    (Panel("dl", band="dl_mcse", also=("bound_score", "bound_avg", "bound_max"), logy=True,
           title=_CELL + ": slopes avg {slope_avg:.1e}, max {slope_max:.3f}", label="E |Δℓ| ± 2 MCSE",
           also_labels=("E B_score (1)", "E B_avg (AVG)", "E B_max (MAX)"), ylabel="nats"),),
    caption="Means over tuples and pairs of |ℓ_k(ψ) − ℓ_k(φ)| (± 2 MCSE, mostly hidden by the markers) and of the "
            "three bounds, on log–log axes: rows are settings, columns the perturbation size ε. The slope of log E[B] "
            "on log k (WLS over the fit range, jackknife SE) is in each panel title for B_avg and B_max. The ordering "
            "E|Δℓ| ≤ E B_score ≤ E B_avg ≤ E B_max holds tuple by tuple, not only on average.",
    subtitle="averaging bound B_avg flat in k, max bound B_max growing", facet=("setting", "eps"))
NEGATIVES = FigurePage(
    "The negatives' term: softmax average against maximum",
    (Panel("neg_avg", band="neg_avg_mcse", also=("neg_max",), hline="neg_plain", hline_band="neg_plain_mcse",
           title=_CELL + ": max/avg {negmax_negavg_end±negmax_negavg_mcse_end}", ylabel="‖φ(x⁻) − ψ(x⁻)‖",
           label="softmax average over the first k negatives ± 2 MCSE",
           also_labels=("maximum over the first k negatives",), hline_label="unweighted mean ± 2 MCSE"),),
    caption="The only part in which the two bounds differ: the softmax-weighted average over the first k negatives "
            "of ‖φ(x⁻_j) − ψ(x⁻_j)‖ (larger of the two endpoint weightings) and its maximum, means ± 2 MCSE. Green "
            "line and band: the unweighted mean of ‖φ(x⁻) − ψ(x⁻)‖ over all negatives ± 2 MCSE. The average stays at "
            "its k → ∞ limit (the Q(x,·)-average) for every k; the maximum grows like the maximum of k draws. Ratio "
            "E max / E average at the largest k ± jackknife MCSE in each title.", facet=("setting", "eps"))


def _ratios_page(doc: ReportDocument, ds: xr.Dataset) -> None:
    k = ds["k"].values.astype(float)
    S, E = ds.sizes["setting"], ds.sizes["eps"]
    shades = _eps_colors(E)
    cap = ("Top: E B_max / E B_avg against k, one curve per ε (±2 jackknife MCSE): 1 at k = 1 (one negative: "
           "average = max), then growing with k. Bottom: how conservative each bound is, E B / E|Δℓ| for B_avg "
           "(circles) and B_max (squares), and for the score-level bound B_score (triangles), ±2 jackknife MCSE, log "
           "scale.")
    fig, axes, ly = doc.figure("Ratios of means", 2, S, caption=cap)
    for i in range(S):
        top, bot = axes[0, i], axes[1, i]
        for j in range(E):
            c = shades[j]
            m, se = ds["ratio_max_avg"].values[i, j], ds["ratio_max_avg_mcse"].values[i, j]
            ok = np.isfinite(m)
            top.errorbar(k[ok], m[ok], yerr=2 * se[ok], fmt="o-", ms=3, lw=1, color=c)
            for name, mk in (("ratio_avg_dl", "o"), ("ratio_max_dl", "s"), ("ratio_score_dl", "^")):
                m, se = ds[name].values[i, j], ds[f"{name}_mcse"].values[i, j]
                ok = np.isfinite(m) & (m > 0)
                bot.errorbar(k[ok], m[ok], yerr=[np.minimum(2 * se[ok], 0.999 * m[ok]), 2 * se[ok]], fmt=mk + "-",
                             ms=3, lw=0.9, color=c, mfc="white" if mk == "^" else c)
        top.axhline(1.0, color=COLORS["ref"], ls="--", lw=0.8)
        _log_axes(top, k)
        ys = np.concatenate([ds[n].values[i].ravel() for n in ("ratio_avg_dl", "ratio_max_dl", "ratio_score_dl")])
        _log_axes(bot, k, ys)
        top.set(title=f"{ds['setting'].values[i]}: E B_max / E B_avg", xlabel=label(ds, "k"), ylabel="ratio")
        bot.set(title=f"{ds['setting'].values[i]}: E B / E |Δℓ|", xlabel=label(ds, "k"), ylabel="ratio")
    handles = [Line2D([], [], color=shades[j], marker="o", label=f"ε = {e:g}") for j, e in enumerate(ds["eps"].values)]
    handles += [_marker("0.3", "o", label="B_avg / |Δℓ|"), _marker("0.3", "s", label="B_max / |Δℓ|"),
                _marker("0.3", "^", hollow=True, label="B_score / |Δℓ|")]
    _legend(fig, ly, handles)
    doc.save(fig)


VALIDITY = FigurePage(
    "Validity on every tuple: the largest |Δℓ| / bound",
    tuple(Panel(f"tightness_{tag}", series="eps", level=1.0, level_label="equality (1)", ylim=(0.0, 1.1),
                title=f"{{facet}}: {name}, {{violations_{tag}_total:.0f}} violations", ylabel=f"max |Δℓ| / {name}")
          for tag, name in (("score", "B_score"), ("avg", "B_avg"), ("max", "B_max"))),
    caption=lambda ds: (
        f"Largest ratio |Δℓ| / B over all {int(ds.attrs.get('tuples_per_k', 0))} tuples at each k, one curve per ε: "
        "a bound holds on every tuple exactly when its curve stays at or below 1 (dashed line) — the violation "
        f"counts, which include a rounding allowance ({ds.attrs.get('tolerance', '?')}), are in the titles. The "
        "score-level bound B_score comes within a few per cent of equality on some tuples; B_avg and B_max, after "
        "bounding score differences by embedding distances, stay well below it."))


def _validity(doc: ReportDocument, ds: xr.Dataset) -> None:
    tags = [t for t in ("score", "avg", "max") if f"tightness_{t}" in ds]
    ds = ds.assign({f"violations_{t}_total": ds[f"violations_{t}"].sum(("eps", "k")) for t in tags})
    render(doc, ds, (dataclasses.replace(VALIDITY, panels=tuple(p for p in VALIDITY.panels
                                                                if p.var.split("_")[1] in tags)),))


def continuity_sections(doc: ReportDocument, ds: xr.Dataset) -> None:
    """The pages of the C4 study (all but provenance), for its own report or the validation report."""
    require(ds, _REQUIRED, "continuity")
    _title_page(doc, ds)
    _growth_page(doc, ds)
    end = {n: ds[f"ratio_{n}"].isel(k=-1) for n in ("negmax_negavg", "negmax_negavg_mcse") if f"ratio_{n}" in ds}
    render(doc, ds.assign({f"{n}_end": v for n, v in end.items()}), (BOUNDS, NEGATIVES))
    _ratios_page(doc, ds)
    _validity(doc, ds)
