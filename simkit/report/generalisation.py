"""Report of the generalisation study (claims C3, C5, C6): checks, one figure page per sweep beside the
Theorem-1 bound, the pre-registered k rule (protocols/generalisation.md), every design point."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import xarray as xr

from simkit.report.spec import FigurePage, Panel, Table, Text, TitlePage, config, fill, gather, render, require

__all__ = ["generalisation_sections"]

CLAIMS_TEXT = (
    "Claim C3 (generalisation, Theorem 1). For an embedding φ̂ that minimises the empirical InfoNCE risk R̂_{n,k} "
    "over a class Lipschitz in its parameters, E = CE(φ̂) − (R̂_{n,k}(φ̂) − log k) splits into a sample-variability "
    "term O(n^−1/2), a complexity term O(n^−1/2) that stabilises as k → ∞ (it does not grow with k, unlike earlier "
    "bounds) and the finite-k bias O(1/k) of C1. The study measures the generalisation gap G = R_k(φ̂) − R̂_{n,k}(φ̂) "
    "(so E = G − gap_k(φ̂)): its mean must decay at least like n^−1/2 and must not grow with k. Claim C5 (temperature, "
    "gap side): as τ → 0 the gap grows (|s| ≤ 1/τ: the loss class gets steeper). Claim C6 (dimension): for embeddings "
    "into S^(d−1) the bounds carry no explicit dependence on d: at a fixed parameter count and Lipschitz constant, G "
    "must show no systematic trend in d.")

LIFT_TEXT = (
    "C6 needs a family whose parameter count and Lipschitz constant stay fixed while d changes the problem. A linear "
    "lift φ = L∘g_θ with a fixed isometry L leaves every score unchanged (a vacuous test); a nonlinear lift such as "
    "normalize(tanh(A_d W x + c_d)) changes its Lipschitz constant with d. The study trains a random-Fourier lift that "
    "is an isometric immersion of the parameters' image (simkit.embeddings.lifted.FourierEmbedding): φ_W(x) = "
    "(cos(A W x), sin(A W x))/√m on S^(d−1), d = 2m, W ∈ R^{3×3} trainable (9 parameters at every d) and fixed "
    "frequencies A ∈ R^{m×3}, a tight frame (AᵀA = (m/3) I) from one fixed Gaussian matrix (attribute 'lift_seed', part "
    "of the design). Then |φ| = 1 and |Δφ(x)| = |ΔW x|/√3: the Lipschitz constant in the parameters is 1/√3 for every d, "
    "W and x. What changes with d is the score kernel K_d(v) = (1/m) Σ_j cos(a_j·v): every tight frame gives 1 − |v|²/6 "
    "+ O(|v|⁴), the higher orders differ (for m = 3 three cosines along orthogonal axes; as m grows a radial kernel). "
    "A 3-dimensional parameter image needs m ≥ 3, hence d ≥ 6 (d even).")

_REQUIRED = ("point", "sweep", "family", "n", "k", "tau", "d", "gap_cv", "gap_cv_mcse", "gap", "gap_mcse",
             "excess_cv", "excess_cv_mcse", "gap_sd", "gap_id", "raw_gap_cv")
_LEVEL = {"n": "n", "k": "k", "tau": "tau", "d": "d", "kprim": "k", "kctl": "k", "krot": "k", "kbrown": "k"}
_NI = {"kprim": ("C3", "primary: vMF kernel, uniform π (fresh replicate)"),
       "kctl": ("C3", "positive control: τ_k = τ √(k_trend_min/k), complexity term ∝ √k"),
       "krot": ("C7", "rotated vMF kernel vMF(Rx, κ_M), uniform π"),
       "kbrown": ("C7", "Brownian (heat) kernel, vMF π")}


def _method(ds: xr.Dataset) -> str:
    cfg, nb = config(ds), ds.sizes.get("block", "?")
    return (
        f"Method. π uniform on S², x⁺ ~ vMF(x, κ_M), k i.i.d. negatives per tuple. Each of {nb} training sets per "
        f"design point trains φ̂ by ERM (L-BFGS-B, {cfg.get('restarts', '?')} starts, best kept); the levels of a sweep "
        f"share random numbers. R_k(φ̂) is estimated on fresh tuples paired with φ = identity, whose R_k is exact "
        f"(simkit.exact): G = R_k(id) + mean[ℓ(φ̂) − ℓ(id)] − R̂(φ̂); the control R̂(id) − R_k(id), exactly zero-mean, "
        f"gives G_cv without the O(n^−1/2) noise of the loss level. Every mean is ± its MCSE (sd over the {nb} training "
        f"sets / √{nb}); log–log slopes are WLS fits with jackknife SE; trend slopes are means of per-training-set OLS "
        f"slopes. False-failure rates: each t test of level α fails with probability α when its null holds exactly; "
        f"the C5 check passes only when the growth is significant (its rate is the plug-in probability of missing "
        f"it); the C6 equivalence check's rate at zero trend is one minus its power column.")


def _checks(ds: xr.Dataset) -> xr.Dataset:
    """One row per sweep's check: statistic, estimate ± SE, test and power, from the scalar summaries."""
    a, alpha, power = ds.attrs, float(ds.attrs.get("alpha", np.nan)), float(ds.attrs.get("power", np.nan))
    spec = {"n": ("C3", "slope of log E[G] on log n", "n_slope", "one-sided t, H0: slope ≤ −1/2", "n_slope_p",
                  "slope ≥ −1/2 + {n_slope_detect:.3f}"),
            "k": ("C3", f"E[G] per doubling of k, k ≥ {config(ds).get('k_trend_min', '?')}", "k_trend",
                  "one-sided t, H0: slope ≤ 0", "k_trend_p", "growth ≥ {k_trend_detect:.4f} nats per doubling"),
            "tau": ("C5", "slope of log E[G] on log τ", "tau_slope", "one-sided t, H0: slope ≥ 0 (pass = rejected)",
                    "tau_slope_p", "slope ≤ −{tau_slope_detect:.3f} (plug-in false-failure {tau_false_fail:.1e})"),
            "d": ("C6", "E[G] per doubling of d (Fourier lift)", "d_trend", "two-sided t, H0: slope = 0", "d_trend_p",
                  "|slope| ≥ {d_trend_detect:.4f} nats per doubling")}
    rows = [s for s in spec if s in set(map(str, ds["sweep"].values))]
    val = lambda name: ds[name].values.item() if name in ds.variables else np.nan  # noqa: E731
    out = xr.Dataset({
        "claim": ("check", [spec[s][0] for s in rows]), "statistic": ("check", [f"{s} sweep: {spec[s][1]}" for s in rows]),
        "est": ("check", [val(spec[s][2]) for s in rows]), "est_se": ("check", [val(spec[s][2] + "_se") for s in rows]),
        "test": ("check", [f"{spec[s][3]}, level {alpha:g}; p = {val(spec[s][4]):.2g}" for s in rows]),
        "power": ("check", [f"detects {spec[s][5]} w.p. {power:g}" for s in rows]),
        "verdict": ("check", [str(val(f"{s}_verdict")) for s in rows]),
        "reason": ("check", [str(val(f"{s}_verdict_reason")) for s in rows])}, coords={"check": rows}, attrs=a)
    return out.assign({v: ds[v] for v in ("n_slope_detect", "k_trend_detect", "tau_slope_detect", "tau_false_fail",
                                          "d_trend_detect") if v in ds})


