"""PDF report of the C4 study (``studies/continuity.py``), read from its saved dataset alone.

Built from the generic pieces of :mod:`simkit.report` (:class:`~simkit.report.ReportDocument`,
:func:`~simkit.report.format_pm` and the plotting helpers); nothing is recomputed. The study's
``report()`` (:meth:`simkit.runner.Study.report`) adds these pages and the provenance pages.

Pages: (1) claim C4, the two bounds and their derivation, the checks per (setting, eps) with
verdicts, rules and false-failure rate; (2) mean |dl| and the three bounds against k; (3) the
negatives' term, softmax average against max; (4) ratios of means; (5) validity on every tuple
(largest |dl|/bound); (6) provenance.
"""

from __future__ import annotations

import math

import numpy as np
import xarray as xr
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.lines import Line2D

from simkit.report.document import (COLORS, MARGIN, MINUS, SMALL, TITLE, ReportDocument, _json_attr, _label, _legend,
                                    _line, _log_axes, _marker, format_pm)

__all__ = ["continuity_sections"]

C4_TEXT = (
    "Claim C4 (averaging continuity bound, Prop. 4). For two embeddings φ, ψ the InfoNCE losses ℓ_k(φ), ℓ_k(ψ) of a "
    "tuple (x, x⁺, x⁻_1..x⁻_k) differ by at most a bound built from a softmax-weighted average over the negatives of "
    "‖φ(x⁻_i) − ψ(x⁻_i)‖ (plus anchor and positive terms), because the Gâteaux derivative of the log-sum-exp along "
    "a perturbation is a softmax average, not a max. The standard Lipschitz argument uses the max over the k "
    "negatives instead, which grows with k; the averaging bound does not (THEORY.md, C4).")

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
             "slope_max_se", "slope_max_p", "ratio_max_avg", "verdict")


def _check(ds: xr.Dataset) -> None:
    missing = [v for v in _REQUIRED if v not in ds.variables]
    if missing:
        raise ValueError(f"'ds' must be a continuity dataset; it lacks {', '.join(map(repr, missing))} "
                         f"(open the output of 'simkit run continuity')")


def _g(x: float, fmt: str = ".3g") -> str:
    return format(float(x), fmt).replace("-", MINUS) if math.isfinite(float(x)) else "n/a"


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
            v = str(ds["verdict"].values[i, j])
            viol = " · ".join(str(int(ds[f"violations_{t}"].values[i, j].sum())) for t in ("score", "avg", "max"))
            rows.append([
                str(s), f"{e:g}", f"{n_tuples} × {k.size}", viol,
                f"{format_pm(ds['slope_avg'].values[i, j], ds['slope_avg_se'].values[i, j])}\n"
                f"(p = {_g(ds['slope_avg_p'].values[i, j], '.2g')})",
                _g(ds["slope_avg_detect80"].values[i, j], ".1e") if "slope_avg_detect80" in ds else "n/a",
                f"{format_pm(ds['slope_max'].values[i, j], ds['slope_max_se'].values[i, j])}\n"
                f"(p = {_g(ds['slope_max_p'].values[i, j], '.1e')})",
                format_pm(ds["ratio_max_avg"].values[i, j, -1], ds["ratio_max_avg_mcse"].values[i, j, -1]),
                format_pm(ds["ratio_negmax_negavg"].values[i, j, -1], ds["ratio_negmax_negavg_mcse"].values[i, j, -1])
                if "ratio_negmax_negavg" in ds else "n/a",
                _g(np.nanmax(ds["tightness_avg"].values[i, j]), ".3f") if "tightness_avg" in ds else "n/a",
                v.upper()])
            colors[(len(rows) - 1, len(header) - 1)] = COLORS.get(v, COLORS["fail"])
    return header, rows, [0.85, 0.35, 0.75, 0.85, 1.15, 0.8, 1.05, 0.95, 0.95, 0.6, 0.5], colors


