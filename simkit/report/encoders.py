"""Report pages of the ``encoders`` study (C1, C2, C7 at InfoNCE-trained encoders): the verdict
tables, gap_k against the exact curve at φ̂, k·gap_k against c1, D_k, and retrieval along training;
prose in ``pages/encoders.md``."""

from __future__ import annotations

import xarray as xr

from simkit.report.spec import ClaimTable, FigurePage, Panel, Table, Text, TitlePage, format_pm, prose, rate_columns

P = prose("encoders")


def _first_last(name: str):
    """A variable over checkpoints at the first and the last one, each ± MCSE."""
    return lambda ds, i: "\n".join(format_pm(ds[name].values[i, j], ds[f"{name}_mcse"].values[i, j]) for j in (0, -1))


def _reasons(*names: str):
    def text(ds: xr.Dataset) -> str:
        out = [f"{s} ({n}): {r}" for n in names for s, r in zip(ds["setting"].values, ds[n].values) if str(r)]
        return ("Failures: " + "; ".join(out)) if out else "No setting failed these checks."
    return text


C1 = Table((("setting", "facet"),) + rate_columns() + (
    ("c1 fitted ± MCSE\nc1 exact", "{c1_estimate±c1_estimate_mcse}\n{c1_exact:.4f}"),
    ("c2 fitted ± MCSE\nc2 exact", "{c2_estimate±c2_estimate_mcse}\n{c2_exact:.4f}"),
    ("p: curve\np: dgap", "{curve_p:.2g}\n{dgap_p:.2g}")), heading="C1 at φ̂ (C7: the -rot settings)", size=7.5)
C2 = Table((("setting", "facet"), ("D_k slope ± SE", "d2_slope±d2_slope_se"), ("p(−1/2)", "d2_slope_p_half:.2g"),
    ("D_k verdict", lambda ds, i: str(ds["d2_verdict"].values[i]).upper()),
    ("top-1 first → last", _first_last("ret_top1")), ("recall@10 first → last", _first_last("ret_recall10")),
    ("CE(M̂,Q̂) first → last", _first_last("ret_ce")), ("p top-1 / p CE", "{ret_top1_p:.2g}\n{ret_ce_p:.2g}"),
    ("Spearman(risk, top-1)", "ret_spearman:+.2f")), heading="C2: the D_k rate and retrieval along training",
    verdict="ret_verdict")

CURVES = FigurePage(
    "gap_k and D_k at the trained encoder: Monte Carlo (±2 MCSE) against exact",
    (Panel("gap", fit="fit_gap", fit_range="k_min", reference="gap_exact", logy=True,
           title="{facet}: slope {slope±slope_se}", label="Monte Carlo ± 2 MCSE", fit_label="WLS fit (log k and 1/k)",
           reference_label="exact at φ̂"),
     Panel("k_gap", hline="c1_exact", fit=("c1_estimate", "c2_estimate"), fit_range="k_min",
           reference="k_gap_exact", title="{facet}: c1 {c1_estimate±c1_estimate_mcse}", label="Monte Carlo ± 2 MCSE",
           fit_label="fit c1 + c2/k", reference_label="exact at φ̂", hline_label="exact c1"),
     Panel("k_d2", title="{facet}: D_k slope {d2_slope±d2_slope_se}", reason="d2_verdict_reason",
           label="Monte Carlo ± 2 MCSE")),
    caption=P["curves_caption"])


def derive(ds: xr.Dataset) -> xr.Dataset:
    """Display quantities from the saved variables: k times gap_k, its exact curve and D_k."""
    k, out = ds["k"].astype(float), ds.copy()
    for name, src, long_name in (("k_gap", "gap", "k times gap_k"), ("k_gap_mcse", "gap_mcse", "MCSE of k_gap"),
                                 ("k_gap_exact", "gap_exact", "k times the exact gap"), ("k_d2", "d2", "k times D_k"),
                                 ("k_d2_mcse", "d2_mcse", "MCSE of k_d2")):
        out[name] = (k * ds[src]).assign_attrs(long_name=f"{long_name}, in nats", units="1")
    out["train_risk"] = ds["prep_train_risk"].rename(train_risk_dim0="ckpt")
    out["ce_ckpt"] = ds["prep_ce_ckpt"].rename(ce_ckpt_dim0="ckpt")
    return out


TRAINING = FigurePage("Along training: risk, exact CE, and retrieval at a database of k_ret points", tuple(
    Panel(v, x="ckpt", series="setting", logx=False, title=t, ylabel=t)
    for v, t in (("train_risk", "training risk (nats)"), ("ce_ckpt", "exact CE(M, Q) (nats)"),
                 ("ret_top1", "top-1 agreement"), ("ret_ce", "CE(M̂, Q̂) (nats)"))),
    caption=P["training_caption"], facet=None, per_page=2)


PAGES = (
    TitlePage(texts=(P["intro"],), then=(C1, Text(_reasons("verdict_reason")), C2,
                                         Text(_reasons("ret_verdict_reason", "d2_verdict_reason")), ClaimTable())),
    CURVES, TRAINING)
