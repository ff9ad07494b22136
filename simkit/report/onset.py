"""Report of the onset study (``onset``), declared: the onset table with the protocol's answer,
k·gap_k / c1 on the exact curve with the ±10% band, the onset k* and the expansion scale marked, and
the Monte Carlo curve against the exact one."""

from __future__ import annotations

import numpy as np
import xarray as xr

from simkit.report.spec import Failures, FigurePage, Panel, Table, Text, TitlePage, render, require, verdict_heading

__all__ = ["onset_sections", "PAGES"]

INTRO = (
    "The onset of the 1/k regime. C1's expansion gap_k = c1/k + c2/k² + O(1/k³) describes the finite-k InfoNCE "
    "bias only once k is large compared with the expansion scale ρ = max(E[Z2/Z²], E[m1/Z]) (docs/theory.md §9). "
    "Where practitioners train, ρ is 10³–10⁵. This study asks, on the exact curve (no expansion, simkit.exact.curve "
    "and simkit.diagnose), from which k on c1/k is within 10% of the gap — the onset k* — and whether ρ predicts k* "
    "within a factor 4 (the pre-registered range [ρ, 16ρ], protocols/onset.md). It also tests the Monte Carlo gap "
    "curve against the exact one at every k.")


def _method(ds: xr.Dataset) -> str:
    return (
        f"Method. Exact curve on the half-octave grid k = round(2^(j/2)) up to {int(ds['k_exact'].values.max())}; "
        f"k* = smallest grid k from which |k·gap_k/c1 − 1| ≤ {float(ds.attrs.get('onset_tol', 0.1)):g} at every larger "
        "grid k (simkit.stats.onset.onset_k), and likewise for gap_k/(c1/k + c2/k²). Where the exact curve is Monte "
        "Carlo over anchors (the mixture), the 95% interval of k* is the percentile interval of the onset over draws of "
        "the curve from its covariance and of c1, c2 from their MCSEs; elsewhere it is k* itself. The Monte Carlo curve: "
        f"{ds.sizes.get('block', '?')} replicate blocks per setting (GapEstimator with control variates; for digits the "
        "finite-set estimator), tested against the exact curve at every power-of-two k by the largest studentised "
        "deviation with a bootstrap reference (curve p). Values are estimate ± MCSE where they carry Monte Carlo error.")


def _answer_text(ds: xr.Dataset) -> str:
    pos = [str(p) for p in ds["scale_predicts"].values]
    big = [str(p) for p, r in zip(pos, ds["expansion_scale"].values) if r >= 1e3]

    def verdict(ps):
        if ps and all(p == "inside" for p in ps):
            return "yes"
        return "no" if "outside" in ps else "undetermined"

    alpha = float(ds.attrs.get("alpha", np.nan))
    return (f"Does the expansion scale predict k* within [ρ, 16ρ]? All settings: {verdict(pos)}; the settings with "
            f"ρ ≥ 10³: {verdict(big)} (per setting in the table: inside, outside or undetermined; 'no' if any setting's "
            f"interval lies outside the range). Curve test: a setting passes when curve p ≥ α = {alpha:g}; the check's "
            f"false-failure rate is 1 − (1 − α)^{ds.sizes['setting']} = {1 - (1 - alpha) ** ds.sizes['setting']:.2g}.")