def _title_page(doc: ReportDocument, ds: xr.Dataset) -> None:
    cfg = _json_attr(ds, "config", {})
    cfg = cfg if isinstance(cfg, dict) else {}
    nb = ds.sizes.get("block", "?")
    alpha = float(ds.attrs.get("alpha", np.nan))
    k = ds["k"].values
    n_cells = ds.sizes["setting"] * ds.sizes["eps"]
    if doc.fig is None or doc.y > MARGIN:  # a fresh page (e.g. from the validation report) is reused
        doc.new_page()
    doc.text(str(ds.attrs.get("title", "Claim C4")), size=TITLE, weight="bold", after=0.02)
    doc.text(f"simkit study '{ds.attrs.get('study', 'continuity')}' · dataset created {ds.attrs.get('created', '?')} · "
             f"seed {ds.attrs.get('seed', '?')} · commit {str(ds.attrs.get('git_commit', '?'))[:12]}"
             f"{' · quick design' if cfg.get('quick') else ''}", size=SMALL, color="0.3", after=0.12)
    doc.text(C4_TEXT, after=0.08)
    doc.text(BOUNDS_TEXT, size=SMALL, after=0.08)
    settings = ", ".join(f"{s} ({ds['family'].values[i]}, p = {int(ds['p'].values[i])}, d = {int(ds['d'].values[i])}, "
                         f"π {ds['pi'].values[i]}, τ = {float(ds['tau'].values[i]):g})"
                         for i, s in enumerate(ds["setting"].values)) if "family" in ds else ""
    doc.text(
        f"Method. Settings: {settings}. Each of {nb} independent blocks draws φ from its family's initialisation and, "
        f"for every ε in {{{', '.join(f'{e:g}' for e in ds['eps'].values)}}}, ψ = φ with parameters θ + ε‖θ‖e, e a "
        f"uniform random unit vector; then {cfg.get('block_anchors', '?')} tuples x ~ π, x⁺ ~ vMF(x, κ_M) with "
        f"K = {int(k[-1])} i.i.d. negatives each, and evaluates |Δℓ|, B_score, B_avg and B_max exactly for every "
        f"k = 1, 2, 4, …, K from the first k negatives (running log-sum-exp; common random numbers across k). Means "
        f"are over tuples and blocks, with MCSE = sd over blocks/√n_blocks; ratios are ratios of means with delete-one-"
        f"block jackknife MCSE. The slope of log E[B] on log k over k ≥ {cfg.get('k_fit_min', '?')} is a WLS fit "
        f"with jackknife SE (simkit.analysis.fit_rate), tested with Student t on {nb} − 1 degrees of freedom.",
        after=0.08)
    verdicts = [str(v) for v in ds["verdict"].values.ravel()]
    doc.heading(f"Checks and verdicts: {verdicts.count('pass')} of {n_cells} (setting, ε) cells pass")
    header, rows, widths, colors = _checks_table(ds)
    doc.table(header, rows, widths, colors=colors, size=7.0)
    doc.text(
        f"Verdict rule (α = {alpha:g} per test, dataset attribute 'alpha'). A cell passes when (i) no tuple violates "
        f"B_score, B_avg or B_max at any k (allowance for rounding: {ds.attrs.get('tolerance', '?')}); (ii) the "
        f"two-sided test of zero slope for E B_avg is not rejected at level α; (iii) the one-sided test of H0: slope "
        f"≤ 0 for E B_max rejects at level α. False-failure rate: (i) is a deterministic check of proved "
        f"inequalities (its own claim row, with no false-failure rate: it fails only if a bound or the code is "
        f"wrong; the allowance is ~1000 times the rounding error); (ii) fails with probability α per cell when E B_avg is flat "
        f"over the fit range; (iii) fails only for lack of power (p-values above are far below α). Overall at most "
        f"1 − (1 − α)^{n_cells} = {1 - (1 - alpha) ** n_cells:.2g}. Power of (ii): the column 'slope detected' is the "
        f"slope the test detects with probability 0.8 (critical t + z_0.8 standard errors); the max bound's slopes "
        f"exceed it by one to two orders of magnitude. Intervals and p-values are functions of the estimates and SEs "
        f"shown and carry no separate MCSE.", size=SMALL)
    doc.text(_findings(ds), size=SMALL)
    errs = ds["cell_error"].values if "cell_error" in ds else [""] * ds.sizes["setting"]
    bad = [(i, j) for i in range(ds.sizes["setting"]) for j in range(ds.sizes["eps"])
           if str(ds["verdict"].values[i, j]) != "pass"]
    if bad or any(str(e) for e in errs):
        doc.heading("Failures and task errors")
        rows = [[str(ds["setting"].values[i]), f"{ds['eps'].values[j]:g}",
                 f"{ds['verdict'].values[i, j]}: {ds['verdict_reason'].values[i, j] or '—'}", str(errs[i]) or "—"]
                for i, j in bad]
        rows += [[str(ds["setting"].values[i]), "all", "task error", str(e)]
                 for i, e in enumerate(errs) if str(e) and not any(b[0] == i for b in bad)]
        doc.table(["setting", "ε", "verdict: why", "task errors (variable cell_error)"], rows, [1.0, 0.4, 4.0, 4.0],
                  colors={(r, 0): COLORS["fail"] for r in range(len(rows))})
    else:
        doc.text("All cells pass; no task raised an error.", size=SMALL, weight="bold")


