"""Report of the C5 study (``temperature``): the checks per setting, CE, bias and KL tables over τ,
their figures, the gap at fixed k and the pre-registered norms clause (protocols/temperature.md);
prose in ``pages/temperature.md``."""

from __future__ import annotations

import numpy as np
import xarray as xr

from simkit.report.spec import (Failures, FigurePage, Panel, Table, Text, TitlePage, View, config, gather, prose,
                                stack)

P = prose("temperature")

CHECKS = Table((("setting", "facet"), ("π", "pi"), ("d", "dim"), ("κ_M", "kappa_m"),
    ("(i) largest KL_max/(2/τ) ± MCSE", "{kl_ratio_top±kl_ratio_top_mcse} at τ = {tau_kl_top:.3g}"),
    ("(ii) largest |z| of CE", "ce_max_abs_z:.2f"), ("(iii) |c1(τ_min)| / max |c1(τ ≥ 1/κ_M)|", "c1_ratio"),
    ("c1 peaks at τ; c1 = 0 at τ", "{tau_c1_peak:.3g}; {tau_c1_zero:.3g}"),
    ("E[Z2/Z²] slope (−(d−1)/2)", "{scale_slope:.2f} ({scale_slope_predicted:.1f})")),
    verdict=("verdict_kl", "verdict_ce", "verdict_c1"), heading="Checks and verdicts")

_TAU = ("τ", "facet:.3g")
CE_TABLE = (_TAU, ("CE exact", "ce_exact"), ("CE Monte Carlo", "ce_estimate"),
            ("z", "ce_z:+.2f"), ("H", "entropy"), ("c1 exact", "c1_exact"),
            ("E[Z2/Z²]", "z2_ratio:.4g"), ("E[m1/Z]", "m1_ratio:.4g"), ("k·gap_k at k_fixed", "k_gap_kf"),
            ("k·gap_k at k_max", "k_gap_kmax"))
KL_TABLE = (_TAU, ("2/τ", "kl_bound:.3g"), ("E_x KL exact", "kl_mean_exact"),
            ("E_x KL direct", "kl_mean"), ("E_x KL importance", "kl_mean_is"),
            ("max KL exact (anchors; sup)", "{kl_max_anchor_exact:.3g}; {kl_sup_exact:.3g}"),
            ("max KL direct", "kl_max"), ("max KL importance", "kl_max_is"),
            ("min ESS", "kl_is_ess_min:.0f"), ("max KL / (2/τ)", "kl_ratio"))

_T = dict(x="tau")
FIGURES = (
    FigurePage("Cross-entropy CE(τ): exact against Monte Carlo, and its lower bound H", (
        Panel("ce_estimate", reference="ce_exact", reference_band="ce_exact_mcse",
              hline="entropy_h", title="{facet}: min CE − H = {ce_h_min:.3g}",
              label="Monte Carlo CE ± 2 MCSE", hline_label="H ± 2 MCSE (CE ≥ H)", **_T),
        Panel("ce_z", title="largest |z| = {ce_max_abs_z:.2f}: {verdict_ce}", label="z of Monte Carlo − exact", **_T)),
        caption=P["ce_caption"]),
    FigurePage("Small τ inflates the bias constant: |c1(τ)| and the expansion scale", (
        Panel("c1_exact", absolute=True, logy=True,
              title="{facet}: c1 peaks at τ = {tau_c1_peak:.3g}, 0 at τ ≈ {tau_c1_zero:.3g}", label="|c1| ± 2 MCSE", **_T),
        Panel("z2_ratio", also=("m1_ratio",), logy=True, ylabel="expansion scale", label="E[Z2/Z²]",
              title="E[Z2/Z²] slope {scale_slope:.2f} (−(d−1)/2 = {scale_slope_predicted:.1f})", **_T)),
        caption=P["c1_caption"]),
    FigurePage("Temperature as a regulariser: KL(Q(x,·) ‖ π) ≤ 2/τ", (
        Panel("kl_mean", reference="kl_mean_exact", also=("kl_bound", "kl_sup_exact", "kl_max"),
              also_labels=("bound 2/τ", "exact largest KL over x", "largest per-anchor Monte Carlo KL"), logy=True,
              title="{facet}: max KL/(2/τ) = {kl_ratio_top±kl_ratio_top_mcse}", label="Monte Carlo E_x KL ± 2 MCSE",
              reference_label="exact E_x KL", ylabel="KL (nats)", **_T),
        Panel("kl_ratio", logy=True, level=1.0, level_label="ratio 1: the bound attained",
              title="check (i): {verdict_kl}", label="max KL / (2/τ) ± 2 MCSE", **_T)),
        caption=P["kl_caption"]),
    FigurePage("The finite-k gap at fixed k as τ varies: where the 1/k regime starts", (
        Panel("abs_gap", series="k", logy=True, title="{facet}: |gap_k| at two k", **_T),
        Panel("k_gap_kmax", reference="c1_exact", symlog=True, label="k·gap_k at k_max ± 2 MCSE",
              reference_label="exact c1", title="k_max·gap against c1; onset from τ = {tau_onset:.3g}", **_T)),
        caption=P["gap_caption"]),
)

