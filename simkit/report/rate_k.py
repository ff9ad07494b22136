"""Report pages of the C1 study (``rate_k``): the verdict table, gap_k with its fit, k·gap_k
against c1, residuals and the control-variate gain."""

from __future__ import annotations

import math
import os
import textwrap

import numpy as np
import xarray as xr
from matplotlib.axes import Axes
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from scipy import stats

from simkit.report.document import (COLORS, SETTINGS_PER_PAGE, SMALL, TITLE, MINUS, ReportDocument, _decimals, _fit_mask,
                                    _json_attr, _label, _legend, _line, _log_axes, _marker, _num, _v, format_pm,
                                    provenance_pages, residual_legend, residual_panel, write_report)

__all__ = ["rate_k_sections", "rate_k_report"]

# the rate_k report (claim C1)

C1_TEXT = (
    "Claim C1 (finite-k bias, rate 1/k). The InfoNCE risk with k negatives exceeds log k plus the cross-entropy "
    "CE(M, Q) of the positive kernel M against the softmax retrieval kernel Q by gap_k = R_k − log k − CE, and this "
    "gap vanishes at rate 1/k, not at the rate 1/√k of earlier analyses. More precisely gap_k = c1/k + O(1/k²) with "
    "the exactly computable constant c1 = E_x[ m1(x)/Z(x) − (Z2(x)/Z(x)² − 1)/2 ] (docs/theory.md, C1). So a log–log "
    "regression of gap_k on k must give slope −1 and reject −1/2, and k·gap_k must approach c1.")


def _results_table(ds: xr.Dataset) -> tuple[list[str], list[list[str]], list[float], dict]:
    alpha = float(ds.attrs.get("alpha", np.nan))
    header = ["setting", "π", "d", "κ_M", "τ", "k_min", "slope ± jackknife SE",
              f"95% CI\n{100 * (1 - alpha):g}% CI (verdict)", "p-value of slope = −1/2",
              "c1 estimate ± MCSE\nc1 exact ± MCSE", "t of c1", "c2 estimate ± MCSE\nc2 exact ± MCSE", "t of c2",
              "p: MC curve vs exact\np: dgap vs exact", "verdict"]
    rows, colors = [], {}
    for i, s in enumerate(ds["setting"].values):
        f = {n: float(_v(ds, n, i)) for n in ("slope_se", "slope_ci_low", "slope_ci_high", "slope_verdict_low",
                                              "slope_verdict_high", "slope_p_half", "c1_z", "k_min", "kappa_pi")}
        dec = _decimals(f["slope_se"]) if f["slope_se"] > 0 else 4  # NaN compares False
        ci = f"[{_num(f['slope_ci_low'], dec)}, {_num(f['slope_ci_high'], dec)}]" \
            if math.isfinite(f["slope_ci_low"]) else "n/a"
        if math.isfinite(f["slope_verdict_low"]):
            ci += f"\n[{_num(f['slope_verdict_low'], dec)}, {_num(f['slope_verdict_high'], dec)}]"
        fam, verdict = str(_v(ds, "pi", i)), str(_v(ds, "verdict", i))
        fin = lambda x, fmt: format(x, fmt).replace("-", MINUS) if math.isfinite(x) else "n/a"  # noqa: E731
        rows.append([
            str(s), f"{fam}\nκ_π = {f['kappa_pi']:g}" if fam != "uniform" and math.isfinite(f["kappa_pi"]) else fam,
            f"{_v(ds, 'dim', i)}", f"{float(_v(ds, 'kappa_m', i)):g}", f"{float(_v(ds, 'tau', i)):g}",
            fin(f["k_min"], "g"), format_pm(_v(ds, "slope", i), f["slope_se"]), ci, fin(f["slope_p_half"], ".2g"),
            format_pm(_v(ds, "c1_estimate", i), _v(ds, "c1_estimate_mcse", i)) + "\n"
            + format_pm(_v(ds, "c1_exact", i), _v(ds, "c1_exact_mcse", i)), fin(f["c1_z"], "+.2f"),
            format_pm(_v(ds, "c2_estimate", i), _v(ds, "c2_estimate_mcse", i)) + "\n"
            + format_pm(_v(ds, "c2_exact", i), _v(ds, "c2_exact_mcse", i)), fin(float(_v(ds, "c2_t", i)), "+.2f"),
            fin(float(_v(ds, "curve_p", i)), ".2g") + "\n" + fin(float(_v(ds, "dgap_p", i)), ".2g"), verdict.upper()])
        colors[(i, len(header) - 1)] = COLORS.get(verdict, COLORS["fail"])
    return header, rows, [0.82, 0.62, 0.25, 0.36, 0.36, 0.42, 1.2, 1.3, 0.62, 1.15, 0.42, 1.2, 0.42, 0.82, 0.52], colors