def _findings(ds: xr.Dataset) -> str:
    """The findings paragraph, with its numbers read from the dataset."""
    kmax = int(ds["k"].values[-1])
    nv = int(sum(ds[f"violations_{t}"].values.sum() for t in ("score", "avg", "max")))
    rng = lambda name, fmt=".3g": (f"{_g(np.nanmin(ds[name].values), fmt)}–"  # noqa: E731
                                   f"{_g(np.nanmax(ds[name].values), fmt)}")
    end = lambda name: ds[name].values[..., -1]  # noqa: E731
    n_flat_rej = int(np.sum(ds["slope_avg_p"].values < float(ds.attrs.get("alpha", np.nan))))
    out = [f"Findings to read with the figures. {'Both bounds hold on every tuple' if nv == 0 else f'{nv} violations'} "
           f"({int(ds.attrs.get('tuples_per_k', 0))} tuples at each of {ds.sizes['k']} values of k, for every setting "
           f"and ε).",
           f"The mean averaging bound is flat in k (slopes {rng('slope_avg', '.1e')}; the test of zero slope rejects "
           f"in {n_flat_rej} of {ds['slope_avg_p'].size} cells), while the "
           f"mean max bound grows with slope {rng('slope_max')} per unit of log k, like the maximum of k draws of "
           f"‖φ(x⁻) − ψ(x⁻)‖. At k = {kmax}, E B_max / E B_avg = {_g(np.nanmin(end('ratio_max_avg')))}–"
           f"{_g(np.nanmax(end('ratio_max_avg')))}: the shared anchor/positive term 2‖Δu‖ + ‖Δv‖ dominates both "
           f"bounds here; on the negatives' term alone the max is {_g(np.nanmin(end('ratio_negmax_negavg')))}–"
           f"{_g(np.nanmax(end('ratio_negmax_negavg')))} times the softmax average (page 3), and the ratio keeps "
           f"growing with k.",
           f"B_avg is conservative by a factor {_g(np.nanmin(end('ratio_avg_dl')))}–"
           f"{_g(np.nanmax(end('ratio_avg_dl')))} against the mean |Δℓ| (the step |w′_j − v′| ≤ 2 and the 1/τ), while "
           f"the score-level bound B_score is within a factor {_g(np.nanmin(end('ratio_score_dl')))}–"
           f"{_g(np.nanmax(end('ratio_score_dl')))} and nearly attained on some tuples (largest |Δℓ|/B_score "
           f"1 − {_g(1 - np.nanmax(ds['tightness_score'].values), '.1e')}, page 5)."]
    return " ".join(out)


# ------------------------------------------------------------------------------------------------
# figure pages

def _errorbars(ax: Axes, k: np.ndarray, m: np.ndarray, se: np.ndarray, color, marker="o", hollow=False,
               label=None, ls="-") -> None:
    ok = np.isfinite(m) & (m > 0)
    lower = np.minimum(2 * se[ok], 0.999 * m[ok])  # a log axis shows positive values only
    ax.errorbar(k[ok], m[ok], yerr=[lower, 2 * se[ok]], fmt=marker, ls=ls, ms=3.2, lw=1.0, color=color,
                mfc="white" if hollow else color, label=label, zorder=4)


def _empty(ax: Axes, ds: xr.Dataset, i: int, j: int) -> bool:
    if np.any(np.isfinite(ds["bound_avg"].values[i, j])):
        return False
    ax.text(0.5, 0.5, f"no estimates ({ds['verdict_reason'].values[i, j] or 'failed'})", transform=ax.transAxes,
            ha="center", va="center", fontsize=SMALL, color=COLORS["fit"], wrap=True)
    ax.set(xticks=[], yticks=[])
    return True