NORM_ROWS = {"primary: S of φ̂ (control variate)": "norm_primary_",
             "null control: S of the fixed reference ψ = r·x (E[S] = 0)": "norm_null_",
             "control: norms changed in a score-ignored component (S = 0)": "norm_ignored_"}


NORMS_TABLE = Table((("τ", "facet:g"), ("E[G]", "norm_gap_cv"), ("G·τ", "norm_gap_tau"), ("E[S]", "norm_sens_cv"),
    ("S·τ", "norm_sens_tau"), ("null: E[S_ref]", "norm_sens_ref"), ("ignored: E[S]", "norm_sens_ignored"),
    ("FD vs pathwise (max rel.)", "norm_fd_rel_error:.2g"), ("plain E[S]", "norm_sens"),
    ("converged", "norm_converged:.2f")), dim="tau_n", verdict=None, size=7.0)
NORM_CHECKS = Table((("estimate", "facet"), ("slope b ± SE", "b±b_se"), ("t (H0 b ≥ b0)", "t:.2f"),
    ("p", "p:.3g"), ("E[S](τ_min) ± MCSE", "level±level_se"), ("p (H0 ≤ 0)", "level_p:.3g"),
    ("E[S](τ_min)/E[S](τ_max)", "ratio:.3g"), ("blocks", "n_blocks:.0f"),
    ("passes the rule (1 = yes)", "passed:.0f")), dim="row", verdict="verdict",
    heading="The rule applied to the primary and the controls", size=7.0)
NORMS_FIGURE = FigurePage("Norms clause: G and G·τ; the gap's sensitivity S to the negatives' norms", (
    Panel("norm_g", x="tau_n", series="estimate", logy=True, title="E[G] and G·τ"),
    Panel("norm_s", x="tau_n", series="estimate", logy=True, title="E[S] = dE[G]/dε and S·τ")),
    caption=P["norms_caption"], facet=None)


def derive(ds: xr.Dataset) -> xr.Dataset:
    """Display quantities from the saved variables: per-setting extremes, k·gap_k at two k, |gap|."""
    k, taus = ds["k"].values, ds["tau"].values
    kf = int(config(ds).get("k_fixed", 64))
    kf = kf if kf in k else int(k[min(len(k) - 1, 6)])
    r = ds["kl_ratio"].fillna(-np.inf)
    j = r.argmax("tau")
    ce_h = ds["ce_exact"] - ds["entropy"]
    short = ds["k_onset"] > k[-1]
    out = ds.assign(
        kl_ratio_top=ds["kl_ratio"].isel(tau=j), kl_ratio_top_mcse=ds["kl_ratio_mcse"].isel(tau=j),
        tau_kl_top=ds["tau"].isel(tau=j), ce_h_min=ce_h.min("tau"),
        entropy_h=ds["entropy"].isel(tau=0), entropy_h_mcse=ds["entropy_mcse"].isel(tau=0),
        k_gap_kf=ds["k_gap"].sel(k=kf), k_gap_kf_mcse=ds["k_gap_mcse"].sel(k=kf),
        k_gap_kmax=ds["k_gap"].isel(k=-1).assign_attrs(long_name="k·gap_k at k_max, in nats", units="1"),
        k_gap_kmax_mcse=ds["k_gap_mcse"].isel(k=-1),
        tau_onset=xr.DataArray([taus[~s].min() if (~s).any() else np.nan for s in short.values], dims="setting"))
    two = dict(k=[kf, int(k[-1])])
    out["abs_gap"] = abs(ds["gap"]).sel(two).assign_attrs(long_name="|gap_k|, in nats", units="1")
    out["abs_gap_mcse"] = ds["gap_mcse"].sel(two)
    if "norm_gap_cv" in ds:
        for name, (a, b), what in (("norm_g", ("norm_gap_cv", "norm_gap_tau"), "E[G] and G·τ"),
                                   ("norm_s", ("norm_sens_cv", "norm_sens_tau"), "E[S] and S·τ")):
            out = stack(out, {"mean": a, "times τ": b}, "estimate", name, {"long_name": f"{what}, in nats", "units": "1"})
    alpha = float(ds.attrs.get("alpha", np.nan))
    return out.assign_attrs(ff_all=1 - (1 - alpha) ** 3, k_onset_factor=float(ds.attrs.get("k_onset_factor", 16)))


