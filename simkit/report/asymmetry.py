"""Report of the C7 study (``asymmetry``), declared: the design (kernels, why each is not reversible),
the C1 and C2 results and rules, |gap_k| and |D_k| with their fits and constants, residuals, and the
non-reversibility statistics against their exact values; prose in ``pages/asymmetry.md``."""

from __future__ import annotations

import numpy as np
import xarray as xr

from simkit.report.spec import (RESIDUAL_KEY, ClaimTable, Failures, FigurePage, Panel, Table, Text, TitlePage, prose,
                                verdict_heading)

P = prose("asymmetry")


def _kernel_text(ds: xr.Dataset, i: int) -> str:
    v = lambda name: ds[name].values[i]  # noqa: E731
    if str(v("kernel")) == "rotated":
        return f"vMF(Rx, κ_M = {float(v('kappa_m')):g}), R: {float(v('angle')):.3g} rad in (e₁, e₂)"
    if str(v("kernel")) == "brownian":
        return f"Brownian motion, t = {float(v('t')):g}"
    return f"vMF(x, κ_M = {float(v('kappa_m')):g}) (control)"


def _pi_text(ds: xr.Dataset, i: int) -> str:
    fam = str(ds["pi"].values[i])
    return fam if fam == "uniform" else f"{fam}, κ_π = {float(ds['kappa_pi'].values[i]):g}"


def _symmetry_text(ds: xr.Dataset, i: int) -> str:
    """Why the kernel is (not) π-reversible, from the exact statistics."""
    cross, shift = float(ds["asym_cross_exact"].values[i]), float(ds["asym_shift_exact"].values[i])
    if abs(cross) < 1e-12 and abs(shift) < 1e-12:
        return "π-reversible (control)"
    sym = "M(x, y) = M(y, x)" if str(ds["kernel"].values[i]) == "brownian" else "R ≠ Rᵀ"
    return f"not reversible: {'π-invariant' if abs(shift) < 1e-12 else 'π M ≠ π'}; {sym}"


DESIGN = Table((("setting", "facet"), ("kernel M", _kernel_text), ("π", _pi_text), ("d", "dim"), ("τ", "tau"),
    ("symmetry", _symmetry_text),
    ("E[x₁x⁺₂ − x₂x⁺₁]\nMC ± MCSE", "{asym_cross±asym_cross_mcse}\nexact {asym_cross_exact:+.4f}"),
    ("E[x⁺₁ − x₁]\nMC ± MCSE", "{asym_shift±asym_shift_mcse}\nexact {asym_shift_exact:+.4f}"),
    ("queries / block (C2)", "search_anchors")), heading="Design: positive kernels that are not π-reversible",
    verdict=None)


def _results(var: str, claim: str, const: str, exact: str, what: str) -> Table:
    """The rate results of one analysis (``var`` = gap for C1, d for C2), its verdict ``verdict_<claim>``."""
    heading = verdict_heading(what, f"verdict_{claim}")

    sign = lambda ds, i: {1.0: "+", -1.0: "−", 0.0: "changes"}.get(float(ds[f"{var}_sign"].values[i]), "n/a")  # noqa
    return Table((("setting", "facet"), ("k_min", f"{{{var}_k_min}}"), ("sign", sign),
        ("slope ± SE", f"{{{var}_slope±{var}_slope_se}}"),
        ("CI 95%\nCI of the verdict", f"[{{{var}_slope_ci_low:.4f}}, {{{var}_slope_ci_high:.4f}}]\n"
                                      f"[{{{var}_slope_verdict_low:.4f}}, {{{var}_slope_verdict_high:.4f}}]"),
        ("p-value of slope = −1/2", f"{{{var}_slope_p_half:.2g}}"),
        (f"{const} estimate ± MCSE", f"{{{const}_estimate±{const}_estimate_mcse}}"),
        (f"{exact} ± MCSE", f"{{{const}_exact±{const}_exact_mcse}}"),
        (f"z of {const}" + ("" if claim == "c1" else " (diag.)"), f"{{{const}_z:+.2f}}")), heading=heading,
        verdict=f"verdict_{claim}")