_ROLE = {"dl": ("black", "o", True, "E |Δℓ|"), "bound_score": (COLORS["band"], "^", False, "E B_score (1)"),
         "bound_avg": (COLORS["data"], "o", False, "E B_avg (AVG)"), "bound_max": (COLORS["fit"], "s", False,
                                                                                    "E B_max (MAX)")}


def _bounds_page(doc: ReportDocument, ds: xr.Dataset) -> None:
    k = ds["k"].values.astype(float)
    S, E = ds.sizes["setting"], ds.sizes["eps"]
    cap = ("Means over tuples and pairs of |ℓ_k(ψ) − ℓ_k(φ)| and of the three bounds, ±2 MCSE (mostly hidden by the "
           "markers), on log–log axes: rows are settings, columns the perturbation size ε. The slope of log E[B] "
           "on log k (WLS over the fit range, jackknife SE) is in each panel title for B_avg and B_max. The ordering "
           "E|Δℓ| ≤ E B_score ≤ E B_avg ≤ E B_max holds tuple by tuple, not only on average.")
    fig, axes, ly = doc.figure("Loss differences and their bounds against k", S, E, caption=cap,
                               subtitle="averaging bound B_avg flat in k, max bound B_max growing")
    for i in range(S):
        for j in range(E):
            ax = axes[i, j]
            if _empty(ax, ds, i, j):
                continue
            ys = []
            for name, (c, mk, hollow, _) in _ROLE.items():
                m, se = ds[name].values[i, j], ds[f"{name}_mcse"].values[i, j]
                _errorbars(ax, k, m, se, c, mk, hollow)
                ys.append(m)
            _log_axes(ax, k, *ys)
            ax.set_title(f"{ds['setting'].values[i]}, ε = {ds['eps'].values[j]:g}: slopes avg "
                         f"{_g(ds['slope_avg'].values[i, j], '.1e')}, max {_g(ds['slope_max'].values[i, j], '.3f')}",
                         fontsize=8)
            ax.set(xlabel=_label(ds, "k"), ylabel="nat")
    _legend(fig, ly, [Line2D([], [], marker=mk, color=c, mfc="white" if h else c, label=lab)
                      for c, mk, h, lab in _ROLE.values()])
    doc.save(fig)