def _norm_rows(ds: xr.Dataset) -> xr.Dataset:
    """The rule applied to the primary and the two controls of the norms clause, one row each."""
    rows = gather(ds, NORM_ROWS, ("b", "b_se", "t", "p", "level", "level_se", "level_p", "ratio", "n_blocks", "passed"))
    return rows.assign(verdict=("row", [str(ds[v].values) for v in ("norm_verdict", "norm_null_verdict",
                                                                    "norm_ignored_verdict")]))


def _scaled_rows(ds: xr.Dataset) -> xr.Dataset:
    """The rule of protocols/temperature_scaled.md (tau S, its own blocks) on the primary and the two controls."""
    rows = gather(ds, {k: v.replace("norm_", "scaled_") for k, v in NORM_ROWS.items()}, (
        "b", "b_se", "t", "p", "level", "level_se", "level_p", "ratio", "n_blocks", "passed", "refuted"))
    return rows.assign(verdict=("row", [str(ds[f"scaled{c}_verdict"].values) for c in ("", "_null", "_ignored")]))


SCALED_TABLE = Table((("τ", "facet:g"), ("E[S]", "scaled_sens_cv"), ("S·τ", "scaled_sens_tau"),
    ("E[G]", "scaled_gap_cv"), ("G·τ", "scaled_gap_tau"), ("E[S]/E[G]", "scaled_sens_gap±scaled_sens_gap_se"),
    ("null: E[S_ref]", "scaled_sens_ref"), ("FD (max rel.)", "scaled_fd_rel_error:.2g")), dim="tau_s",
    verdict=None, size=7.0)


_HEAD = "{setting}: π {pi}, d = {dim}, κ_M = {kappa_m:g} — "
PAGES = (
    TitlePage(texts=(P["claim"], P["method"]), then=(CHECKS, Text(P["rule"]),
                                                     Failures(verdicts=("verdict_kl", "verdict_ce", "verdict_c1")))),
    View(lambda ds: [ds.isel(setting=i) for i in range(ds.sizes["setting"])], (
        Table(CE_TABLE, dim="tau", verdict=None, heading=_HEAD + "cross-entropy and bias", size=7.0),
        Table(KL_TABLE, dim="tau", verdict=None, heading=_HEAD + "KL(Q(x,·) ‖ π) against 2/τ", size=7.0))),
    *FIGURES,
    View(lambda ds: ds if "norm_verdict" in ds else None, (
        Text(P["norms"], heading="Norms clause of C5 (pre-registered, protocols/temperature.md)"), NORMS_TABLE,
        View(_norm_rows, (NORM_CHECKS,)), NORMS_FIGURE)),
    View(lambda ds: ds if "scaled_verdict" in ds else None, (  # the rule of protocols/temperature_scaled.md
        Text(P["scaled"], heading="Norms clause beyond the 1/τ score scale (pre-registered, "
                                   "protocols/temperature_scaled.md)"), SCALED_TABLE,
        View(_scaled_rows, (NORM_CHECKS,)))))