def _title_page(doc: ReportDocument, ds: xr.Dataset) -> None:
    cfg = _json_attr(ds, "config", {})
    cfg = cfg if isinstance(cfg, dict) else {}
    n_blocks, n_set = ds.sizes.get("block", cfg.get("n_blocks", "?")), ds.sizes["setting"]
    alpha = float(ds.attrs.get("alpha", np.nan))
    zcrit = stats.t.isf(alpha / 2, int(n_blocks) - 1) if math.isfinite(alpha) and isinstance(n_blocks, int) else np.nan
    doc.new_page()
    doc.text(str(ds.attrs.get("title", "Claim C1")), size=TITLE, weight="bold", after=0.02)
    doc.text(f"simkit study '{ds.attrs.get('study', 'rate_k')}' · dataset created {ds.attrs.get('created', '?')} · "
             f"seed {ds.attrs.get('seed', '?')} · commit {str(ds.attrs.get('git_commit', '?'))[:12]}"
             f"{' · quick design' if cfg.get('quick') else ''}", size=SMALL, color="0.3", after=0.12)
    doc.text(C1_TEXT, after=0.1)
    doc.text(
        f"Method. For each setting (π, kernel M = vMF(x, κ_M), temperature τ, φ = identity on S^(d−1)) the study "
        f"runs {n_blocks} independent replicate blocks of {cfg.get('block_anchors', '?')} anchors. A streaming "
        f"InfoNCE estimator evaluates gap_k for every k = 1, 2, 4, …, {int(ds['k'].values.max())} from the same "
        f"negatives (common random numbers across k), with control variates whose conditional means are known "
        f"exactly, so that gap_k is estimated without the Monte Carlo noise of R_k and CE separately. The rate is the "
        f"slope of a weighted least-squares fit of log gap_k on log k and 1/k over k ≥ k_min (the 1/k term absorbs "
        f"the O(1/k²) correction; k_min = smallest grid k ≥ {cfg.get('k_min_factor', '?')} × the expansion scale); "
        f"the 'plain' slope omits the 1/k term. c1 and c2 come from a WLS fit of gap_k on 1/k and 1/k² over the same "
        f"range, and c1 is compared with its exact value (z-score). Every standard error is a delete-one-block "
        f"jackknife over the independent blocks, which accounts for the correlation across k; intervals use "
        f"Student t with {n_blocks} − 1 degrees of freedom. Values are printed as estimate ± MCSE (or SE).", after=0.1)
    verdicts = [str(v) for v in ds["verdict"].values]
    doc.heading(f"Regression results and verdicts: {verdicts.count('pass')} of {n_set} settings pass")
    header, rows, widths, colors = _results_table(ds)
    doc.table(header, rows, widths, colors=colors, size=8.0)
    doc.text(
        f"Verdict rule (α = {alpha:g}, dataset attribute 'alpha'). A setting passes when (i) the level-{1 - alpha:g} "
        f"jackknife t-interval of the slope (second line of the CI column) contains −1, (ii) slope = −1/2 is "
        f"rejected at level α, (iii) |t| ≤ t_(1−α/2, n−1) = {zcrit:.2f} for c1 and for c2, where t = (estimate − "
        f"exact)/√(MCSE² + MCSE_exact²) on n − 1 = {n_blocks} − 1 degrees of freedom, and (iv) the Monte Carlo gap "
        f"curve and the Z-free dgap_k = gap_k − gap_2k agree with the exact curve at every k jointly: the largest "
        f"studentised deviation over k, max_k |t_k|, against its Efron bootstrap law (9999 resamples of the blocks; "
        f"the exact curve's own error drawn from its covariance where it is Monte Carlo), p ≥ α. The exact curve and c2 are "
        f"computed by simkit.exact.curve, which shares no constant with the estimator's control variates. A setting one of whose tasks raised is marked 'error' whatever its checks (its summaries use "
        f"the finished blocks only). The dataset's own statement: "
        f"“{ds['verdict'].attrs.get('description', 'not recorded')}”.", size=SMALL)
    doc.text(
        f"False-failure rate. If C1 holds, checks (i), (iii) (two tests) and (iv) (two tests) each fail with "
        f"probability α (nominally: Student t approximations with jackknife standard errors, and the bootstrap "
        f"law of max |t|; simkit calibrate measures the real rates); check (ii) fails only for lack of power. So a setting for which "
        f"C1 is true fails with probability at most 5α = {5 * alpha:g}, and at least one of the {n_set} settings with "
        f"probability at most {5 * alpha * n_set:g} (union bound). Intervals, p and z "
        f"are functions of the estimates and standard errors shown, and carry no separate MCSE.", size=SMALL)
    errs = ds["cell_error"].values if "cell_error" in ds else [""] * n_set
    rows_bad = [i for i in range(n_set) if verdicts[i] != "pass" or str(errs[i])]
    bad = [[str(ds["setting"].values[i]), f"{verdicts[i]}: {_v(ds, 'verdict_reason', i) or '—'}", str(errs[i]) or "—"]
           for i in rows_bad]
    if bad:
        doc.heading("Failures and task errors")
        doc.table(["setting", "verdict: why", "task errors (variable cell_error)"], bad, [1.0, 4.0, 4.0],
                  colors={(i, 0): COLORS.get(verdicts[j], COLORS["fail"]) for i, j in enumerate(rows_bad)})
    else:
        doc.text("All settings pass; no task raised an error.", size=SMALL, weight="bold")


