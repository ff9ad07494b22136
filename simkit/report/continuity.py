"""Report of the C4 study (``continuity``): the bounds, the pre-registered rule (protocols/continuity.md)
with its cells, the exploratory checks, and the bound and growth figures."""

from __future__ import annotations

import dataclasses

import numpy as np
import xarray as xr

from simkit.report.spec import Failures, FigurePage, Panel, Table, Text, TitlePage, config, render, require

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


def _method(ds: xr.Dataset) -> str:
    cfg = config(ds)
    settings = "; ".join(
        f"{s} ({ds['family'].values[i]}, p = {int(ds['p'].values[i])}, d = {int(ds['d'].values[i])}, π "
        f"{ds['pi'].values[i]}, τ = {float(ds['tau'].values[i]):g}, {ds['perturbation'].values[i]} perturbation)"
        for i, s in enumerate(ds["setting"].values)) if "family" in ds and "perturbation" in ds else ""
    return (
        f"Method. Settings: {settings}. Each of {ds.sizes.get('block', '?')} independent blocks draws φ from its "
        f"family's initialisation and, for every ε in {{{', '.join(f'{e:g}' for e in ds['eps'].values)}}}, ψ: for a "
        f"parametric setting the parameters θ + ε‖θ‖e, e a uniform random unit vector; for the bump setting ψ(x) = "
        f"normalise(φ(x) + {float(ds.attrs.get('bump_gain', 4)):g}ε·b(x)·e), b a bump on a random cap, so that only the "
        f"rare negatives in the cap are displaced. Then {cfg.get('block_anchors', '?')} tuples with K = "
        f"{int(ds['k'].values[-1])} negatives each give |Δℓ|, B_score, B_avg and B_max exactly for every k = 1, 2, 4, "
        f"…, K from the first k negatives (common random numbers across k). Means are over tuples and blocks ± MCSE "
        f"(sd over blocks/√n_blocks); ratios of means carry delete-one-block jackknife MCSE. Rule (pre-registered). "
        f"Primary, per (setting, ε): b = OLS slope of log2 E B_avg on log2 k over k ≥ {cfg.get('k_fit_min', '?')}, "
        f"growth per doubling 2^b − 1, one-sided non-inferiority t test of H0: growth ≥ δ = "
        f"{100 * float(ds.attrs.get('delta', np.nan)):g}% at α = {float(ds.attrs.get('alpha_ni', np.nan)):g}; the "
        f"primary passes only if every cell rejects. Positive control: the same rule on E max_j‖Δw_j‖ (every cell) and "
        f"on E B_max (bump cells) must not pass. Secondary: S1 E B_max and S2 E B_max / E B_avg grow (one-sided t). "
        f"Deterministic: no tuple violates any bound. C4 is confirmed when the deterministic, primary and control "
        f"checks pass; not confirmed (inconclusive) when the control fails.")


def _exploratory(ds: xr.Dataset) -> str:
    alpha, n = float(ds.attrs.get("alpha", np.nan)), ds.sizes["cell"]
    return (
        f"Exploratory rule (α = {alpha:g} per test), kept unchanged for comparison with earlier runs: a cell passes "
        f"when (i) no tuple violates B_score, B_avg or B_max at any k (rounding allowance "
        f"{ds.attrs.get('tolerance', '?')}); (ii) the two-sided test of zero WLS slope for E B_avg does not reject; "
        f"(iii) the one-sided test of H0: slope ≤ 0 for E B_max rejects. A point null for (ii) is the wrong question "
        f"for C4 (the protocol's reason for its one-sided rule). Overall false-failure rate 1 − (1 − α)^{n} = "
        f"{1 - (1 - alpha) ** n:.2g}. Intervals and p-values are functions of the estimates and SEs shown.")


_CELL_COLS = (("setting", "{setting}"), ("ε", "{eps:g}"))
CONFIRMATORY = Table(_CELL_COLS + (
    ("E B_avg growth per doubling ± SE (%)", "{growth_pct±growth_pct_se}"),
    ("non-inferiority t · p", "{ni_avg_t:.1f} · {ni_avg_p:.2g}"),
    ("max_j‖Δw_j‖ growth % (p)", "{negmax_pct:+.2f} ({ni_negmax_p:.2g})"),
    ("B_max growth % (p)", "{max_pct:+.2f} ({ni_max_p:.2g})"), ("S1 p · S2 p", "{s1_p:.1e} · {s2_p:.1e}")),
    dim="cell", verdict=("verdict", "control_verdict", "secondary_verdict"), size=7.0,
    heading="Pre-registered rule (protocols/continuity.md): C4 {conclusion}",
    widths=(0.9, 0.4, 1.6, 1.0, 1.2, 1.2, 1.0, 1.0, 1.0, 1.0))
