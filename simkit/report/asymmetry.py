"""Report of the C7 study (``asymmetry``), declared with :mod:`simkit.report.spec`.

Pages: claim C7, the design (kernels, why each is not reversible, the non-reversibility statistics),
method, the C1 and C2 results and verdicts, the verdict rules and false-failure rates; per group of
up to three settings |gap_k| and |D_k| on log–log axes, k·gap_k and k·D_k against their constants,
residuals of both rate fits; the non-reversibility statistics against their exact values. The
provenance is added by :func:`simkit.report.study_report`.
"""

from __future__ import annotations

import numpy as np
import xarray as xr
from matplotlib.lines import Line2D
from scipy import stats

from simkit.report.document import COLORS, ReportDocument, _legend, _line, _marker, _v, format_pm
from simkit.report.spec import (RESIDUAL_KEY, ClaimTable, Failures, FigurePage, Panel, Table, Text, TitlePage, config,
                                fin, render, require, verdict_heading)

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


def _stat_cell(name: str):
    return lambda ds, i: (f"{format_pm(_v(ds, name, i), _v(ds, f'{name}_mcse', i))}\n"
                          f"exact {fin(_v(ds, f'{name}_exact', i), '+.4f')}")


DESIGN = Table((
    ("setting", "{facet}"), ("kernel M", _kernel_text), ("π", _pi_text), ("d", "{dim}"), ("τ", "{tau}"),
    ("symmetry", _symmetry_text), ("E[x₁x⁺₂ − x₂x⁺₁]\nMC ± MCSE", _stat_cell("asym_cross")),
    ("E[x⁺₁ − x₁]\nMC ± MCSE", _stat_cell("asym_shift")), ("queries / block (C2)", "{search_anchors}"),
), heading="Design: positive kernels that are not π-reversible", verdict=None,
    widths=(0.95, 1.7, 0.8, 0.25, 0.35, 1.45, 1.05, 1.05, 0.6))


def _design_note(ds: xr.Dataset) -> str:
    cfg = config(ds)
    return ("A π-reversible kernel makes (x, x⁺) exchangeable, so both statistics on the right vanish; either one "
        "being non-zero proves that M is not reversible. The rotated kernel vMF(Rx, κ_M) has E[x⁺ | x] = A_d(κ_M) R x, "
        "so E[x x⁺ᵀ] = E[x xᵀ] A_d Rᵀ is not symmetric when R ≠ Rᵀ; over uniform π it keeps π invariant (R preserves "
        "the uniform law) but is still not reversible. Spherical Brownian motion has a symmetric transition density "
        "h_t(x·y), but its invariant law is uniform: over a vMF π, x⁺ is more spread than x (π M ≠ π, E[x⁺₁] < E[x₁]), "
        "so π(dx) M(x, dy) ≠ π(dy) M(y, dx). Monte Carlo values: mean ± MCSE over blocks of "
        f"{cfg.get('n_asym', '?')} pairs each; exact values from E[x⁺ | x] = B x and the moments of π.")


def _method(ds: xr.Dataset) -> str:
    cfg, n_blocks = config(ds), ds.sizes.get("block", "?")
    neg = [str(s) for s, c in zip(ds["setting"].values, ds["c1_exact"].values) if c < 0]
    neg = f"in {', '.join(neg)}" if neg else "in no setting of this design"
    return (f"Method. Per setting and replicate block ({n_blocks} blocks): C1 with rate_k's streaming InfoNCE estimator "
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
        f"{n_blocks} − 1 degrees of freedom; values are estimate ± MCSE (or SE).")


def _rule(ds: xr.Dataset) -> str:
    alpha, n_blocks, n_set = float(ds.attrs.get("alpha", np.nan)), ds.sizes.get("block", 0), ds.sizes["setting"]
    # the c1 check's critical value: Student t on n_blocks - 1 df (simkit.stats.analysis.rate_verdict)
    zcrit = stats.t.isf(alpha / 2, n_blocks - 1) if np.isfinite(alpha) and n_blocks > 1 else np.nan
    return (f"Verdict rules (α = {alpha:g}, dataset attribute 'alpha'), per setting and claim: (i) the block means keep "
        f"one sign for k ≥ k_min (else no fit is attempted and the check fails); (ii) the level-{1 - alpha:g} "
        f"jackknife t-interval of the slope (second line of the CI column) contains −1; (iii) slope = −1/2 is "
        f"rejected at level α; for C1 also (iv) |z| ≤ t_(1−α/2, {n_blocks} − 1) = {zcrit:.2f} (Student t: "
        f"the jackknife SE has n_blocks − 1 degrees of freedom), z = (c1 estimate − c1 exact)/"
        f"√(MCSE² + MCSE_exact²) (c1 is exact by quadrature for isotropic kernels over a single vMF π and a Monte "
        f"Carlo value over x, with MCSE, for the rotated kernel). The d1 z-score is a diagnostic (d1 is derived here, "
        f"not in the paper). A setting passes C7 when it passes both. False-failure rate if C1 and C2 hold: (ii) and "
        f"(iv) fail with probability α each (nominal), (i) and (iii) only for lack of precision; so at most 2α for a "
        f"C1 check and α for a C2 check, and at most {1 - (1 - 2 * alpha) ** n_set * (1 - alpha) ** n_set:.2g} for "
        f"all {2 * n_set} checks together.")