CHECKS = Table((("claim", "{claim}"), ("statistic", "{statistic}"), ("estimate ± SE", "{est±est_se}"),
                ("test", "{test}"), ("power", lambda d, i: fill(str(d["power"].values[i]), d)), ("why not passed", "{reason}")),
               dim="check", heading="Checks and verdicts", widths=(0.45, 2.0, 1.1, 2.2, 2.4, 1.6, 0.7))


def _sweep(ds: xr.Dataset, s: str) -> xr.Dataset:
    """The points of sweep ``s`` along their level (ascending), with the paired change from the first level."""
    lvl = _LEVEL[s]
    sub = ds.isel(point=np.flatnonzero(ds["sweep"].values == s)).swap_dims(point=lvl).sortby(lvl)
    raw = sub["raw_gap_cv"]
    lo = float(config(ds).get("k_trend_min", 0)) if s == "k" else -np.inf
    diff = raw - raw.isel({lvl: int(np.argmax(sub[lvl].values >= lo))})
    nb = np.isfinite(diff).sum("block")
    return sub.assign(paired=diff.mean("block").assign_attrs(long_name="paired change of E[G] from the first level, "
                                                                       "in nats", units="1"),
                      paired_mcse=diff.std("block", ddof=1) / np.sqrt(nb),
                      neg_gap_id=(-sub["gap_id"]).assign_attrs(long_name="−gap_k(identity), exact", units="1"))


