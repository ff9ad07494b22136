"""Report of the confirmatory C6 capacity study (``capacity``): protocol, the three rules, E[G] against d
along lines of constant complexity, every design point; prose in ``pages/capacity.md``."""

from __future__ import annotations

import xarray as xr

from simkit.report.spec import FigurePage, Panel, Table, Text, TitlePage, View, family_curves, gather, prose, scalar

P = prose("capacity")

FAMILIES = {"fixed class: Fourier lift, P = 9, n fixed": "fourier_",
            "growing class: Wx/|Wx|, n = ratio · P(d)": "linear_",
            "positive control: Wx/|Wx|, n fixed": "control_"}
RULE = Table((("class", "facet"), ("b = slope of log2 E[G] on log2 d", "b±b_se"), ("b0 (ln d)", "b0:.4f"),
    ("t", "ni_t:.2f"), ("p (one-sided)", "ni_p:.3g"), ("slope on log2 C", "beta±beta_se")), dim="row",
    heading="Verdict (protocol section 7): {conclusion}")
CURVES = FigurePage("E[G] against d", (
    Panel("gap_cv", x="d", fit="fit", logy=True, title="{facet}", fit_label="fit 2^(a + b log2 d)",
          label="E[G] ± 2 MCSE"),),
    caption=P["curves_caption"], facet="family")
POINTS = Table((("point", "facet"), ("P", "n_params:.0f"), ("n", "n:.0f"), ("√(P/n)", "complexity:.4f"),
    ("E[G] (cv, nats)", "gap_cv"), ("n E[G] / P", "scaled_gap:.3f"), ("E[G] (plain)", "gap"),
    ("sd G", "gap_sd:.4f"), ("conv.", "converged:.2f"), ("blocks", "n_finished:.0f")), dim="point",
    heading="Every design point", verdict=None)


def _conclusion(ds: xr.Dataset) -> str:
    v = [str(scalar(ds, f"{f}_verdict")) for f in ("fourier", "linear", "control")]
    if "error" in v:
        return "error: a task failed (see the reasons); no confirmatory conclusion"
    if v[2] != "pass":
        return "C6 NOT CONFIRMED (inconclusive): the positive control passed the rule"
    if v[0] == v[1] == "pass":
        return "C6 CONFIRMED: ln d factor excluded for both classes (α 0.01); control behaved"
    return "C6 NOT CONFIRMED: a ln d factor not excluded for " + " and ".join(
        n for n, x in zip(("the fixed class", "the growing class"), v) if x != "pass")


def derive(ds: xr.Dataset) -> xr.Dataset:
    reasons = " ".join(str(scalar(ds, f"{f}_reason")) for f in ("fourier", "linear", "control") if str(scalar(ds, f"{f}_reason")))
    return ds.assign_attrs(reasons=" " + reasons if reasons else "")


def _rows(ds: xr.Dataset) -> xr.Dataset:
    rows = gather(ds, FAMILIES, ("b", "b_se", "b0", "ni_t", "ni_p", "beta", "beta_se", "verdict"))
    return rows.assign(conclusion=xr.DataArray(_conclusion(ds)))


PAGES = (TitlePage(texts=(P["claim"],), ademp=True), View(_rows, (RULE, Text(P["rule"]))),
         View(lambda ds: family_curves(ds, FAMILIES), (CURVES,)), POINTS)
