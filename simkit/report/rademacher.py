"""Report of the C3 complexity study (``rademacher``): the k- and n-exponents with tests, power and
verdict; R̂_n against k and n; the centred estimator's variance reduction and the optimiser's work;
prose in ``pages/rademacher.md``."""

from __future__ import annotations

import math

import numpy as np
import xarray as xr

from simkit.report.document import format_pm
from simkit.report.spec import FigurePage, Panel, Table, Text, TitlePage, View, config, prose, render

P = prose("rademacher")
_NAME = {"infonce": "InfoNCE ℓ_k", "pairsum": "control: Σ_j log(1+e^{s_j−s_0})"}


EXPONENTS = Table((("loss class", "name"), ("R̂_n at k = 1", "c_first"), ("R̂_n at k_max", "c_last"),
    ("k-exponent b ± SE", "slope±slope_se"), ("upper 1 − α bound of b", "slope_upper:.3f"),
    ("p of H0: b ≤ 0", "slope_p:.2g"), ("b detected w.p. 90%", "slope_mde:.3f"),
    ("gain of the last start (largest over k)", "gain_top"), ("role → outcome", "outcome")), dim="loss",
    verdict="role_verdict", heading="Exponents, tests and verdict: {verdict}")

K_PAGE = FigurePage("Rademacher complexity against k, and its sensitivity to the optimiser's restarts", (
    Panel("complexity", also=("complexity_first",), fit="complexity_fit", fit_range="k_fit_min",
          logy=True, title="{name}: b = {slope±slope_se}", ylabel="R̂_n (nats)", label="R̂_n, best of all starts ± 2 MCSE",
          fit_label="fit c·k^b"),
    Panel("shortfall", series="restart", ylabel="shortfall (nats)", title="{name}: shortfall of the best of r starts"),
    Panel("slope_by_restart", x="restart", band="slope_by_restart_se", logx=False, title="{name}: b with r starts", ylabel="exponent b",
          label="b ± 2 jackknife SE")),
    caption=P["k_caption"], facet="loss")
N_PAGE = FigurePage("InfoNCE: R̂_n against n, and the share of suprema each start raises", (
    Panel("complexity_n", x="n", series="kn", logy=True, ylabel="R̂_n (nats)",
          title="R̂_n against n; n-exponents {n_exponents}"),
    Panel("share_improved", series="restart", ylabel="share", title="share of suprema raised by start r")),
    caption=P["n_caption"], facet=None)
CENTRING = FigurePage("Centring and the optimiser's work", (
    Panel("complexity_mcse", also=("complexity_uncentred_mcse",), logy=True, label="centred MCSE",
          title="{name}: MCSE of R̂_n"),
    Panel("centring_gain", also=("nfev_per_run",), logy=True, label="variance-reduction factor",
          title="{name}: variance reduction; evaluations per run")),
    caption=P["centring_caption"], facet="loss")


def derive(ds: xr.Dataset) -> xr.Dataset:
    """Display quantities from the saved variables: the first start's R̂_n, the fitted power law c k^b
    over the fit range (c through the weighted geometric mean of the data), the centring gain, the outcome."""
    k, kmin = ds["k"].astype(float), float(config(ds).get("k_fit_min", 16))
    sel = (k >= kmin) & (ds["complexity"] > 0)
    logc = (np.log(ds["complexity"].where(sel)) - ds["slope"] * np.log(k)).mean("k")
    flagged = ds["slope_p"] < float(ds.attrs.get("alpha", np.nan))
    claim = ds["loss"] == "infonce"
    gain = ds["restart_gain_last"].fillna(-np.inf).argmax("k")
    R = ds.sizes["restart"]
    out = ds.assign(
        k_fit_min=xr.DataArray(kmin), name=("loss", [_NAME.get(str(v), str(v)) for v in ds["loss"].values]),
        complexity_first=ds["complexity_by_restart"].isel(restart=0).assign_attrs(
            long_name="R̂_n of the first start θ_0 = I alone, in nats", units="1"),
        complexity_fit=(np.exp(logc) * k ** ds["slope"]).where(k >= kmin),
        centring_gain=((ds["complexity_uncentred_mcse"] / ds["complexity_mcse"]) ** 2).assign_attrs(
            long_name="variance-reduction factor / evaluations per run", units="1"),
        c_first=ds["complexity"].isel(k=0), c_first_mcse=ds["complexity_mcse"].isel(k=0),
        c_last=ds["complexity"].isel(k=-1), c_last_mcse=ds["complexity_mcse"].isel(k=-1),
        gain_top=ds["restart_gain_last"].isel(k=gain), gain_top_mcse=ds["restart_gain_last_mcse"].isel(k=gain),
        shortfall=ds["restart_shortfall"].isel(restart=slice(0, R - 1)).assign_attrs(
            long_name="shortfall of the best of r starts, in nats", units="1"),
        shortfall_mcse=ds["restart_shortfall_mcse"].isel(restart=slice(0, R - 1)),
        outcome=xr.where(claim, xr.where(flagged, "claim: GROWTH DETECTED", "claim: growth not detected"),
                         xr.where(flagged, "control: growth detected", "control: NOT DETECTED")),
        role_verdict=xr.where(claim != flagged, "pass", "fail").assign_attrs(long_name="role met"))
    out["complexity_fit"].attrs = {"long_name": "fitted c k^b, in nats", "units": "1"}
    alpha, n_tests = float(ds.attrs.get("alpha", np.nan)), 1 + ds.sizes["kn"]
    return out.assign_attrs(n_tests=n_tests, ff_all=1 - (1 - alpha) ** n_tests, b_log=1 / math.log(float(k[-1])))


def _n_curve(ds: xr.Dataset) -> xr.Dataset:
    one = ds.sel(loss="infonce") if "infonce" in ds["loss"].values else ds.isel(loss=0)
    ex = ", ".join(f"{format_pm(a, b)} (k = {int(kk)})" for a, b, kk in
                   zip(one["n_slope"].values, one["n_slope_se"].values, one["kn"].values))
    return one.assign(n_exponents=xr.DataArray(ex))


def _n_table(doc, one: xr.Dataset) -> None:
    """R̂_n ± MCSE at each n (a column each) for each k of the n sweep, with the n-exponent."""
    render(doc, one, (Table((("k", "facet"),) + tuple(
        (f"R̂_n at n = {int(n)}", (lambda j: lambda d, i: format_pm(d["complexity_n"].values[j, i],
                                                                  d["complexity_n_mcse"].values[j, i]))(j))
        for j, n in enumerate(one["n"].values)) + (("n-exponent ± SE", "n_slope±n_slope_se"),
                                                    ("p of H0: exponent ≤ −1/2", "n_slope_p:.2g")),
        dim="kn", verdict=None, heading="InfoNCE: R̂_n against n"),))


PAGES = (
    TitlePage(texts=(P["claim"], P["method"]), then=(EXPONENTS,)), View(_n_curve, (_n_table, Text(P["rule"]))),
    K_PAGE, View(_n_curve, (N_PAGE,)), CENTRING)
