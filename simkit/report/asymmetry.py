"""Report of the C7 study (``asymmetry``), declared: the design (kernels, why each is not reversible),
the C1 and C2 results and rules, |gap_k| and |D_k| with their fits and constants, residuals, and the
non-reversibility statistics against their exact values; prose in ``pages/asymmetry.md``."""

from __future__ import annotations

import numpy as np
import xarray as xr

from simkit.report.spec import (ClaimTable, Failures, FigurePage, Panel, Table, Text, TitlePage, constant_page, prose,
                                rate_columns, rate_page, residual_page, verdict_heading)

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
    sign = lambda ds, i: {1.0: "+", -1.0: "−", 0.0: "changes"}.get(float(ds[f"{var}_sign"].values[i]), "n/a")  # noqa
    return Table((("setting", "facet"), ("sign", sign)) + rate_columns(var + "_") + (
        (f"{const} estimate ± MCSE", f"{{{const}_estimate±{const}_estimate_mcse}}"),
        (f"{exact} ± MCSE", f"{{{const}_exact±{const}_exact_mcse}}"),
        (f"z of {const}" + ("" if claim == "c1" else " (diag.)"), f"{{{const}_z:+.2f}}")),
        heading=verdict_heading(what, f"verdict_{claim}"), verdict=f"verdict_{claim}")


def _rate_pages(var: str, claim: str, name: str, long: str, const: str, const2: str, exact: str) -> tuple:
    k = dict(prefix=var + "_", reason=f"verdict_{claim}_reason")
    return (rate_page(f"{claim.upper()} for non-reversible kernels: |{long}| on log–log axes", var, f"fit_{var}_abs",
                      P[f"{var}_caption"], absolute=True, label=f"{name} > 0, ± 2 MCSE", **k),
            constant_page(f"k · {name} approaches the {exact} ({claim.upper()})", f"k_{var}", f"k·{name}",
                          (const, const2), P[f"k{var}_caption"], exact.split()[0], **k))


PAGES = (
    TitlePage(texts=(P["claim"],), then=(DESIGN, Text(P["design_note"]), Text(P["method"], size=9.0),
                                      _results("gap", "c1", "c1", "exact c1", "C1 rate: gap_k = R_k − log k − CE"),
                                      _results("d", "c2", "d1", "predicted d1", "C2 rate: D_k = R_k − E CE(M_k, Q_k)"),
                                      Text(P["rule"]), Failures(reasons=("verdict_c1_reason", "verdict_c2_reason")))),
    ClaimTable(),
    *_rate_pages("gap", "c1", "gap_k", "gap_k = R_k − log k − CE", "c1", "c2", "exact c1"),
    *_rate_pages("d", "c2", "D_k", "D_k = R_k − E CE(M_k, Q_k)", "d1", "d2", "predicted d1"),
    residual_page("Residuals of the rate fits", P["residual_caption"], ("resid_gap_rate", "C1 rate fit", "gap_k_min"),
                  ("resid_d_rate", "C2 rate fit", "d_k_min")),
    FigurePage(
        "The positive kernels are not π-reversible: two exchangeability statistics",
        tuple(Panel(v, kind="forest", x="setting", reference=f"{v}_exact", level=0.0, title=t,
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