def _negatives_page(doc: ReportDocument, ds: xr.Dataset) -> None:
    k = ds["k"].values.astype(float)
    S, E = ds.sizes["setting"], ds.sizes["eps"]
    cap = ("The only part in which the two bounds differ: the softmax-weighted average over the first k negatives of "
           "‖φ(x⁻_j) − ψ(x⁻_j)‖ (larger of the two endpoint weightings; blue) and its maximum (red), means ±2 MCSE. "
           "Grey line: the unweighted mean of ‖φ(x⁻) − ψ(x⁻)‖ over all negatives (its MCSE as a band). The average "
           "stays at its k → ∞ limit (the Q(x,·)-average) for every k; the maximum grows like the maximum of k "
           "draws. Ratio E max / E average at the largest k ± jackknife MCSE in each title.")
    fig, axes, ly = doc.figure("The negatives' term: softmax average against maximum", S, E, caption=cap)
    for i in range(S):
        for j in range(E):
            ax = axes[i, j]
            if _empty(ax, ds, i, j):
                continue
            avg, mx = ds["neg_avg"].values[i, j], ds["neg_max"].values[i, j]
            plain = float(ds["neg_plain"].values[i, j]) if "neg_plain" in ds else np.nan
            pse = float(ds["neg_plain_mcse"].values[i, j]) if "neg_plain_mcse" in ds else np.nan
            if math.isfinite(plain):
                ax.axhline(plain, color=COLORS["ref"], lw=0.9, zorder=1)
                if math.isfinite(pse):
                    ax.axhspan(plain - 2 * pse, plain + 2 * pse, color=COLORS["ref"], alpha=0.2, lw=0, zorder=0)
            _errorbars(ax, k, avg, ds["neg_avg_mcse"].values[i, j], COLORS["data"], "o")
            _errorbars(ax, k, mx, ds["neg_max_mcse"].values[i, j], COLORS["fit"], "s")
            _log_axes(ax, k)
            lo = np.nanmin(np.concatenate([avg, [plain]])) * 0.8
            ax.set_ylim(max(lo, 0), np.nanmax(mx) * 1.1)
            r = ds["ratio_negmax_negavg"].values[i, j, -1] if "ratio_negmax_negavg" in ds else np.nan
            rs = ds["ratio_negmax_negavg_mcse"].values[i, j, -1] if "ratio_negmax_negavg" in ds else np.nan
            ax.set_title(f"{ds['setting'].values[i]}, ε = {ds['eps'].values[j]:g}: max/avg {format_pm(r, rs)}",
                         fontsize=8)
            ax.set(xlabel=_label(ds, "k"), ylabel="‖φ(x⁻) − ψ(x⁻)‖")
    _legend(fig, ly, [_marker(COLORS["data"], label="softmax average over the first k negatives"),
                      _marker(COLORS["fit"], "s", label="maximum over the first k negatives"),
                      _line(COLORS["ref"], label="unweighted mean (all negatives) ± 2 MCSE")])
    doc.save(fig)


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
        top.set(title=f"{ds['setting'].values[i]}: E B_max / E B_avg", xlabel=_label(ds, "k"), ylabel="ratio")
        bot.set(title=f"{ds['setting'].values[i]}: E B / E |Δℓ|", xlabel=_label(ds, "k"), ylabel="ratio")
    handles = [Line2D([], [], color=shades[j], marker="o", label=f"ε = {e:g}") for j, e in enumerate(ds["eps"].values)]
    handles += [_marker("0.3", "o", label="B_avg / |Δℓ|"), _marker("0.3", "s", label="B_max / |Δℓ|"),
                _marker("0.3", "^", hollow=True, label="B_score / |Δℓ|")]
    _legend(fig, ly, handles)
    doc.save(fig)


def _validity_page(doc: ReportDocument, ds: xr.Dataset) -> None:
    k = ds["k"].values.astype(float)
    S, E = ds.sizes["setting"], ds.sizes["eps"]
    shades = _eps_colors(E)
    n_tuples = int(ds.attrs.get("tuples_per_k", 0))
    cap = (f"Largest ratio |Δℓ| / B over all {n_tuples} tuples at each k, one curve per ε: a bound holds on every "
           "tuple exactly when its curve stays at or below 1 (dashed line) — the violation counts, which include a "
           f"rounding allowance ({ds.attrs.get('tolerance', '?')}), are in the titles. The score-level bound B_score "
           "comes within a few per cent of equality on some tuples; B_avg and B_max, after bounding score differences "
           "by embedding distances, stay well below it.")
    fig, axes, ly = doc.figure("Validity on every tuple: the largest |Δℓ| / bound", S, 3, caption=cap)
    for i in range(S):
        for c, (tag, name) in enumerate((("score", "B_score"), ("avg", "B_avg"), ("max", "B_max"))):
            ax = axes[i, c]
            var = f"tightness_{tag}"
            if var not in ds:
                continue
            for j in range(E):
                t = ds[var].values[i, j]
                ok = np.isfinite(t)
                ax.plot(k[ok], t[ok], "o-", ms=3, lw=1, color=shades[j])
            ax.axhline(1.0, color=COLORS["fit"], ls="--", lw=0.9)
            _log_axes(ax, k)
            ax.set_ylim(0, 1.1)
            nv = int(ds[f"violations_{tag}"].values[i].sum())
            ax.set(title=f"{ds['setting'].values[i]}: {name}, {nv} violations", xlabel=_label(ds, "k"),
                   ylabel=f"max |Δℓ| / {name}")
    _legend(fig, ly, [Line2D([], [], color=shades[j], marker="o", label=f"ε = {e:g}")
                      for j, e in enumerate(ds["eps"].values)] + [_line(COLORS["fit"], "--", label="equality (1)")])
    doc.save(fig)


def continuity_sections(doc: ReportDocument, ds: xr.Dataset) -> None:
    """The pages of the C4 study (all but provenance), for its own report or the validation report."""
    _check(ds)
    _title_page(doc, ds)
    _bounds_page(doc, ds)
    _negatives_page(doc, ds)
    _ratios_page(doc, ds)
    _validity_page(doc, ds)