def _rate_pages(var: str, claim: str, name: str, long: str, const: str, const2: str, exact: str) -> tuple:
    k = dict(fit_range=f"{var}_k_min", reason=f"verdict_{claim}_reason")
    kv = "k_gap" if var == "gap" else "k_d"
    constant = dict(band=f"{kv}_mcse", hline=f"{const}_exact", hline_band=f"{const}_exact_mcse",
                    fit=(f"{const}_estimate", f"{const2}_estimate"), label=f"k·{name} ± 2 MCSE",
                    fit_label=f"fit {const} + {const2}/k (k ≥ k_min)", hline_label=f"{exact} ± 2 MCSE", **k)
    return (
        FigurePage(
            f"{claim.upper()} for non-reversible kernels: |{long}| on log–log axes",
            (Panel(var, band=f"{var}_mcse", absolute=True, fit=f"fit_{var}_abs", slopes=(-1.0, -0.5), logy=True,
                   title=f"{{facet}}: slope {{{var}_slope±{var}_slope_se}}", label=f"{name} > 0, ± 2 MCSE",
                   fit_label="WLS fit (log k and 1/k)", **k),),
            caption=P[f"{var}_caption"],
            subtitle="slope of the WLS fit ± jackknife SE in each panel title"),
        FigurePage(
            f"k · {name} approaches the {exact} ({claim.upper()})",
            (Panel(kv, title=f"{{facet}}: {const} {{{const}_estimate±{const}_estimate_mcse}}", **constant),
             Panel(kv, zoom=True, title=f"k ≥ {{{var}_k_min}}: {exact} {{{const}_exact±{const}_exact_mcse}}",
                   **constant)),
            caption=P[f"k{var}_caption"],
            subtitle=f"estimated {const} ± jackknife MCSE in each top panel title"),
    )


PAGES = (
    TitlePage(texts=(P["claim"],), then=(DESIGN, Text(P["design_note"]), Text(P["method"], size=9.0),
                                      _results("gap", "c1", "c1", "exact c1", "C1 rate: gap_k = R_k − log k − CE"),
                                      _results("d", "c2", "d1", "predicted d1", "C2 rate: D_k = R_k − E CE(M_k, Q_k)"),
                                      Text(P["rule"]), Failures(reasons=("verdict_c1_reason", "verdict_c2_reason")))),
    ClaimTable(),
    *_rate_pages("gap", "c1", "gap_k", "gap_k = R_k − log k − CE", "c1", "c2", "exact c1"),
    *_rate_pages("d", "c2", "D_k", "D_k = R_k − E CE(M_k, Q_k)", "d1", "d2", "predicted d1"),
    FigurePage(
        "Residuals of the rate fits",
        (Panel("resid_gap_rate", kind="residual", fit_range="gap_k_min", title="{facet}: C1 rate fit"),
         Panel("resid_d_rate", kind="residual", fit_range="d_k_min", title="{facet}: C2 rate fit")),
        caption=P["residual_caption"] + " " + RESIDUAL_KEY),
    FigurePage(
        "The positive kernels are not π-reversible: two exchangeability statistics",
        tuple(Panel(v, kind="forest", x="setting", band=f"{v}_mcse", reference=f"{v}_exact", level=0.0, title=t,
                    ylabel=t, label="Monte Carlo ± 2 MCSE", reference_label="exact value",
                    level_label="0: reversible kernel")
              for v, t in (("asym_cross", "E[x₁x⁺₂ − x₂x⁺₁]"), ("asym_shift", "E[x⁺₁ − x₁]"))),
        caption=P["symmetry_caption"], subtitle="Monte Carlo estimate ± 2 MCSE against the exact value, per setting",
        facet=None),
)


def derive(ds: xr.Dataset) -> xr.Dataset:
    """The numbers the prose quotes: the settings with a negative c1 and the false-failure rates."""
    alpha, n = float(ds.attrs.get("alpha", np.nan)), ds.sizes["setting"]
    neg = [str(s) for s, c in zip(ds["setting"].values, ds["c1_exact"].values) if c < 0]
    return ds.assign_attrs(n_checks=2 * n, negative_c1=f"in {', '.join(neg)}" if neg else "in no setting of this design",
                           ff_all=1 - (1 - 2 * alpha) ** n * (1 - alpha) ** n)
