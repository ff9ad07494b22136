"""Report of the in-batch study (``in_batch``), declared: the verdict table per (setting, scheme), the
gap against the batch on log-log axes, k·gap against the derived c1, residuals and the limits; prose in
``pages/in_batch.md``."""

from __future__ import annotations

import xarray as xr

from simkit.report.spec import ClaimTable, Failures, FigurePage, Panel, Table, Text, TitlePage, prose, verdict_heading

P = prose("in_batch")
RESULTS = Table((("case", "facet"), ("k_min", "k_min"), ("slope ± SE", "slope±slope_se"),
    ("95% CI", "[{slope_ci_low:.3f}, {slope_ci_high:.3f}]"), ("p(−1/2)", "slope_p_half:.2g"),
    ("c1 est ± MCSE\nc1 exact", "{c1_batch_estimate±c1_batch_estimate_mcse}\n{c1_batch_exact:.5f}"),
    ("t c1", "c1_t:+.2f"),
    ("limit est ± MCSE\nlimit exact", "{limit_estimate±limit_estimate_mcse}\n{limit_exact:.5f}"),
    ("t limit", "limit_t:+.2f"), ("CE (paper)\nt vs CE", "{ce_exact:.5f}\n{limit_minus_ce_t:+.1f}")), dim="case",
    heading=verdict_heading("Results and verdicts", noun="cases"), size=7.5)

_K = dict(x="n_pairs", fit_range="n_pairs_min")
PAGES = (
    TitlePage(texts=(P["claim"], P["method"]), then=(RESULTS, Text(P["rule"]), ClaimTable(), Failures(dim="case"))),
    FigurePage(
        "The finite-batch gap: its rate, k · gap against the scheme's derived c1, and the fit's residuals",
        (Panel("gap", fit="fit_gap", reference="gap_exact", slopes=(-1.0, -0.5), logy=True,
               title="{facet}: slope {slope±slope_se}", label="gap ± 2 MCSE", fit_label="WLS fit (log k and 1/k)",
               reference_label="exact gap (lattice)", ylabel="gap (nats)", **_K),
         Panel("k_gap", hline="c1_batch_exact", fit=("c1_batch_estimate", "c2_batch_estimate"),
               title="c1 {c1_batch_estimate±c1_batch_estimate_mcse}", label="k·gap ± 2 MCSE",
               fit_label="fit c1 + c2/k", hline_label="derived c1 (§16)", ylabel="k · gap (nats)", **_K),
         Panel("resid_rate", kind="residual", title="residuals of the rate fit", ylabel="residual / MCSE", **_K)),
        caption=P["figure_caption"], facet="case"),
)


def derive(ds: xr.Dataset) -> xr.Dataset:
    """The false-failure rates the prose quotes."""
    alpha = float(ds.attrs.get("alpha", float("nan")))
    return ds.assign_attrs(ff_case=3 * alpha, ff_all=3 * alpha * ds.sizes["case"])