def _empty(ax: Axes, ds: xr.Dataset, i: int) -> bool:
    """Mark the panel of a setting without finite gap estimates (a failed cell); True if so."""
    if np.any(np.isfinite(ds["gap"].values[i])):
        return False
    why = f"no estimates: {_v(ds, 'verdict_reason', i) or 'failed'}. "
    why += str(_v(ds, "cell_error", i)) if "cell_error" in ds else ""
    ax.text(0.5, 0.5, "\n".join(textwrap.wrap(why, 40)), transform=ax.transAxes, ha="center", va="center",
            fontsize=SMALL, color=COLORS["fit"])
    ax.set(xticks=[], yticks=[], title=str(ds["setting"].values[i]))
    return True


def _gap_page(doc: ReportDocument, ds: xr.Dataset, idx: list[int]) -> None:
    k = ds["k"].values.astype(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.abs(2 * ds["gap_mcse"].values[idx] / ds["gap"].values[idx])
    rel = rel[np.isfinite(rel)]
    cap = "Points: gap_k estimated with control variates; error bars ±2 MCSE (sd over blocks / √n_blocks)"
    if rel.size:
        cap += f"; the largest is {100 * rel.max():.2g}% of gap_k" + (", most are hidden by the markers"
                                                                   if rel.max() < 0.05 else "")
    cap += ". "
    cap += ("Red line: the fitted log gap_k = a + b log k + c/k over the shaded fit range k ≥ k_min; grey: reference "
            "slopes 1/k (dashed) and 1/√k (dotted) through the data at k_min, C1 predicting the first; black: the "
            "exact gap (closed form, uniform π only).")
    fig, axes, ly = doc.figure("Finite-k gap on log–log axes: the rate is 1/k", 1, len(idx), caption=cap,
                               subtitle="slope of the WLS fit ± jackknife SE in each panel title")
    for ax, i in zip(axes[0], idx):
        if _empty(ax, ds, i):
            continue
        gap, se, kmin = ds["gap"].values[i], ds["gap_mcse"].values[i], float(_v(ds, "k_min", i))
        sel = _fit_mask(k, kmin)
        if sel.any():
            ax.axvspan(kmin / 1.25, k[-1] * 1.25, color=COLORS["span"], zorder=0)
            j = int(np.argmax(sel))
            ax.plot(k, gap[j] * k[j] / k, "--", color=COLORS["ref"], lw=0.9)
            ax.plot(k, gap[j] * np.sqrt(k[j] / k), ":", color=COLORS["ref"], lw=1.1)
            ax.plot(k[sel], ds["fit_gap"].values[i][sel], color=COLORS["fit"], lw=2.4, zorder=3)
        ex = ds["gap_exact"].values[i] if "gap_exact" in ds else np.full(k.size, np.nan)
        if np.any(np.isfinite(ex)):
            ax.plot(k, ex, color=COLORS["exact"], lw=0.6, zorder=4)
        ok = np.isfinite(gap) & (gap > 0)  # a log axis shows positive values only; clip the lower bars there
        ax.errorbar(k[ok], gap[ok], yerr=[np.minimum(2 * se[ok], 0.999 * gap[ok]), 2 * se[ok]], fmt="o", ms=3.5,
                    color=COLORS["data"], mfc="white", zorder=5)
        _log_axes(ax, k, gap)
        ax.set_title(f"{ds['setting'].values[i]}: slope {format_pm(_v(ds, 'slope', i), _v(ds, 'slope_se', i))}")
        ax.set(xlabel=_label(ds, "k"), ylabel=_label(ds, "gap", "gap_k = R_k − log k − CE"))
    _legend(fig, ly, [_marker(COLORS["data"], hollow=True, label="gap_k ± 2 MCSE"),
                      _line(COLORS["fit"], lw=2.4, label="WLS fit (log k and 1/k)"),
                      _line(COLORS["ref"], "--", label="reference slope 1/k"),
                      _line(COLORS["ref"], ":", label="reference slope 1/√k"),
                      _line(COLORS["exact"], lw=0.6, label="exact gap (uniform π)"),
                      Patch(color=COLORS["span"], label="fit range k ≥ k_min")])
    doc.save(fig)


def _kgap_page(doc: ReportDocument, ds: xr.Dataset, idx: list[int]) -> None:
    k = ds["k"].values.astype(float)
    cap = ("Top: k·gap_k over the whole grid; bottom: the fit range k ≥ k_min enlarged. Error bars ±2 MCSE "
           "(k_gap_mcse). Green: the exact c1 with a band of ±2 MCSE of the exact value (a thin line where c1 is "
           "exact). Red: the fitted k·(c1/k + c2/k²) = c1 + c2/k over the fit range, with c1, c2 from the WLS fit of "
           "gap_k on 1/k and 1/k². Black dashed (bottom): the exact prediction c1 + c2/k from the exact c1 and c2; black line: "
           "k times the exact gap curve (simkit.exact.curve.gap_curve), independent of the estimator's constants.")
    fig, axes, ly = doc.figure("k · gap_k approaches the predicted constant c1", 2, len(idx), caption=cap,
                               subtitle="estimated c1 ± jackknife MCSE in each panel title")
    for col, i in enumerate(idx):
        for row, ax in enumerate(axes[:, col]):
            if _empty(ax, ds, i):
                continue
            kg, se, kmin = ds["k_gap"].values[i], ds["k_gap_mcse"].values[i], float(_v(ds, "k_min", i))
            fsel = _fit_mask(k, kmin)
            sel = fsel if row else np.ones(k.shape, bool)
            c1, c1se = float(_v(ds, "c1_exact", i)), float(_v(ds, "c1_exact_mcse", i))
            if math.isfinite(c1):
                if c1se > 0:
                    ax.axhspan(c1 - 2 * c1se, c1 + 2 * c1se, color=COLORS["band"], alpha=0.25, lw=0)
                ax.axhline(c1, color=COLORS["band"], lw=0.8)
            a, b = float(_v(ds, "c1_estimate", i)), float(_v(ds, "c2_estimate", i))
            if math.isfinite(a) and math.isfinite(b) and fsel.any():
                kk = np.geomspace(k[fsel][0], k[-1], 200)
                ax.plot(kk, a + b / kk, color=COLORS["fit"], lw=1.3, zorder=3)
            c2 = float(_v(ds, "c2_exact", i))
            if row and math.isfinite(c1) and math.isfinite(c2) and sel.any():  # the expansion holds for k >= k_min
                kk = np.geomspace(k[sel][0], k[-1], 200)
                ax.plot(kk, c1 + c2 / kk, color=COLORS["exact"], lw=0.9, ls="--", zorder=4)
            if "gap_exact" in ds and np.any(np.isfinite(ds["gap_exact"].values[i])):
                ax.plot(k[sel], k[sel] * ds["gap_exact"].values[i][sel], color=COLORS["exact"], lw=0.8, zorder=4)
            ax.errorbar(k[sel], kg[sel], yerr=2 * se[sel], fmt="o", ms=3.5, mfc="white", color=COLORS["data"],
                        zorder=5)
            _log_axes(ax, k)
            if row:
                y = np.concatenate([kg[sel] - 2 * se[sel], kg[sel] + 2 * se[sel], [c1 - 2 * c1se, c1 + 2 * c1se]])
                y = y[np.isfinite(y)]
                if y.size:
                    pad = 0.08 * (y.max() - y.min()) + 1e-9 * max(1.0, abs(y.max()))
                    ax.set_ylim(y.min() - pad, y.max() + pad)
                if sel.any():
                    ax.set_xlim(k[sel][0] / 1.4, k[-1] * 1.4)
                ax.ticklabel_format(axis="y", useOffset=False)
                ax.set_title(f"fit range k ≥ {kmin:g}; exact c1 = {format_pm(c1, c1se).replace(' (exact)', '')}")
            else:
                ax.set_title(f"{ds['setting'].values[i]}: c1 "
                             f"{format_pm(_v(ds, 'c1_estimate', i), _v(ds, 'c1_estimate_mcse', i))}")
            ax.set(xlabel=_label(ds, "k"), ylabel=_label(ds, "k_gap", "k · gap_k"))
    _legend(fig, ly, [_marker(COLORS["data"], hollow=True, label="k·gap_k ± 2 MCSE"),
                      Patch(color=COLORS["band"], alpha=0.5, label="exact c1 ± 2 MCSE"),
                      _line(COLORS["fit"], lw=1.3, label="fit c1 + c2/k (k ≥ k_min)"),
                      _line(COLORS["exact"], ls="--", lw=0.9, label="exact c1 + c2/k"),
                      _line(COLORS["exact"], lw=0.8, label="k · exact gap_k")])
    doc.save(fig)


def _resid_page(doc: ReportDocument, ds: xr.Dataset, idx: list[int]) -> None:
    k = ds["k"].values.astype(float)
    cap = ("Standardised residuals (estimate − fit)/MCSE of the rate fit (top, on the log scale) and of the c1 fit "
           "(bottom). Filled points: k ≥ k_min, in the fit; hollow grey points: k < k_min, outside it, where the "
           "O(1/k²) remainder dominates and residuals are large by design; grey triangles at the edge: residuals "
           "beyond the axis range (the largest is given in the panel title). Dashed lines: ±2; dotted: ±3.")
    fig, axes, ly = doc.figure("Residuals of the two fits", 2, len(idx), caption=cap)
    for col, i in enumerate(idx):
        for row, (name, what) in enumerate((("resid_rate", "rate fit"), ("resid_c1", "c1 fit"))):
            ax = axes[row, col]
            if _empty(ax, ds, i):
                continue
            r, sel = ds[name].values[i], _fit_mask(k, float(_v(ds, "k_min", i)))
            worst = residual_panel(ax, k, r, sel)
            big = f"; largest off scale {worst}" if worst else ""
            ax.set(title=f"{ds['setting'].values[i]}: {what}{big}", xlabel=_label(ds, "k"),
                   ylabel=_label(ds, name, "standardised residual"))
    residual_legend(fig, ly)
    doc.save(fig)


def _variance_page(doc: ReportDocument, ds: xr.Dataset, idx: list[int]) -> None:
    k, n = ds["k"].values.astype(float), int(ds.sizes.get("block", 0))
    cap = ("Top: Monte Carlo standard error of gap_k with the control variates (gap_mcse) and without them "
           "(gap_plain_mcse: the exact per-anchor limit subtracted only). Bottom: the variance-reduction factor "
           "(gap_plain_mcse / gap_mcse)², i.e. how many times more blocks the plain estimator would need for the "
           "same precision.")
    if n > 1:
        cap += (f" Each MCSE is itself estimated from {n} blocks, so the factor is uncertain by roughly "
                f"±{200 / math.sqrt(n - 1):.0f}% (normal theory, 2/√(n_blocks − 1)).")
    fig, axes, ly = doc.figure("Variance reduction by the control variates", 2, len(idx), caption=cap)
    for col, i in enumerate(idx):
        top, bot = axes[:, col]
        if _empty(top, ds, i) | _empty(bot, ds, i):
            continue
        cv, pl = ds["gap_mcse"].values[i], ds["gap_plain_mcse"].values[i]
        top.plot(k, pl, "s-", color=COLORS["plain"], ms=3.5, mfc="white")
        top.plot(k, cv, "o-", color=COLORS["data"], ms=3.5)
        with np.errstate(divide="ignore", invalid="ignore"):
            gain = (pl / cv) ** 2
        ok = np.isfinite(gain) & (gain > 0)
        bot.plot(k[ok], gain[ok], "o-", color=COLORS["band"], ms=3.5)
        bot.axhline(1, color=COLORS["ref"], ls="--", lw=0.8)
        for ax, ys in ((top, (cv, pl)), (bot, (gain,))):
            _log_axes(ax, k, *ys)
            ax.set_xlabel(_label(ds, "k"))
        top.set(title=str(ds["setting"].values[i]), ylabel=_label(ds, "gap_mcse", "MCSE of gap_k"))
        bot.set_ylabel("variance-reduction factor")
    _legend(fig, ly, [Line2D([], [], marker="o", color=COLORS["data"], label="with control variates (gap_mcse)"),
                      Line2D([], [], marker="s", mfc="white", color=COLORS["plain"], label="plain (gap_plain_mcse)"),
                      Line2D([], [], marker="o", color=COLORS["band"], label="(plain / control-variate MCSE)²"),
                      _line(COLORS["ref"], "--", 0.8, label="no gain (factor 1)")])
    doc.save(fig)


_REQUIRED = ("setting", "k", "gap", "gap_mcse", "gap_plain_mcse", "k_gap", "k_gap_mcse", "fit_gap", "resid_rate",
             "resid_c1", "verdict")


def rate_k_sections(doc: ReportDocument, ds: xr.Dataset) -> None:
    """The pages of the C1 study (all but provenance), for its own report or the validation report."""
    missing = [v for v in _REQUIRED if v not in ds.variables]
    if missing:
        raise ValueError(f"'ds' must be a rate_k dataset; it lacks {', '.join(map(repr, missing))} "
                         f"(open the output of 'simkit run rate_k')")
    n = ds.sizes["setting"]
    groups = [list(range(j, min(n, j + SETTINGS_PER_PAGE))) for j in range(0, n, SETTINGS_PER_PAGE)]
    _title_page(doc, ds)
    for page in (_gap_page, _kgap_page, _resid_page, _variance_page):
        for idx in groups:
            page(doc, ds, idx)


def rate_k_report(ds: xr.Dataset, path: str | os.PathLike) -> int:
    """Write the PDF report of the C1 study (``studies/rate_k.py``) from its dataset alone.

    Parameters
    ----------
    ds : xarray.Dataset
        The study's dataset, e.g. ``xr.open_dataset(path, engine="h5netcdf")``: summaries over
        ``(setting, k)`` with their MCSEs, fit results per setting, and ``attrs`` with ``alpha``,
        ``config``, ``ademp``, ``errors`` and the provenance the engine records.
    path : str or os.PathLike
        Output PDF, written atomically.

    Returns
    -------
    int
        Number of pages: a title page (more if its table overflows), four figure pages per group
        of up to three settings, and the provenance pages (one for a run like the default one).

    Notes
    -----
    Pages: (1) claim C1, method, regression results and verdicts per setting, the verdict rule and
    its false-failure rate; (2) gap_k on log–log axes with the fit, reference slopes 1/k and 1/√k
    and the exact gap; (3) k·gap_k against the exact c1; (4) standardised residuals of both fits;
    (5) MCSE with and without the control variates; (6) provenance. Every printed estimate
    carries its MCSE or jackknife SE.

    Raises
    ------
    ValueError
        If ``ds`` lacks a variable the report needs (it is not a rate_k dataset).

    References
    ----------
    docs/theory.md, claim C1.
    """
    missing = [v for v in _REQUIRED if v not in ds.variables]
    if missing:
        raise ValueError(f"'ds' must be a rate_k dataset; it lacks {', '.join(map(repr, missing))} "
                         f"(open the output of 'simkit run rate_k')")

    def build(doc: ReportDocument) -> None:
        rate_k_sections(doc, ds)
        provenance_pages(doc, ds, claim_text="the finite-k InfoNCE bias decays as c1/k")

    footer = (f"simkit · {ds.attrs.get('study', 'rate_k')} · claim {ds.attrs.get('claim', 'C1')} · dataset created "
              f"{ds.attrs.get('created', '?')}")
    meta = {"Title": str(ds.attrs.get("title", "simkit rate_k report")), "Subject": "simkit claim C1"}
    return write_report(path, build, footer=footer, metadata=meta)