RESULTS = Table((
    ("setting", "{facet}"), ("τ", "{tau}"), ("scale ρ", "{expansion_scale:.4g}"), ("|c2/c1|", "{crossover:.4g}"),
    ("c1 ± MCSE", "{c1±c1_mcse}"), ("c2 ± MCSE", "{c2±c2_mcse}"),
    ("k* (1/k)\n95% interval", "{onset_k:.5g}\n[{onset_k_low:.5g}, {onset_k_high:.5g}]"),
    ("k*/ρ", "{onset_over_scale:.3g}"),
    ("k* (c1/k + c2/k²)\n95% interval", "{onset_k_second_order:.5g}\n[{onset_k_second_order_low:.5g}, "
                                         "{onset_k_second_order_high:.5g}]"),
    ("predicted\n[ρ, 16ρ]", "[{predicted_low:.4g}, {predicted_high:.4g}]"), ("k* in range?", "{scale_predicts}"),
    ("MC k_max", "{k_max:.0f}"), ("curve max |t|\ncurve p", "{curve_max_t:.2f}\n{curve_p:.2g}"),
), heading=verdict_heading("Onsets and curve tests"), size=7.5)

PAGES = (
    TitlePage(texts=(INTRO, _method), then=(RESULTS, Text(_answer_text), Failures())),
    FigurePage(
        "k·gap_k / c1 on the exact curve: the onset of the 1/k regime",
        (Panel("ratio_exact", x="k_exact", also=("band_hi", "band_lo"), also_labels=("1 + 10%", "1 − 10%"),
               marks=("onset_k", "expansion_scale", "predicted_high"),
               mark_labels=("onset k*", "expansion scale ρ", "16ρ (the fit rule's k_min)"), ylim=(-1.0, 3.0),
               title="{facet}: k* {onset_k:.5g}, ρ {expansion_scale:.4g}", label="k·gap_k / c1 (exact curve)"),
         Panel("ratio2_exact", x="k_exact", also=("band_hi", "band_lo"), also_labels=("1 + 10%", "1 − 10%"),
               marks=("onset_k_second_order", "expansion_scale"), mark_labels=("onset of c1/k + c2/k²", "expansion scale ρ"),
               ylim=(-1.0, 3.0), title="{facet}: second order, k* {onset_k_second_order:.5g}",
               label="gap_k / (c1/k + c2/k²) (exact)")),
        caption="Top: the exact k·gap_k/c1 over the half-octave grid, with the ±10% band around 1 (squares), the onset k* "
                "(dashed), the expansion scale ρ (dotted) and 16ρ (dash-dot). Bottom: the same for the second-order "
                "prediction c1/k + c2/k². Values outside [−1, 3] lie off the axis (far below the onset the ratio is large "
                "or negative).",
        subtitle="k* and ρ in each panel title"),
    FigurePage(
        "The Monte Carlo curve against the exact curve",
        (Panel("k_gap_ratio", band="k_gap_ratio_mcse", reference="ratio_exact_k", marks=("onset_k", "expansion_scale"),
               mark_labels=("onset k*", "expansion scale ρ"), title="{facet}: curve p {curve_p:.2g}",
               label="Monte Carlo k·gap_k / c1 ± 2 MCSE", reference_label="exact"),),
        caption="Points: the Monte Carlo estimate of k·gap_k/c1 at k = 1, 2, 4, …, k_max, band ±2 MCSE; black line: the "
                "exact curve at the same k. The curve test compares them at every k jointly (curve p)."),
)

_REQUIRED = ("setting", "k", "k_exact", "ratio_exact", "ratio2_exact", "k_gap_ratio", "onset_k", "expansion_scale",
             "scale_predicts", "curve_p", "verdict")


def _derived(ds: xr.Dataset) -> xr.Dataset:
    """The ±10% band lines over the exact grid (display only)."""
    tol = float(ds.attrs.get("onset_tol", 0.1))
    ones = xr.ones_like(ds["ratio_exact"])
    out = ds.assign(band_hi=ones * (1 + tol), band_lo=ones * (1 - tol))
    for n in ("band_hi", "band_lo"):
        out[n].attrs = {"long_name": f"1 ± {tol:g}", "units": "1"}
    return out


def onset_sections(doc, ds: xr.Dataset, study=None) -> None:
    """The pages of the onset study (all but provenance)."""
    require(ds, _REQUIRED, "onset")
    render(doc, _derived(ds), PAGES, study=study)
