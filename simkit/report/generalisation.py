"""Report of the generalisation study (claims C3, C5, C6): checks, one figure page per sweep beside the
Theorem-1 bound, the pre-registered k rule (protocols/generalisation.md), every design point; prose in
``pages/generalisation.md``."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import xarray as xr

from simkit.report.spec import FigurePage, Panel, Table, Text, TitlePage, View, config, fill, gather, prose, scalar

P = prose("generalisation")
_LEVEL = {"n": "n", "k": "k", "tau": "tau", "d": "d", "kprim": "k", "kctl": "k", "krot": "k", "kbrown": "k"}
_NI = {"kprim": ("C3", "primary: vMF kernel, uniform π (fresh replicate)"),
       "kctl": ("C3", "positive control: τ_k = τ √(k_trend_min/k), complexity term ∝ √k"),
       "krot": ("C7", "rotated vMF kernel vMF(Rx, κ_M), uniform π"),
       "kbrown": ("C7", "Brownian (heat) kernel, vMF π")}


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
    out = xr.Dataset({
        "claim": ("check", [spec[s][0] for s in rows]), "statistic": ("check", [f"{s} sweep: {spec[s][1]}" for s in rows]),
        "est": ("check", [scalar(ds, spec[s][2]) for s in rows]),
        "est_se": ("check", [scalar(ds, spec[s][2] + "_se") for s in rows]),
        "test": ("check", [f"{spec[s][3]}, level {alpha:g}; p = {scalar(ds, spec[s][4]):.2g}" for s in rows]),
        "power": ("check", [f"detects {spec[s][5]} w.p. {power:g}" for s in rows]),
        "verdict": ("check", [str(scalar(ds, f"{s}_verdict")) for s in rows]),
        "reason": ("check", [str(scalar(ds, f"{s}_verdict_reason")) for s in rows])}, coords={"check": rows}, attrs=a)
    return out.assign({v: ds[v] for v in ("n_slope_detect", "k_trend_detect", "tau_slope_detect", "tau_false_fail",
                                          "d_trend_detect") if v in ds})


CHECKS = Table((("claim", "claim"), ("statistic", "statistic"), ("estimate ± SE", "est±est_se"), ("test", "test"),
    ("power", lambda d, i: fill(str(d["power"].values[i]), d)), ("why not passed", "reason")), dim="check",
    heading="Checks and verdicts")


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


_G = dict(label="E[G] ± 2 MCSE")
_E = Panel("excess_cv", reference="neg_gap_id", reference_label="−gap_k(identity), exact",
           title="excess E = CE(φ̂) − (R̂ − log k)", label="E[E] ± 2 MCSE")
_B = dict(also=("bound_complexity",), also_labels=("complexity term 2 Rad_n of the bound",), logy=True,
          title="E[G] against the Theorem-1 bound", **_G)
_CAP_B = " " + P["bound_note"]
SWEEPS = {
    "n": FigurePage("C3: G against n (linear family, d = 3)", (
        Panel("gap_cv", x="n", fit="n_fit", slopes=(-0.5, -1.0), logy=True, title="E[G]: slope {n_slope±n_slope_se}",
              **_G),
        Panel("gap_sd", x="n", logy=True, title="sd(G): slope {n_sd_slope±n_sd_slope_se}"),
        replace(_E, x="n"),
        Panel("gap_cv", x="n", **_B)),
        caption=P["n_caption"] + _CAP_B,
        subtitle="verdict {n_verdict}", facet=None),
    "k": FigurePage("C3: G against k (linear family, d = 3)", (
        Panel("gap_cv", x="k", title="E[G]", **_G),
        Panel("paired", x="k", level=0.0, level_label="no change",
              title="paired change from k_trend_min; trend {k_trend±k_trend_se} per doubling", label="± 2 MCSE"),
        replace(_E, x="k"),
        Panel("gap_cv", x="k", **_B)),
        caption=P["k_caption"] + _CAP_B,
        subtitle="verdict {k_verdict}", facet=None),
    "tau": FigurePage("C5: G against the temperature τ (linear family, d = 3)", (
        Panel("gap_cv", x="tau", fit="tau_fit", logy=True, title="E[G]: slope {tau_slope±tau_slope_se}", **_G),
        Panel("gap_sd", x="tau", logy=True, title="sd(G)"),
        replace(_E, x="tau")),
        caption=P["tau_caption"], subtitle="verdict {tau_verdict}", facet=None),
    "d": FigurePage("C6: G against the embedding dimension d (Fourier lift, 9 parameters)", (
        Panel("gap_cv", x="d", title="E[G]", **_G),
        Panel("paired", x="d", level=0.0, level_label="no change",
              title="paired change from d_min; trend {d_trend±d_trend_se} per doubling", label="± 2 MCSE"),
        Panel("risk_excess", x="d", title="R_k(φ̂) − R_k(identity)"),
        Panel("score_change", x="d", title="score change against the largest d, same W"),
        Panel("eff_dim", x="d", title="effective dimension of φ̂(x)")),
        caption=P["d_caption"],
        subtitle="no-trend verdict {d_verdict}; ±10% equivalence {d_equiv_verdict} (p = {d_equiv_p:.2g})", facet=None),
}

NI_TABLE = Table((("claim", "claim"), ("sweep", "{facet}: {what}"), ("τ", "tau_range"), ("b ± SE", "b±b_se"),
    ("growth per doubling (%)", "growth_pct±growth_pct_se"), ("mean E[G]", "level:.4f"),
    ("p (H0 growth ≥ δ)", "ni_p:.3g"), ("why not passed", "verdict_reason")), dim="ni",
    heading="Pre-registered: G does not grow with k (protocols/generalisation.md)")
NI_FIGURE = FigurePage("E[G] against k for the pre-registered sweeps (± 2 MCSE)", (
    Panel("gap_cv", title="{facet}: {verdict}; b = {b±b_se}", label="E[G] ± 2 MCSE", fit="ni_fit",
          fit_label="fitted log2–log2 line (slope b)", logy=True),),
    caption=P["ni_caption"], facet="ni", per_page=4)
POINTS = Table((("point", "facet"), ("family", "family"), ("n", "n:.0f"), ("k", "k:.0f"), ("τ", "tau:.3g"),
    ("d", "d:.0f"), ("E[G] (control variate)", "gap_cv"), ("E[G] (plain)", "gap"),
    ("E[E] (control var.)", "excess_cv"), ("sd G", "gap_sd:.4f"), ("R_k(φ̂) − R_k(id)", "risk_excess"),
    ("converged", "converged:.2f"), ("restart spread", "restart_spread:.1e"),
    ("E[G] / bound", "bound_ratio:.1e")), dim="point", verdict=None, size=6.5,
    heading="Every design point (means over training sets ± MCSE)")


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
    return out.assign_attrs(c3_conclusion=str(ds["c3_conclusion"].values) if "c3_conclusion" in ds else "?",
                            delta_k_pct=100 * float(ds.attrs.get("delta_k", np.nan)))


def _present(ds: xr.Dataset) -> list[str]:
    return [s for s in SWEEPS if s in set(map(str, ds["sweep"].values))]


def _design(ds: xr.Dataset) -> xr.Dataset:
    """One row per sweep present: its family, levels and the fixed factors."""
    present = _present(ds)
    return xr.Dataset({
        "family": ("sweep", [str(_sweep(ds, s)["family"].values[0]) for s in present]),
        "levels": ("sweep", [", ".join(f"{v:g}" for v in _sweep(ds, s)[_LEVEL[s]].values) for s in present]),
        "fixed": ("sweep", [", ".join(f"{f} = {float(_sweep(ds, s)[f].values[0]):g}" for f in ("n", "k", "tau", "d")
                                      if f != s) for s in present]),
        "kappa_m": ("sweep", [float(_sweep(ds, s)["kappa_m"].values[0]) for s in present])}, coords={"sweep": present})


PAGES = (
    TitlePage(texts=(P["claims"], P["method"])),
    View(_design, (Table((("sweep", "facet"), ("family", "family"), ("levels", "levels"), ("fixed", "fixed"),
        ("κ_M", "kappa_m:g")), dim="sweep", verdict=None, heading="Design"),)),
    View(_checks, (CHECKS,)),
    View(lambda ds: ds if "d" in _present(ds) else None,
         (Text(P["lift"], heading="C6: a family with fixed parameter count and Lipschitz constant"),)),
    *(View(lambda ds, s=s: _sweep(ds, s) if s in _present(ds) else None, (page,)) for s, page in SWEEPS.items()),
    View(_ni, (Text(P["ni_note"]), NI_TABLE, NI_FIGURE)),
    View(lambda ds: ds if "bound_complexity" in ds else None, (Text(P["bound"], heading="The realised gap against the bound"),)),
    POINTS)
REQUIRES = ("point", "sweep", "family", "gap_cv", "gap_cv_mcse", "gap", "gap_mcse", "excess_cv", "excess_cv_mcse",
            "gap_sd", "gap_id", "raw_gap_cv")