EXPLORATORY = Table(_CELL_COLS + (
    ("violations (B_score · B_avg · B_max)", "{viol_score:.0f} · {viol_avg:.0f} · {viol_max:.0f}"),
    ("B_avg slope ± SE (two-sided p)", "{slope_avg±slope_avg_se} ({slope_avg_p:.2g})"),
    ("slope detected by the B_avg test (90%)", "{slope_avg_mde:.1e}"),
    ("B_max slope ± SE (one-sided p)", "{slope_max±slope_max_se} ({slope_max_p:.1e})"),
    ("E B_max / E B_avg at k_max", "{max_avg_end±max_avg_end_mcse}"),
    ("E max|Δw| / E avg|Δw| at k_max", "{negmax_negavg_end±negmax_negavg_mcse_end}"),
    ("largest |Δℓ| / B_avg", "{tight_avg:.3f}")), dim="cell", verdict="flat_verdict", size=7.0,
    heading="Exploratory (pre-protocol rule, unchanged)",
    widths=(0.9, 0.4, 1.0, 1.5, 0.9, 1.5, 1.1, 1.1, 0.8, 0.7))
GROWTH = FigurePage("Growth of E B_avg per doubling of k against the pre-registered margin", (
    Panel("growth_pct", x="eps", band="growth_pct_se", level="delta_pct", level_label="margin δ",
          title="{facet}: {verdict_all}", label="growth per doubling ± 2 SE (%)", ylabel="growth of E B_avg per doubling (%)"),),
    caption=lambda ds: (
        f"Growth 2^b − 1 of E B_avg per doubling of k (b the OLS slope of log2 E B_avg on log2 k) ± 2 jackknife SE, "
        f"against ε, one panel per setting; a cell shows non-inferiority when its one-sided upper confidence bound lies "
        f"below the margin δ = {100 * float(ds.attrs.get('delta', np.nan)):g}% per doubling. The controls' growth "
        f"(max_j‖Δw_j‖, B_max) is in the table of the first page."), facet="setting")


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


RATIOS = FigurePage("Ratios of means", tuple(
    Panel(v, series="eps", band=v + "_mcse", logy=True, title="{facet}: " + t, ylabel="ratio")
    for v, t in (("ratio_max_avg", "E B_max / E B_avg"), ("ratio_avg_dl", "E B_avg / E |Δℓ|"),
                 ("ratio_score_dl", "E B_score / E |Δℓ|"))),
    caption="Top: E B_max / E B_avg against k, one curve per ε (± 2 jackknife MCSE): 1 at k = 1 (one negative: "
            "average = max), then growing with k. Middle and bottom: how conservative the averaging bound B_avg and "
            "the score-level bound B_score are, E B / E |Δℓ| ± 2 jackknife MCSE (log scale).")


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


def _derived(ds: xr.Dataset) -> xr.Dataset:
    """Display quantities from the saved variables: growth in per cent, end-of-grid ratios, totals."""
    pct = lambda v: (100 * ds[v]).assign_attrs(long_name="growth per doubling (%)", units="1")  # noqa: E731
    tags = [t for t in ("score", "avg", "max") if f"tightness_{t}" in ds]
    out = ds.assign(
        delta_pct=xr.DataArray(100 * float(ds.attrs.get("delta", np.nan))), growth_pct=pct("ni_avg_growth"), growth_pct_se=pct("ni_avg_growth_se"), negmax_pct=pct("ni_negmax_growth"),
        max_pct=pct("ni_max_growth"), max_avg_end=ds["ratio_max_avg"].isel(k=-1),
        max_avg_end_mcse=ds["ratio_max_avg_mcse"].isel(k=-1), tight_avg=ds["tightness_avg"].max("k"),
        verdict_all=xr.DataArray([" · ".join(f"ε = {e:g} {str(v).upper()}" for e, v in zip(ds["eps"].values, row))
                                  for row in ds["verdict"].values], dims="setting"),
        **{f"viol_{t}": ds[f"violations_{t}"].sum("k") for t in ("score", "avg", "max")},
        **{f"violations_{t}_total": ds[f"violations_{t}"].sum(("eps", "k")) for t in tags},
        **{f"{n}_end": ds[f"ratio_{n}"].isel(k=-1) for n in ("negmax_negavg", "negmax_negavg_mcse")
           if f"ratio_{n}" in ds})
    return out


def _cells(ds: xr.Dataset) -> xr.Dataset:
    """``ds`` with (setting, ε) stacked into one dimension ``cell``: one table row per cell."""
    labels = [f"{s}, ε = {e:g}" for s in ds["setting"].values for e in ds["eps"].values]
    return ds.stack(cell=("setting", "eps")).reset_index("cell").assign_coords(cell=labels)


def continuity_sections(doc, ds: xr.Dataset, study=None) -> None:
    """The pages of the C4 study (all but provenance), for its own report or the validation report."""
    require(ds, _REQUIRED, "continuity")
    ds = _derived(ds)
    note = "" if "protocol_path" in ds.attrs else " · not the pre-registered design: exploratory"
    render(doc, ds, (TitlePage(texts=(C4_TEXT, BOUNDS_TEXT, _method), note=note),))
    render(doc, _cells(ds), (CONFIRMATORY, EXPLORATORY, Text(_exploratory), Failures(
        dim="cell", reasons=("verdict_reason", "control_reason", "secondary_reason"),
        verdicts=("verdict", "control_verdict", "secondary_verdict"))))
    tags = {p.var.split("_")[1] for p in VALIDITY.panels} & {t for t in ("score", "avg", "max") if f"tightness_{t}" in ds}
    validity = dataclasses.replace(VALIDITY, panels=tuple(p for p in VALIDITY.panels if p.var.split("_")[1] in tags))
    render(doc, ds, (GROWTH, BOUNDS, NEGATIVES, RATIOS, validity))
