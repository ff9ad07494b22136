"""Report of the in-batch study (``in_batch``), declared: the verdict table per (setting, scheme), the
gap against the batch on log-log axes, k·gap against the derived c1, residuals and the limits."""

from __future__ import annotations

import math

import numpy as np
import xarray as xr
from scipy import stats

from simkit.report.document import _json_attr
from simkit.report.spec import (ClaimTable, Failures, FigurePage, Panel, Table, Text, TitlePage, render, require,
                                verdict_heading)

__all__ = ["in_batch_sections", "PAGES"]

CLAIM_TEXT = (
    "In-batch negatives (docs/theory.md §16). In a batch of B items (x_j, x_j⁺), SimCLR's NT-Xent gives anchor x_i "
    "the k = 2B − 2 views of the other items, i.e. B − 1 i.i.d. pairs (y, y'), y ~ π, y' ~ M(y, ·); CLIP gives it "
    "the k = B − 1 other items' second views, i.i.d. from πM. Then E ℓ − log k = L + c1/k + O(1/k²) with a "
    "scheme's own constant c1 (for NT-Xent the pair correlation lowers it) and limit L = CE(M, Q^ν), ν the "
    "negatives' marginal law: L equals the paper's CE when πM = π and differs from it otherwise. The i.i.d. "
    "scheme is the paper's, run on the same design for comparison.")


def _method(ds: xr.Dataset) -> str:
    cfg = _json_attr(ds, "config", {})
    cfg = cfg if isinstance(cfg, dict) else {}
    return (
        f"Method. Each case (setting, scheme) runs {ds.sizes.get('block', '?')} independent blocks of "
        f"{cfg.get('block_anchors', '?')} anchors sharing one stream of {int(ds['n_pairs'].values.max())} pairs; "
        f"the loss at batch B uses the first B − 1 pairs (common random numbers across B). The gap is the block mean "
        f"of D − A − Bp + C/2 (D = ℓ − log k − ℓ_∞ with the exact per-anchor ζ; A, Bp, C control variates with exact "
        f"conditional mean 0). Slope: WLS of log gap on log k and 1/k over k ≥ k_min; c1: WLS of gap on 1/k, 1/k²; "
        f"jackknife SEs over blocks. The limit: block mean of 2 R(2n) − R(n) at the two largest n, R the ζ-free risk "
        f"ℓ − log k + s0 − E[s0|x]. Exact values: simkit.exact.in_batch (quadrature on the sphere, exact sums on the "
        f"lattice). Values are estimate ± MCSE.")


def _rule(ds: xr.Dataset) -> str:
    alpha, nb, nc = float(ds.attrs.get("alpha", np.nan)), ds.sizes.get("block", 0), ds.sizes["case"]
    crit = stats.t.isf(alpha / 2, nb - 1) if math.isfinite(alpha) and nb > 1 else np.nan
    return (f"Verdict rule (α = {alpha:g}; protocols/in_batch.md). A case passes when the level-{1 - alpha:g} slope "
            f"interval contains −1, slope −1/2 is rejected at α, and |t| ≤ {crit:.2f} for c1 and for the limit "
            f"(Student t, {nb} − 1 df). Three checks (rate, constant, limit), each failing a true case with "
            f"probability α: at most {3 * alpha:g} per case, {3 * alpha * nc:g} over the {nc} cases (union bound). "
            f"'t vs CE' is how many MCSE the measured limit lies from the paper's CE (not a check).")


RESULTS = Table((
    ("case", "{facet}"), ("k_min", "{k_min}"), ("slope ± SE", "{slope±slope_se}"),
    ("95% CI", "[{slope_ci_low:.3f}, {slope_ci_high:.3f}]"), ("p(−1/2)", "{slope_p_half:.2g}"),
    ("c1 est ± MCSE\nc1 exact", "{c1_batch_estimate±c1_batch_estimate_mcse}\n{c1_batch_exact:.5f}"),
    ("t c1", "{c1_t:+.2f}"),
    ("limit est ± MCSE\nlimit exact", "{limit_estimate±limit_estimate_mcse}\n{limit_exact:.5f}"),
    ("t limit", "{limit_t:+.2f}"), ("CE (paper)\nt vs CE", "{ce_exact:.5f}\n{limit_minus_ce_t:+.1f}"),
), dim="case", heading=verdict_heading("Results and verdicts", noun="cases"),
    widths=(1.5, 0.45, 1.1, 1.1, 0.55, 1.3, 0.45, 1.4, 0.5, 0.8), size=7.5)

_K = dict(x="n_pairs", fit_range="n_pairs_min")
PAGES = (
    TitlePage(texts=(CLAIM_TEXT, _method), then=(RESULTS, Text(_rule), ClaimTable(), Failures(dim="case"))),
    FigurePage(
        "The finite-batch gap on log–log axes",
        (Panel("gap", band="gap_mcse", fit="fit_gap", reference="gap_exact", slopes=(-1.0, -0.5), logy=True,
               title="{facet}: slope {slope±slope_se}", label="gap ± 2 MCSE", fit_label="WLS fit (log k, 1/k)",
               reference_label="exact gap (lattice)", **_K),),
        caption="Gap E ℓ − log k − L against B − 1 (k = 2(B − 1) for NT-Xent, B − 1 otherwise; the slope in B equals "
                "the slope in k). Red: the fitted rate over the shaded range; grey: slopes −1 and −1/2; black: the "
                "exact finite-set curve (lattice setting only).", facet="case"),
    FigurePage(
        "k · gap approaches the scheme's derived c1",
        (Panel("k_gap", band="k_gap_mcse", hline="c1_batch_exact", fit=("c1_batch_estimate", "c2_batch_estimate"),
               title="{facet}: c1 {c1_batch_estimate±c1_batch_estimate_mcse}", label="k·gap ± 2 MCSE",
               fit_label="fit c1 + c2/k", hline_label="derived c1 (§16)", **_K),),
        caption="k times the gap, with the derived constant c1 of the scheme (green) and the fitted c1 + c2/k (red). "
                "NT-Xent's c1 is below the i.i.d. one by the pair correlation E[C(x)/(2Z²)].", facet="case"),
    FigurePage(
        "Residuals of the rate fit",
        (Panel("resid_rate", kind="residual", title="{facet}", **_K),),
        caption="Standardised residuals of the rate fit; hollow points lie outside the fit range.", facet="case"),
)

_REQUIRED = ("case", "n_pairs", "gap", "gap_mcse", "k_gap", "k_gap_mcse", "c1_batch_exact", "c1_batch_estimate",
             "limit_exact", "limit_estimate", "verdict")


def in_batch_sections(doc, ds: xr.Dataset, study=None) -> None:
    """The study's pages (all but provenance)."""
    require(ds, _REQUIRED, "in_batch")
    render(doc, ds, PAGES, study=study)