_G = dict(band="gap_cv_mcse", label="E[G] ± 2 MCSE")
_E = Panel("excess_cv", band="excess_cv_mcse", reference="neg_gap_id", reference_label="−gap_k(identity), exact",
           title="excess E = CE(φ̂) − (R̂ − log k)", label="E[E] ± 2 MCSE")
_B = dict(also=("bound_complexity",), also_labels=("complexity term 2 Rad_n of the bound",), logy=True,
          title="E[G] against the Theorem-1 bound", **_G)
_CAP_B = (" Right: E[G] beside the complexity term of a Theorem-1-type bound with explicit constants "
          "(simkit.exact.bounds), two to four orders of magnitude above it.")
SWEEPS = {
    "n": FigurePage("C3: G against n (linear family, d = 3)", (
        Panel("gap_cv", x="n", fit="n_fit", slopes=(-0.5, -1.0), logy=True, title="E[G]: slope {n_slope±n_slope_se}",
              **_G),
        Panel("gap_sd", x="n", logy=True, title="sd(G): slope {n_sd_slope±n_sd_slope_se}"),
        replace(_E, x="n"),
        Panel("gap_cv", x="n", **_B)),
        caption="E[G] (control variate) ± 2 MCSE with the WLS fit of log E[G] on log n (red) and slopes n^−1/2 and n^−1 "
                "through the first point (C3 requires ≤ −1/2); the replicate-to-replicate sd of G; E[E] ± 2 MCSE "
                "against −gap_k(identity): as n grows E tends to −gap_k(φ*), the finite-k bias of C1." + _CAP_B,
        subtitle="verdict {n_verdict}", facet=None),
    "k": FigurePage("C3: G against k (linear family, d = 3)", (
        Panel("gap_cv", x="k", title="E[G]", **_G),
        Panel("paired", x="k", band="paired_mcse", level=0.0, level_label="no change",
              title="paired change from k_trend_min; trend {k_trend±k_trend_se} per doubling", label="± 2 MCSE"),
        replace(_E, x="k"),
        Panel("gap_cv", x="k", **_B)),
        caption="E[G] ± 2 MCSE against k (bars dominated by the training-set effect shared by all k); the paired "
                "difference E[G(k) − G(k_trend_min)] ± 2 MCSE over the same training sets, the precision the test "
                "works with; E[E] ± 2 MCSE against −gap_k(identity)." + _CAP_B,
        subtitle="verdict {k_verdict}", facet=None),
    "tau": FigurePage("C5: G against the temperature τ (linear family, d = 3)", (
        Panel("gap_cv", x="tau", fit="tau_fit", logy=True, title="E[G]: slope {tau_slope±tau_slope_se}", **_G),
        Panel("gap_sd", x="tau", logy=True, title="sd(G)"),
        replace(_E, x="tau")),
        caption="E[G] ± 2 MCSE on log–log axes with the WLS fit (red): C5 says G grows as τ falls (a negative slope); "
                "the sd of G; E[E] ± 2 MCSE against −gap_k(identity).", subtitle="verdict {tau_verdict}", facet=None),
    "d": FigurePage("C6: G against the embedding dimension d (Fourier lift, 9 parameters)", (
        Panel("gap_cv", x="d", title="E[G]", **_G),
        Panel("paired", x="d", band="paired_mcse", level=0.0, level_label="no change",
              title="paired change from d_min; trend {d_trend±d_trend_se} per doubling", label="± 2 MCSE"),
        Panel("risk_excess", x="d", band="risk_excess_mcse", title="R_k(φ̂) − R_k(identity)"),
        Panel("score_change", x="d", band="score_change_mcse", title="score change against the largest d, same W"),
        Panel("eff_dim", x="d", band="eff_dim_mcse", title="effective dimension of φ̂(x)")),
        caption="E[G] ± 2 MCSE against d; the paired change E[G(d) − G(d_min)] ± 2 MCSE over the same training sets; "
                "the population risk above the identity; the mean |score| difference between φ̂ and the largest-d "
                "lift with the same W (how much d changes the scores at fixed parameters); the participation ratio of "
                "φ̂(x). Lipschitz constant in the parameters: 1/√3 at every d (exact).",
        subtitle="no-trend verdict {d_verdict}; ±10% equivalence {d_equiv_verdict} (p = {d_equiv_p:.2g})", facet=None),
}

