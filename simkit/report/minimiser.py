"""Report of the minimiser study (``minimiser``, docs/theory.md §17), declared with :mod:`simkit.report.spec`.

Pages: the claim, method, exact results and verdicts, the claim checks, failures; the exact excess
CE(θ_k) − CE(θ*) on log–log axes with the −2 and −1 reference slopes and ½gᵀH⁻¹g/k²; k²·excess
against ½gᵀH⁻¹g; k(θ_k − θ*) against −H⁻¹g; the empirical minimiser's excess against n beside the
exact k-bias (the crossover), with its table. The provenance is added by
:func:`simkit.report.study_report`.
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from simkit.report.document import _json_attr, _legend, _line, _marker, format_pm
from simkit.report.spec import (ClaimTable, Failures, FigurePage, Panel, Table, Text, TitlePage, fin, render,
                                require, verdict_heading)

__all__ = ["minimiser_sections"]

CLAIM_TEXT = (
    "Claim M1 (docs/theory.md §17, beyond the paper). The InfoNCE loss at a fixed embedding is biased by c1/k, but "
    "what training returns is the minimiser θ_k of R_k over a class. Where CE has an interior minimum θ*, with "
    "H = ∇²CE(θ*) and g = ∇c1(θ*), θ_k − θ* = −H⁻¹g/k + O(k⁻²) and the excess cross-entropy CE(θ_k) − CE(θ*) = "
    "½gᵀH⁻¹g/k² + O(k⁻³): the trained embedding is far less biased than the loss value. When the class contains "
    "the log density ratio (well specified), θ_k = θ* at every k (the optimal critic is the density ratio for every "
    "k). With n training tuples, the empirical minimiser adds a sampling excess of order 1/n, which hides the k-bias "
    "unless n exceeds a crossover n of order k².")

_REQUIRED = ("setting", "k", "excess", "k2_excess", "k_shift", "excess_const_exact", "shift_const", "excess_slope",
             "emp_excess", "emp_excess_mcse", "emp_bias", "verdict")


def _k_fit_min(ds: xr.Dataset) -> float:
    cfg = _json_attr(ds, "config", {})
    return float(cfg.get("k_fit_min", np.nan)) if isinstance(cfg, dict) else np.nan


def _method(ds: xr.Dataset) -> str:
    k = ds["k"].values
    return (
        f"Method. π sits on the atoms of a Fibonacci lattice on S²; each class is linear, s_θ = Σ θ_p F_p with "
        f"features x·y and (x·y)². R_k(θ) and ∇R_k(θ) are exact (finite-set Frullani identity, simkit.exact.minimiser); "
        f"θ_k is the root of ∇R_k (MINPACK, xtol 1e-13) for k = {int(k[0])}, …, {int(k[-1])}, θ* the Newton minimiser of "
        f"the closed-form CE. The log-log slope of the excess is read from local slopes on k ≥ "
        f"{fin(_k_fit_min(ds), 'g')}; the limits of k²·excess and k(θ_k − θ*) from one "
        f"Richardson step on the two largest k. The empirical part draws, in each of {ds.sizes.get('block', '?')} "
        f"independent blocks and for each (k, n), n fresh tuples (x ~ π, x⁺ ~ M(x, ·), k negatives ~ π) and minimises "
        f"the empirical risk (Newton); its excess CE(θ̂) − CE(θ*) is exact given θ̂. Estimates are shown ± MCSE "
        f"(sd over blocks / √blocks); exact quantities carry none.")


def _rule(ds: xr.Dataset) -> str:
    a = ds.attrs
    return (
        f"Rules (protocols/minimiser.md). Deterministic, as the quantities are exact: well specified, max |θ_k − θ0| ≤ "
        f"{a.get('well_tol', '?')} and |g| ≤ {a.get('well_tol', '?')}; misspecified, the extrapolated local slope of the "
        f"excess within −2 ± {a.get('slope_tol', '?')}, every local slope on the fit range within −2 ± "
        f"{a.get('slope_band', '?')}, and the limits of k²·excess and k(θ_k − θ*) within {a.get('const_rtol', '?')} "
        f"(relative) of ½gᵀH⁻¹g and −H⁻¹g. Statistical: per class and k, θ̃ = (n2θ̂_{{n2}} − n1θ̂_{{n1}})/(n2 − n1) on "
        f"the two largest n removes θ̂'s O(1/n) bias; a Hotelling test (F reference) of E θ̃ = θ_k rejects at p < α/m, "
        f"α = {a.get('alpha', '?')} over all m tests (Bonferroni: family-wise false-failure rate ≤ α). The same test "
        f"against θ* (p*) shows the power to tell θ_k from θ*.")


EXACT = Table((
    ("class", "{facet}"), ("description", "{description}"), ("P", "{n_params}"),
    ("θ*", lambda ds, i: ", ".join(fin(v, ".5g") for v in ds["theta_star"].values[i] if np.isfinite(v))),
    ("½gᵀH⁻¹g\nlim k²·excess", "{excess_const_exact:.6g}\n{excess_const_limit:.6g}"),
    ("−H⁻¹g\nlim k(θ_k − θ*)", lambda ds, i: "\n".join(
        ", ".join(fin(v, ".5g") for v in ds[n].values[i] if np.isfinite(v)) for n in ("shift_const", "shift_limit"))),
    ("slope [local range]\n→ limit", "{excess_slope:.4f} [{excess_slope_low:.4f}, {excess_slope_high:.4f}]\n"
                                     "→ {excess_slope_limit:.4f}"),
    ("max |θ_k − θ0|", "{well_max_dev:.2g}"),
), heading=verdict_heading("Exact results and verdicts", noun="classes"),
    widths=(1.1, 2.3, 0.25, 0.8, 0.95, 1.1, 1.3, 0.6), size=7.0)


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
    doc.text("Crossover n: the sampling part n·(E excess − k-bias) at the largest n divided by the k-bias, ± MCSE "
             "(delta method): below it, sampling error dominates the excess; above it, the k-bias does. NaN where the "
             "class is well specified (no k-bias). p: Hotelling test of E θ̃ = θ_k (the rule); p*: the same against θ*.",
             size=7.0)


def _shift_page(doc, ds: xr.Dataset) -> None:
    """k(θ_k − θ*) per parameter against −H⁻¹g, one panel per class."""
    names = ds["setting"].values
    n = names.size
    ncols = min(n, 3)
    nrows = int(np.ceil(n / ncols))
    fig, axes, ly = doc.figure(
        "The shift: k (θ_k − θ*) approaches −H⁻¹g", nrows, ncols,
        caption="Lines with points: k(θ_k − θ*) for each parameter (exact); dashed lines of the same colour: the "
                "predicted limit −H⁻¹g (closed form). Well-specified classes: θ_k = θ* to rounding, so k(θ_k − θ*) "
                "is at the level of 1e-10 or below. Below the expansion scale, k(θ_k − θ*) is not monotone.")
    k = ds["k"].values
    colors = ("C0", "C3", "C2")
    for idx, ax in enumerate(axes.ravel()):
        if idx >= n:
            ax.set_visible(False)
            continue
        for p in range(ds.sizes["param"]):
            y = ds["k_shift"].values[idx, :, p]
            if not np.isfinite(y).any():
                continue
            ax.plot(k, y, "o-", color=colors[p % 3], ms=3, lw=1)
            ax.axhline(ds["shift_const"].values[idx, p], color=colors[p % 3], ls="--", lw=1)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("k")
        ax.set_ylabel("k (θ_k − θ*)")
        ax.set_title(str(names[idx]), fontsize=8.5)
    _legend(fig, ly, [_marker("C0", label="θ1"), _marker("C3", label="θ2"),
                      _line("0.3", "--", label="−H⁻¹g (predicted limit)")])
    doc.save(fig)


def _crossover_page(doc, ds: xr.Dataset) -> None:
    """Empirical excess against n, one curve per k, beside the exact k-bias of that k."""
    names = ds["setting"].values
    n = names.size
    ncols = min(n, 3)
    nrows = int(np.ceil(n / ncols))
    fig, axes, ly = doc.figure(
        "The empirical crossover: sampling error (order 1/n) against the k-bias (order 1/k²)", nrows, ncols,
        caption="Points: E CE(θ̂_{n,k}) − CE(θ*) of the empirical minimiser over n tuples with k negatives, error bars "
                "±2 MCSE, one colour per k. Dashed lines of the same colour: the exact k-bias CE(θ_k) − CE(θ*), which "
                "the empirical excess approaches from above as n grows; grey dotted: a 1/n reference through the "
                "first point. Where the points meet their dashed line, the k-bias dominates (beyond the crossover n); "
                "to the left, sampling error does. Well-specified classes have no k-bias (no dashed line).")
    ns = ds["n"].values.astype(float)
    colors = ("C0", "C1", "C2", "C3", "C4")
    for idx, ax in enumerate(axes.ravel()):
        if idx >= n:
            ax.set_visible(False)
            continue
        for j, k in enumerate(ds["k_emp"].values):
            c = colors[j % len(colors)]
            y, se = ds["emp_excess"].values[idx, j], ds["emp_excess_mcse"].values[idx, j]
            ok = np.isfinite(y) & (y > 0)
            ax.errorbar(ns[ok], y[ok], yerr=np.minimum(2 * se[ok], 0.95 * y[ok]), fmt="o-", color=c, ms=3, lw=1,
                        capsize=2)
            b = ds["emp_bias"].values[idx, j]
            if b > 0 and not int(ds["well_specified"].values[idx]):
                ax.axhline(b, color=c, ls="--", lw=1)
            if j == 0 and ok.any():
                first = int(np.nonzero(ok)[0][0])
                ax.plot(ns, y[first] * ns[first] / ns, ":", color="0.5", lw=1)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("n (training tuples)")
        ax.set_ylabel("excess CE, nats")
        ax.set_title(str(names[idx]), fontsize=8.5)
    _legend(fig, ly, [_marker(colors[j % len(colors)], label=f"k = {int(k)}") for j, k in enumerate(ds["k_emp"].values)]
            + [_line("0.3", "--", label="exact k-bias"), _line("0.5", ":", label="1/n")])
    doc.save(fig)


_FIT = dict(fit_range="k_fit_min")
PAGES = (
    TitlePage(texts=(CLAIM_TEXT, _method), then=(EXACT, Text(_rule), ClaimTable(), Failures())),
    FigurePage(
        "The exact excess CE(θ_k) − CE(θ*) on log–log axes: the rate is 1/k², not 1/k",
        (Panel("excess", reference=("zero", "zero", "excess_const_exact"), slopes=(-2.0, -1.0), logy=True,
               absolute=True, title="{facet}: slope {excess_slope:.4f} → {excess_slope_limit:.4f}",
               label="|CE(θ_k) − CE(θ*)| (exact)", reference_label="½gᵀH⁻¹g / k²", **_FIT),
         Panel("k2_excess", hline="excess_const_exact", title="{facet}: ½gᵀH⁻¹g = {excess_const_exact:.5g}",
               label="k² · excess (exact)", hline_label="½gᵀH⁻¹g (closed form)", **_FIT)),
        caption="Top: the exact excess (hollow markers where it is negative: well-specified classes, where it is zero "
                "to rounding, 1e−20 or below); grey reference slopes 1/k² (dashed) and 1/k (dotted) through the first "
                "point of the shaded fit range; black: the predicted ½gᵀH⁻¹g/k². Bottom: k²·excess against its "
                "predicted limit ½gᵀH⁻¹g (green). No Monte Carlo: there are no error bars.",
        subtitle="least-squares slope on the fit range → Richardson limit of the local slope in each panel title"),
    _shift_page,
    _crossover_table,
    _crossover_page,
)


def _derived(ds: xr.Dataset) -> xr.Dataset:
    """Display quantities from the saved variables: a zero coefficient and the fit range's first k."""
    out = ds.copy()
    out["zero"] = xr.zeros_like(ds["excess_const_exact"]).assign_attrs(long_name="zero", units="1")
    out["k_fit_min"] = xr.full_like(ds["excess_const_exact"], _k_fit_min(ds)).assign_attrs(long_name="first k of the fit",
                                                                                     units="1")
    return out


def minimiser_sections(doc, ds: xr.Dataset, study=None) -> None:
    """The pages of the minimiser study (all but provenance)."""
    require(ds, _REQUIRED, "minimiser")
    render(doc, _derived(ds), PAGES, study=study)
