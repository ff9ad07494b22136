"""Report of the confirmatory C6 study (``dimension``): protocol, primary and control verdicts, secondary
trends, E[G] against d with the fit, every design point; prose in ``pages/dimension.md``."""

from __future__ import annotations

import xarray as xr

from simkit.report.spec import FigurePage, Panel, Table, Text, TitlePage, View, family_curves, gather, prose, scalar

P = prose("dimension")


def _conclusion(ds: xr.Dataset) -> str:
    v, c = str(scalar(ds, "verdict")), str(scalar(ds, "control_verdict"))
    if v == "error" or c == "error":
        return "error: a task failed (see the reasons); no confirmatory conclusion"
    if c != "pass":
        return "C6 NOT CONFIRMED (inconclusive): the positive control passed the rule, the design cannot detect growth"
    if v == "pass":
        return "C6 CONFIRMED: growth of E[G] per doubling of d below +20% shown at level 0.01; the positive control behaved"
    return "C6 NOT CONFIRMED: growth ≥ +20% per doubling not excluded (the positive control behaved)"


FAMILIES = {"primary: Fourier lift (9 parameters, frame redrawn per block), τ": "fourier_",
            "positive control: linear Wx/|Wx| (3d parameters), τ√(8/d)": "linear_"}
RULE = Table((("family", "facet"), ("b = slope of log2 E[G] on log2 d", "b±b_se"),
    ("growth per doubling (%)", "growth_pct±growth_pct_se"), ("t vs log2 1.2", "ni_t:.2f"),
    ("p (one-sided)", "ni_p:.3g")), dim="row", heading="Verdict (protocol section 7): {conclusion}")
SECONDARY = Table((("family", "facet"), ("trend per doubling (nats)", "trend±trend_se"), ("t", "trend_t:.2f"),
    ("p (two-sided)", "trend_p:.3g"), ("relative to E[G] (%)", "rel_pct±rel_pct_se"),
    ("mean E[G] (nats)", "trend_level:.4f")), dim="row", verdict=None,
    heading="Secondary, descriptive: two-sided trend of E[G] per doubling of d")
CURVES = FigurePage("E[G] against the embedding dimension d", (
    Panel("gap_cv", x="d", fit="fit", logy=True, title="{facet}", fit_label="fit 2^(a + b log2 d)",
          label="E[G] ± 2 MCSE"),),
    caption=P["curves_caption"], facet="family")


def _rows(ds: xr.Dataset) -> xr.Dataset:
    """The two families' rule and trend rows."""
    rows = gather(ds, FAMILIES, ("b", "b_se", "growth", "growth_se", "ni_t", "ni_p", "trend", "trend_se", "trend_t",
                                 "trend_p", "rel_trend", "rel_trend_se", "trend_level"))
    rows = rows.assign(growth_pct=100 * rows["growth"], growth_pct_se=100 * rows["growth_se"],
                       rel_pct=100 * rows["rel_trend"], rel_pct_se=100 * rows["rel_trend_se"],
                       conclusion=xr.DataArray(_conclusion(ds)),
                       verdict=("row", [str(scalar(ds, "verdict")), str(scalar(ds, "control_verdict"))]))
    return rows.assign_attrs(reasons=" ".join(str(scalar(ds, n)) for n in ("verdict_reason", "control_reason")
                                              if str(scalar(ds, n))))


POINTS = Table((("point", "facet"), ("params", "n_params:.0f"), ("τ of φ̂", "tau_train:.4g"),
    ("E[G] (cv, nats)", "gap_cv"), ("E[G] (plain)", "gap"), ("sd G", "gap_sd:.4f"),
    ("eval MCSE", "gap_eval_mcse:.4f"), ("conv.", "converged:.2f"), ("iter.", "iterations:.0f"),
    ("blocks", "n_finished:.0f")), dim="point", heading="Every design point", verdict=None)


PAGES = (
    TitlePage(texts=(P["claim"],), ademp=True), View(_rows, (RULE, Text(P["rule"]), SECONDARY)),
    View(lambda ds: family_curves(ds, FAMILIES), (CURVES,)), POINTS)