NI_TABLE = Table((("claim", "{claim}"), ("sweep", "{facet}: {what}"), ("τ", "{tau_range}"), ("b ± SE", "{b±b_se}"),
                  ("growth per doubling (%)", "{growth_pct±growth_pct_se}"), ("mean E[G]", "{level:.4f}"),
                  ("p (H0 growth ≥ δ)", "{ni_p:.3g}"), ("why not passed", "{verdict_reason}")), dim="ni",
                 heading="Pre-registered: G does not grow with k (protocols/generalisation.md)",
                 widths=(0.45, 2.4, 0.8, 1.1, 1.2, 0.7, 0.8, 1.6, 0.7))
NI_FIGURE = FigurePage("E[G] against k for the pre-registered sweeps (± 2 MCSE)", (
    Panel("gap_cv", title="{facet}: {verdict}; b = {b±b_se}", label="E[G] ± 2 MCSE", band="gap_cv_mcse", fit="ni_fit",
          fit_label="fitted log2–log2 line (slope b)", logy=True),),
    caption=lambda ds: (
        "E[G] (control variate) ± 2 MCSE over the training sets against k; red: the fitted log2–log2 line. The rule: "
        "one-sided non-inferiority t test of H0: growth 2^b − 1 ≥ δ = "
        f"{100 * float(ds.attrs.get('delta_k', np.nan)):g}% per doubling of k at α = "
        f"{float(ds.attrs.get('alpha', np.nan)):g}; the positive control must NOT pass it (its PASS means it behaves). "
        "C7 rows: the same rule under a non-reversible kernel."), facet="ni", per_page=4)
POINTS = Table((("point", "{facet}"), ("family", "{family}"), ("n", "{n:.0f}"), ("k", "{k:.0f}"), ("τ", "{tau:.3g}"),
                ("d", "{d:.0f}"), ("E[G] (control variate)", "{gap_cv±gap_cv_mcse}"), ("E[G] (plain)", "{gap±gap_mcse}"),
                ("E[E] (control var.)", "{excess_cv±excess_cv_mcse}"), ("sd G", "{gap_sd:.4f}"),
                ("R_k(φ̂) − R_k(id)", "{risk_excess±risk_excess_mcse}"), ("converged", "{converged:.2f}"),
                ("restart spread", "{restart_spread:.1e}"), ("E[G] / bound", "{bound_ratio:.1e}")),
               dim="point", verdict=None, size=6.5, heading="Every design point (means over training sets ± MCSE)",
               widths=(0.85, 0.5, 0.4, 0.4, 0.4, 0.3, 1.15, 1.15, 1.15, 0.5, 1.15, 0.6, 0.6, 0.6))