def _results(var: str, claim: str, const: str, exact: str, what: str) -> Table:
    """The rate results of one analysis (``var`` = gap for C1, d for C2), its verdict ``verdict_<claim>``."""
    heading = verdict_heading(what, f"verdict_{claim}")

    sign = lambda ds, i: {1.0: "+", -1.0: "−", 0.0: "changes"}.get(float(_v(ds, f"{var}_sign", i)), "n/a")  # noqa
    return Table((
        ("setting", "{facet}"), ("k_min", f"{{{var}_k_min}}"), ("sign", sign),
        ("slope ± SE", f"{{{var}_slope±{var}_slope_se}}"),
        ("CI 95%\nCI of the verdict", f"[{{{var}_slope_ci_low:.4f}}, {{{var}_slope_ci_high:.4f}}]\n"
                                      f"[{{{var}_slope_verdict_low:.4f}}, {{{var}_slope_verdict_high:.4f}}]"),
        ("p-value of slope = −1/2", f"{{{var}_slope_p_half:.2g}}"),
        (f"{const} estimate ± MCSE", f"{{{const}_estimate±{const}_estimate_mcse}}"),
        (f"{exact} ± MCSE", f"{{{const}_exact±{const}_exact_mcse}}"),
        (f"z of {const}" + ("" if claim == "c1" else " (diag.)"), f"{{{const}_z:+.2f}}"),
    ), heading=heading, verdict=f"verdict_{claim}", widths=(1.0, 0.45, 0.45, 1.2, 1.3, 0.75, 1.15, 1.2, 0.6, 0.55))


def _rate_pages(var: str, claim: str, name: str, long: str, const: str, const2: str, exact: str) -> tuple:
    k = dict(fit_range=f"{var}_k_min", reason=f"verdict_{claim}_reason")
    kv = "k_gap" if var == "gap" else "k_d"
    constant = dict(band=f"{kv}_mcse", hline=f"{const}_exact", hline_band=f"{const}_exact_mcse",
                    fit=(f"{const}_estimate", f"{const2}_estimate"), label=f"k·{name} ± 2 MCSE",
                    fit_label=f"fit {const} + {const2}/k (k ≥ k_min)", hline_label=f"{exact} ± 2 MCSE", **k)
    note = (" d1 = E_x[m1/Z] − E_x Cov_M(m, s) is derived here by the delta method (a diagnostic, outside the "
            "verdict); it is a Monte Carlo value over x ~ π, x⁺ ~ M(x)." if var == "d" else
            " For the rotated kernel c1 is a Monte Carlo value over x (exact inner terms), hence its band.")
    return (
        FigurePage(
            f"{claim.upper()} for non-reversible kernels: |{long}| on log–log axes",
            (Panel(var, band=f"{var}_mcse", absolute=True, fit=f"fit_{var}_abs", slopes=(-1.0, -0.5), logy=True,
                   title=f"{{facet}}: slope {{{var}_slope±{var}_slope_se}}", label=f"{name} > 0, ± 2 MCSE",
                   fit_label="WLS fit (log k and 1/k)", **k),),
            caption=f"Points: |{name}| estimated with control variates, filled where {name} > 0 and hollow where "
                    f"{name} < 0; band and error bars ±2 MCSE (clipped at the axis). Red: the fitted log|{name}| = "
                    f"a + b log k + c/k over the shaded fit range k ≥ k_min; grey: reference slopes 1/k (dashed) and "
                    f"1/√k (dotted) through the data at k_min, the claim predicting the first.",
            subtitle="slope of the WLS fit ± jackknife SE in each panel title"),
        FigurePage(
            f"k · {name} approaches the {exact} ({claim.upper()})",
            (Panel(kv, title=f"{{facet}}: {const} {{{const}_estimate±{const}_estimate_mcse}}", **constant),
             Panel(kv, zoom=True, title=f"k ≥ {{{var}_k_min}}: {exact} {{{const}_exact±{const}_exact_mcse}}",
                   **constant)),
            caption=f"Top: k·{name} over the whole grid; bottom: the fit range k ≥ k_min enlarged. Band and error "
                    f"bars ±2 MCSE. Green: the {exact} with a band of ±2 MCSE (a line where it is exact). Red: the "
                    f"fitted {const} + {const2}/k from the WLS fit of {name} on 1/k and 1/k²." + note,
            subtitle=f"estimated {const} ± jackknife MCSE in each top panel title"),
    )


PAGES = (
    TitlePage(texts=(C7_TEXT,), then=(DESIGN, Text(_design_note), Text(_method, size=9.0),
                                      _results("gap", "c1", "c1", "exact c1", "C1 rate: gap_k = R_k − log k − CE"),
                                      _results("d", "c2", "d1", "predicted d1", "C2 rate: D_k = R_k − E CE(M_k, Q_k)"),
                                      Text(_rule), Failures(reasons=("verdict_c1_reason", "verdict_c2_reason")))),
    *_rate_pages("gap", "c1", "gap_k", "gap_k = R_k − log k − CE", "c1", "c2", "exact c1"),
    *_rate_pages("d", "c2", "D_k", "D_k = R_k − E CE(M_k, Q_k)", "d1", "d2", "predicted d1"),
    FigurePage(
        "Residuals of the rate fits",
        (Panel("resid_gap_rate", kind="residual", fit_range="gap_k_min", title="{facet}: C1 rate fit"),
         Panel("resid_d_rate", kind="residual", fit_range="d_k_min", title="{facet}: C2 rate fit")),
        caption="Standardised residuals (estimate − fit)/MCSE of the two rate fits, on the log scale: C1 (top, "
                "log|gap_k|) and C2 (bottom, log|D_k|). " + RESIDUAL_KEY),
)


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


def asymmetry_sections(doc, ds: xr.Dataset, study=None) -> None:
    """The pages of the C7 study (all but provenance), for its own report or the validation report."""
    require(ds, _REQUIRED, "asymmetry")
    render(doc, ds, PAGES[:1] + (ClaimTable(),) + PAGES[1:] + (_asymmetry_page,), study=study)
