"""Report of the onset study (``onset``), declared: the onset table with the protocol's answer,
k·gap_k / c1 on the exact curve with the ±10% band, the onset k* and the expansion scale marked, and
the Monte Carlo curve against the exact one; prose in ``pages/onset.md``."""

from __future__ import annotations

import numpy as np
import xarray as xr

from simkit.report.spec import Failures, FigurePage, Panel, Table, Text, TitlePage, prose, verdict_heading

P = prose("onset")
RESULTS = Table((("setting", "facet"), ("τ", "tau"), ("scale ρ", "expansion_scale:.4g"),
    ("|c2/c1|", "crossover:.4g"), ("c1 ± MCSE", "c1"), ("c2 ± MCSE", "c2"),
    ("k* (1/k)\n95% interval", "{onset_k:.5g}\n[{onset_k_low:.5g}, {onset_k_high:.5g}]"),
    ("k*/ρ", "onset_over_scale:.3g"),
    ("k* (c1/k + c2/k²)\n95% interval", "{onset_k_second_order:.5g}\n[{onset_k_second_order_low:.5g}, "
                                         "{onset_k_second_order_high:.5g}]"),
    ("predicted\n[ρ, 16ρ]", "[{predicted_low:.4g}, {predicted_high:.4g}]"), ("k* in range?", "scale_predicts"),
    ("MC k_max", "k_max:.0f"), ("curve max |t|\ncurve p", "{curve_max_t:.2f}\n{curve_p:.2g}")),
    heading=verdict_heading("Onsets and curve tests"), size=7.5)

PAGES = (
    TitlePage(texts=(P["intro"], P["method"]), then=(RESULTS, Text(P["answer"]), Failures())),
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
        caption=P["ratio_caption"],
        subtitle="k* and ρ in each panel title"),
    FigurePage(
        "The Monte Carlo curve against the exact curve",
        (Panel("k_gap_ratio", reference="ratio_exact_k", marks=("onset_k", "expansion_scale"),
               mark_labels=("onset k*", "expansion scale ρ"), title="{facet}: curve p {curve_p:.2g}",
               label="Monte Carlo k·gap_k / c1 ± 2 MCSE", reference_label="exact"),),
        caption=P["mc_caption"]),
)


def _answer(ps: list[str]) -> str:
    return "yes" if ps and all(p == "inside" for p in ps) else "no" if "outside" in ps else "undetermined"


def derive(ds: xr.Dataset) -> xr.Dataset:
    """The ±10% band lines over the exact grid (display only) and the numbers the prose quotes."""
    tol, alpha = float(ds.attrs.get("onset_tol", 0.1)), float(ds.attrs.get("alpha", np.nan))
    ones = xr.ones_like(ds["ratio_exact"])
    out = ds.assign(band_hi=ones * (1 + tol), band_lo=ones * (1 - tol))
    for n in ("band_hi", "band_lo"):
        out[n].attrs = {"long_name": f"1 ± {tol:g}", "units": "1"}
    pos = [str(p) for p in ds["scale_predicts"].values]
    big = [p for p, r in zip(pos, ds["expansion_scale"].values) if r >= 1e3]
    return out.assign_attrs(onset_tol=tol, answer_all=_answer(pos), answer_large=_answer(big),
                            ff_all=1 - (1 - alpha) ** ds.sizes["setting"])