def _ni(ds: xr.Dataset) -> xr.Dataset | None:
    """The pre-registered k sweeps side by side along ``ni``, with their rule's scalars and fitted lines."""
    sweeps = [s for s in _NI if s in set(map(str, ds["sweep"].values)) and f"{s}_verdict" in ds]
    if not sweeps:
        return None
    rows = gather(ds, {s: s + "_" for s in sweeps}, ("b", "b_se", "growth", "growth_se", "level", "ni_p", "verdict",
                                                     "verdict_reason"), dim="ni")
    parts = [_sweep(ds, s)[["gap_cv", "gap_cv_mcse"]].reset_coords(drop=True) for s in sweeps]
    curves = xr.concat(parts, dim="ni", join="outer").assign_coords(ni=sweeps)
    tau = [ds["tau"].values[ds["sweep"].values == s] for s in sweeps]
    out = xr.merge([curves, rows]).assign(
        claim=("ni", [_NI[s][0] for s in sweeps]), what=("ni", [_NI[s][1] for s in sweeps]),
        tau_range=("ni", [f"{t.min():.3g}–{t.max():.3g}" for t in tau]),
        growth_pct=100 * rows["growth"], growth_pct_se=100 * rows["growth_se"])
    x = np.log2(out["k"].astype(float))
    g = out["gap_cv"].where(out["gap_cv"] > 0)
    out["ni_fit"] = 2.0 ** (np.log2(g).mean("k") + out["b"] * (x - x.where(g.notnull()).mean("k")))
    out["k"].attrs = ds["k"].attrs
    out["gap_cv"].attrs = ds["gap_cv"].attrs
    out.attrs = ds.attrs
    return out


def generalisation_sections(doc, ds: xr.Dataset, study=None) -> None:
    """The pages of the generalisation study (all but provenance), for its own report or the validation report."""
    require(ds, _REQUIRED, "generalisation")
    present = [s for s in SWEEPS if s in set(map(str, ds["sweep"].values))]
    design = Table((("sweep", "{facet}"), ("family", "{family}"), ("levels", "{levels}"), ("fixed", "{fixed}"),
                    ("κ_M", "{kappa_m:g}")), dim="sweep", verdict=None, heading="Design",
                   widths=(0.6, 0.7, 3.6, 2.6, 0.5))
    rows = xr.Dataset({
        "family": ("sweep", [str(_sweep(ds, s)["family"].values[0]) for s in present]),
        "levels": ("sweep", [", ".join(f"{v:g}" for v in _sweep(ds, s)[_LEVEL[s]].values) for s in present]),
        "fixed": ("sweep", [", ".join(f"{f} = {float(_sweep(ds, s)[f].values[0]):g}" for f in ("n", "k", "tau", "d")
                                      if f != s) for s in present]),
        "kappa_m": ("sweep", [float(_sweep(ds, s)["kappa_m"].values[0]) for s in present])}, coords={"sweep": present})
    render(doc, ds, (TitlePage(texts=(CLAIMS_TEXT, _method)),))
    render(doc, rows, (design,))
    render(doc, _checks(ds), (CHECKS,))
    if "d" in present:
        render(doc, ds, (Text(LIFT_TEXT, heading="C6: a family with fixed parameter count and Lipschitz constant"),))
    for s in present:
        render(doc, _sweep(ds, s), (SWEEPS[s],))
    ni = _ni(ds)
    if ni is not None:
        conclusion = ds["c3_conclusion"].values if "c3_conclusion" in ds else "?"
        render(doc, ni, (Text(f"Analysis: {ds.attrs.get('analysis', '?')}. C3 conclusion: {conclusion}."), NI_TABLE,
                         NI_FIGURE))
    if "bound_complexity" in ds:
        render(doc, ds, (Text("Theorem-1-type bound (simkit.exact.bounds): verdict {bound_verdict}; largest E[G]/bound "
                              "{bound_max_ratio:.3g}. {bound_reason}", heading="The realised gap against the bound"),))
    render(doc, ds, (POINTS,))
