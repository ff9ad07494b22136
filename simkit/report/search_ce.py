"""Report pages of the C2 study (``search_ce``), read from its saved dataset alone.

:func:`search_ce_sections` adds the study's pages to a :class:`~simkit.report.ReportDocument`;
the study's ``report()`` (:func:`simkit.report.study_report`) adds the provenance pages and writes
the PDF. Built from the generic pieces of :mod:`simkit.report.document`; nothing is recomputed.

Pages: (1) claim C2, method, regression results and verdicts, verdict rule and false-failure rate,
retrieval quality; (2) |D_k| on log-log axes with the fit and reference slopes; (3) k D_k and its
two parts against the derived constants; (4) top-1 agreement and recall@10 of the softmax against
the ideal empirical retrieval; (5) residuals; (6) MCSE with and without the control variates;
(7) provenance (added by study_report).
"""

from __future__ import annotations

import math
import textwrap

import numpy as np
import xarray as xr
from matplotlib.axes import Axes
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from simkit.report.document import (COLORS, MINUS, SETTINGS_PER_PAGE, SMALL, TITLE, ReportDocument, _decimals,
                                    _fit_mask, _json_attr, _label, _legend, _line, _log_axes, _marker, _num, _v,
                                    format_pm, residual_legend, residual_panel)

__all__ = ["search_ce_sections"]

C2_TEXT = (
    "Claim C2 (similarity-search interpretation). Take a query x ~ π and a database of k unseen points y_1, …, y_k "
    "~ π. The empirical softmax kernel Q_k(x, y_j) = e^{s(x,y_j)} / Σ_i e^{s(x,y_i)} is what a trained embedding "
    "retrieves; the ideal empirical kernel M_k(x, y_j) = m(x, y_j) / Σ_i m(x, y_i), with m = dM(x, ·)/dπ, is what "
    "the positive-pair generator M implies. C2 says that the InfoNCE risk with k negatives is the expected "
    "cross-entropy of ideal against softmax retrieval up to O(1/k): D_k = R_k − E CE(M_k, Q_k) = O(1/k), "
    "CE(P, Q) = −Σ_j P_j log Q_j (docs/theory.md, C2). So minimising InfoNCE learns retrieval that mimics the ideal "
    "retrieval, and a log–log regression of |D_k| on k must give slope −1 and reject −1/2.")

_REQUIRED = ("setting", "k", "d", "d_mcse", "d_abs", "k_d", "k_d_mcse", "fit_d_abs", "resid_rate", "resid_d1",
             "top1", "top1_mcse", "recall", "recall_mcse", "d_rb_mcse", "d_plain_mcse", "verdict")


def _check(ds: xr.Dataset) -> None:
    missing = [v for v in _REQUIRED if v not in ds.variables]
    if missing:
        raise ValueError(f"'ds' must be a search_ce dataset; it lacks {', '.join(map(repr, missing))} "
                         f"(open the output of 'simkit run search_ce')")


def _fin(x: float, fmt: str) -> str:
    return format(x, fmt).replace("-", MINUS) if math.isfinite(x) else "n/a"


def _results_table(ds: xr.Dataset):
    alpha = float(ds.attrs.get("alpha", np.nan))
    header = ["setting", "π", "d", "κ_M", "τ", "k_min", "sign of D_k (k ≥ k_min)", "slope ± SE",
              f"95% CI\n{100 * (1 - alpha):g}% CI (verdict)", "p-value of slope = −1/2", "d1 estimate ± MCSE",
              "d1 predicted ± MCSE", "z of d1 (diag.)", "verdict"]
    rows, colors = [], {}
    for i, s in enumerate(ds["setting"].values):
        f = {n: float(_v(ds, n, i)) for n in ("slope_se", "slope_ci_low", "slope_ci_high", "slope_verdict_low",
                                              "slope_verdict_high", "slope_p_half", "d1_z", "k_min", "kappa_pi",
                                              "d_sign", "k_sign")}
        dec = _decimals(f["slope_se"]) if f["slope_se"] > 0 else 4
        ci = f"[{_num(f['slope_ci_low'], dec)}, {_num(f['slope_ci_high'], dec)}]" \
            if math.isfinite(f["slope_ci_low"]) else "n/a"
        if math.isfinite(f["slope_verdict_low"]):
            ci += f"\n[{_num(f['slope_verdict_low'], dec)}, {_num(f['slope_verdict_high'], dec)}]"
        sign = {1.0: "positive", -1.0: "negative", 0.0: "changes"}.get(f["d_sign"], "n/a")
        if math.isfinite(f["k_sign"]) and f["k_sign"] > 1:
            sign += f"\n(one sign from k = {f['k_sign']:g})"
        fam, verdict = str(_v(ds, "pi", i)), str(_v(ds, "verdict", i))
        rows.append([
            str(s), f"{fam}\nκ_π = {f['kappa_pi']:g}" if fam != "uniform" and math.isfinite(f["kappa_pi"]) else fam,
            f"{_v(ds, 'dim', i)}", f"{float(_v(ds, 'kappa_m', i)):g}", f"{float(_v(ds, 'tau', i)):g}",
            _fin(f["k_min"], "g"), sign, format_pm(_v(ds, "slope", i), f["slope_se"]), ci,
            _fin(f["slope_p_half"], ".2g"), format_pm(_v(ds, "d1_estimate", i), _v(ds, "d1_estimate_mcse", i)),
            format_pm(_v(ds, "d1_exact", i), _v(ds, "d1_exact_mcse", i)), _fin(f["d1_z"], "+.2f"), verdict.upper()])
        colors[(i, len(header) - 1)] = COLORS.get(verdict, COLORS["fail"])
    return header, rows, [0.82, 0.6, 0.25, 0.35, 0.38, 0.45, 0.95, 1.15, 1.4, 0.62, 1.05, 1.05, 0.62, 0.5], colors


def _pm(value: float, se: float) -> str:
    """format_pm for a proportion: an MCSE of 0 means no variation over blocks, not an exact value."""
    if math.isfinite(value) and se == 0:
        return f"{value:.4f} ± 0 (no variation)"
    return format_pm(value, se)


def _retrieval_rows(ds: xr.Dataset) -> tuple[list[str], list[list[str]]]:
    k = ds["k"].values
    n_top = int(ds.attrs.get("n_top", 10))
    show = [int(kk) for kk in k if kk >= n_top]
    if len(show) > 5:  # a handful of k spread over the grid, always including k_max
        idx = np.unique(np.round(np.linspace(0, len(show) - 1, 5)).astype(int))
        show = [show[j] for j in idx]
    header = ["setting"] + [f"k = {kk}\ntop-1 · recall@{n_top}" for kk in show]
    rows = []
    for i, s in enumerate(ds["setting"].values):
        row = [str(s)]
        for kk in show:
            g = int(np.nonzero(k == kk)[0][0])
            row.append(f"{_pm(ds['top1'].values[i, g], ds['top1_mcse'].values[i, g])}\n"
                       f"{_pm(ds['recall'].values[i, g], ds['recall_mcse'].values[i, g])}")
        rows.append(row)
    return header, rows


def _title_page(doc: ReportDocument, ds: xr.Dataset) -> None:
    cfg = _json_attr(ds, "config", {})
    cfg = cfg if isinstance(cfg, dict) else {}
    n_blocks, n_set = ds.sizes.get("block", cfg.get("n_blocks", "?")), ds.sizes["setting"]
    alpha = float(ds.attrs.get("alpha", np.nan))
    n_top = int(ds.attrs.get("n_top", 10))
    doc.new_page()
    doc.text(str(ds.attrs.get("title", "Claim C2")), size=TITLE, weight="bold", after=0.02)
    doc.text(f"simkit study '{ds.attrs.get('study', 'search_ce')}' · dataset created {ds.attrs.get('created', '?')} · "
             f"seed {ds.attrs.get('seed', '?')} · commit {str(ds.attrs.get('git_commit', '?'))[:12]}"
             f"{' · quick design' if cfg.get('quick') else ''}", size=SMALL, color="0.3", after=0.12)
    doc.text(C2_TEXT, after=0.1)
    doc.text(
        f"Method. For each setting (π, kernel M = vMF(x, κ_M), temperature τ, φ = identity on S^(d−1)) the study "
        f"runs {n_blocks} independent replicate blocks; each draws one database of {int(ds['k'].values.max())} points "
        f"shared by {cfg.get('block_anchors', '?')} queries, and one streaming pass gives every k = 1, 2, 4, … "
        f"(common random numbers). Since CE(M_k, Q_k) = log S_k − V_k/W_k with S_k = Σ e^{{s_j}}, W_k = Σ m_j, "
        f"V_k = Σ m_j s_j, D_k = E log(1 + e^{{s0}}/S_k) + E[V_k/W_k − s0]. The estimator replaces the positive's "
        f"score "
        f"s0 by its exact conditional mean and subtracts six control variates whose conditional means are exactly "
        f"zero (e.g. (1/k) Σ m_j (s_j − μ_s(x)), since E_π m = 1 and E_π[m s] = μ_s), with coefficients per k from an "
        f"independent pilot: it is exactly unbiased. The rate is the slope of a weighted least-squares fit of "
        f"log |D_k| on log k and 1/k over k ≥ k_min, k_min = smallest grid k ≥ {cfg.get('k_min_factor', '?')} × "
        f"max(E[Z2/Z²], E[m1/Z], w2), fixed in advance: the expansion of D_k is in powers of these over k, w2 = "
        f"E_x E_π[m²] being the importance weights' second moment. d1 and d2 come from a WLS fit of D_k on 1/k and "
        f"1/k²; d1 is compared with the value derived by the delta method, d1 = E_x[m1/Z] − E_x Cov_M(m, s) "
        f"(a diagnostic, not part of the verdict). Standard errors are delete-one-block jackknives; intervals use "
        f"Student t with {n_blocks} − 1 degrees of freedom. Values are printed as estimate ± MCSE (or SE).", after=0.1)
    verdicts = [str(v) for v in ds["verdict"].values]
    doc.heading(f"Regression results and verdicts: {verdicts.count('pass')} of {n_set} settings pass")
    header, rows, widths, colors = _results_table(ds)
    doc.table(header, rows, widths, colors=colors, size=7.5)
    doc.text(
        f"Verdict rule (α = {alpha:g}, dataset attribute 'alpha'). A setting passes when (i) the block means of D_k "
        f"keep one sign for k ≥ k_min (otherwise no log-log fit is attempted and the setting fails), (ii) the "
        f"level-{1 - alpha:g} jackknife t-interval of the slope (second line of the CI column) contains −1 and "
        f"(iii) slope = −1/2 is rejected at level α. A setting one of whose tasks raised is marked 'error'. "
        f"False-failure rate: if C2 holds, (ii) fails with probability α (nominal: t approximation with a jackknife "
        f"SE); (i) and (iii) fail only by lack of precision; so at most {alpha:g} per setting and "
        f"{1 - (1 - alpha) ** n_set:.2g} for the {n_set} settings together.", size=SMALL)
    doc.new_page()
    doc.heading("Retrieval quality: softmax retrieval Q_k against the ideal retrieval M_k")
    rh, rr = _retrieval_rows(ds)
    doc.table(rh, rr, [1.0] + [1.2] * (len(rh) - 1), size=7.5)
    n_rank = min(int(cfg.get("rank_anchors", 0) or 0), int(cfg.get("block_anchors", 0) or 0))
    doc.text(
        f"Top-1: fraction of queries whose most similar database point under Q_k is also the most likely under M_k; "
        f"recall@{n_top}: overlap of the two top-{n_top} sets divided by {n_top}. Means over "
        f"{n_rank or '?'} queries per block, ± MCSE over the {n_blocks} blocks. For uniform π with τ = 1/κ_M, Q = M "
        f"and both orders coincide (exactly 1); elsewhere Q_k ranks by x·y, M_k by κ_M x·y − log π(y), and the "
        f"agreement falls as the database grows: C2 is a statement about the cross-entropy, not about exact ranks.",
        size=SMALL)
    errs = ds["cell_error"].values if "cell_error" in ds else [""] * n_set
    bad = [i for i in range(n_set) if verdicts[i] != "pass" or str(errs[i])]
    if bad:
        doc.heading("Failures and task errors")
        doc.table(["setting", "verdict: why", "task errors (variable cell_error)"],
                  [[str(ds["setting"].values[i]), f"{verdicts[i]}: {_v(ds, 'verdict_reason', i) or '—'}",
                    str(errs[i]) or "—"] for i in bad], [1.0, 4.0, 4.0],
                  colors={(r, 0): COLORS.get(verdicts[i], COLORS["fail"]) for r, i in enumerate(bad)})
    else:
        doc.text("All settings pass; no task raised an error.", size=SMALL, weight="bold")


def _empty(ax: Axes, ds: xr.Dataset, i: int) -> bool:
    if np.any(np.isfinite(ds["d"].values[i])):
        return False
    why = f"no estimates: {_v(ds, 'verdict_reason', i) or 'failed'}. "
    why += str(_v(ds, "cell_error", i)) if "cell_error" in ds else ""
    ax.text(0.5, 0.5, "\n".join(textwrap.wrap(why, 40)), transform=ax.transAxes, ha="center", va="center",
            fontsize=SMALL, color=COLORS["fit"])
    ax.set(xticks=[], yticks=[], title=str(ds["setting"].values[i]))
    return True


def _rate_page(doc: ReportDocument, ds: xr.Dataset, idx: list[int]) -> None:
    k = ds["k"].values.astype(float)
    cap = ("Points: |D_k| estimated with control variates, filled where D_k > 0 and hollow where D_k < 0; error bars "
           "±2 MCSE (clipped at the axis). D_1 > 0 always, so a negative limit d1 means one sign change, at small k. "
           "Red line: the fitted log |D_k| = a + b log k + c/k over the shaded fit range k ≥ k_min; grey: reference "
           "slopes 1/k (dashed) and 1/√k (dotted) through the data at k_min, C2 predicting the first.")
    fig, axes, ly = doc.figure("|D_k| = |R_k − E CE(M_k, Q_k)| on log–log axes: the rate is 1/k", 1, len(idx),
                               caption=cap, subtitle="slope of the WLS fit ± jackknife SE in each panel title")
    for ax, i in zip(axes[0], idx):
        if _empty(ax, ds, i):
            continue
        d, se, kmin = ds["d"].values[i], ds["d_mcse"].values[i], float(_v(ds, "k_min", i))
        ad = np.abs(d)
        sel = _fit_mask(k, kmin)
        if sel.any():
            ax.axvspan(kmin / 1.25, k[-1] * 1.25, color=COLORS["span"], zorder=0)
            j = int(np.argmax(sel))
            ax.plot(k, ad[j] * k[j] / k, "--", color=COLORS["ref"], lw=0.9)
            ax.plot(k, ad[j] * np.sqrt(k[j] / k), ":", color=COLORS["ref"], lw=1.1)
            fit = ds["fit_d_abs"].values[i]
            if np.any(np.isfinite(fit[sel])):
                ax.plot(k[sel], fit[sel], color=COLORS["fit"], lw=2.4, zorder=3)
        ok = np.isfinite(ad) & (ad > 0)
        for pos, mfc in ((True, COLORS["data"]), (False, "white")):
            m = ok & ((d > 0) == pos)
            if m.any():
                ax.errorbar(k[m], ad[m], yerr=[np.minimum(2 * se[m], 0.999 * ad[m]), 2 * se[m]], fmt="o", ms=3.5,
                            color=COLORS["data"], mfc=mfc, zorder=5)
        _log_axes(ax, k, ad[ok])
        ax.set_title(f"{ds['setting'].values[i]}: slope {format_pm(_v(ds, 'slope', i), _v(ds, 'slope_se', i))}")
        ax.set(xlabel=_label(ds, "k"), ylabel="|D_k| (nats)")
    _legend(fig, ly, [_marker(COLORS["data"], label="D_k > 0, ± 2 MCSE"),
                      _marker(COLORS["data"], hollow=True, label="D_k < 0 (|D_k| shown)"),
                      _line(COLORS["fit"], lw=2.4, label="WLS fit (log k and 1/k)"),
                      _line(COLORS["ref"], "--", label="reference slope 1/k"),
                      _line(COLORS["ref"], ":", label="reference slope 1/√k"),
                      Patch(color=COLORS["span"], label="fit range k ≥ k_min")])
    doc.save(fig)


def _constant_page(doc: ReportDocument, ds: xr.Dataset, idx: list[int]) -> None:
    k = ds["k"].values.astype(float)
    cap = ("Top: k·D_k (blue) and its two parts over the whole grid: k·E log(1 + e^{s0}/S_k) (orange squares), "
           "which tends to E[m1/Z], and k·(E[V_k/W_k] − E s0) (green triangles), which tends to −E Cov_M(m, s), the "
           "bias of self-normalised retrieval; horizontal lines: the derived limits. Bottom: k·D_k in the fit range "
           "k ≥ k_min, error bars ±2 MCSE; green band: the derived d1 ± 2 MCSE (a line where exact); red: the fitted "
           "d1 + d2/k from the WLS fit of D_k on 1/k and 1/k².")
    fig, axes, ly = doc.figure("k · D_k approaches the derived constant d1 = E[m1/Z] − E Cov_M(m, s)", 2, len(idx),
                               caption=cap, subtitle="estimated d1 ± jackknife MCSE in each panel title")
    for col, i in enumerate(idx):
        top, bot = axes[:, col]
        if _empty(top, ds, i) | _empty(bot, ds, i):
            continue
        kd, se, kmin = ds["k_d"].values[i], ds["k_d_mcse"].values[i], float(_v(ds, "k_min", i))
        sel = _fit_mask(k, kmin)
        pos, snis = float(_v(ds, "pos_exact", i)), float(_v(ds, "snis_exact", i))
        d1, d1se = float(_v(ds, "d1_exact", i)), float(_v(ds, "d1_exact_mcse", i))
        top.plot(k, k * ds["pos_term"].values[i], "s-", color=COLORS["plain"], ms=3, mfc="white", lw=0.8)
        top.plot(k, k * ds["snis_term"].values[i], "^-", color=COLORS["band"], ms=3, mfc="white", lw=0.8)
        top.plot(k, kd, "o-", color=COLORS["data"], ms=3.5, lw=0.8)
        for val, c in ((pos, COLORS["plain"]), (-snis, COLORS["band"]), (d1, COLORS["data"])):
            if math.isfinite(val):
                top.axhline(val, color=c, lw=0.7, ls="--")
        _log_axes(top, k)
        d1_est = format_pm(_v(ds, "d1_estimate", i), _v(ds, "d1_estimate_mcse", i))
        top.set(title=f"{ds['setting'].values[i]}: d1 {d1_est}",
                xlabel=_label(ds, "k"), ylabel="k × term (nats)")
        if math.isfinite(d1):
            if d1se > 0:
                bot.axhspan(d1 - 2 * d1se, d1 + 2 * d1se, color=COLORS["band"], alpha=0.25, lw=0)
            bot.axhline(d1, color=COLORS["band"], lw=0.8)
        a, b = float(_v(ds, "d1_estimate", i)), float(_v(ds, "d2_estimate", i))
        if math.isfinite(a) and math.isfinite(b) and sel.any():
            kk = np.geomspace(k[sel][0], k[-1], 200)
            bot.plot(kk, a + b / kk, color=COLORS["fit"], lw=1.3, zorder=3)
        bsel = sel if sel.any() else np.ones(k.shape, bool)
        bot.errorbar(k[bsel], kd[bsel], yerr=2 * se[bsel], fmt="o", ms=3.5, mfc="white", color=COLORS["data"], zorder=5)
        _log_axes(bot, k)
        y = np.concatenate([kd[bsel] - 2 * se[bsel], kd[bsel] + 2 * se[bsel], [d1 - 2 * d1se, d1 + 2 * d1se]])
        y = y[np.isfinite(y)]
        if y.size:
            pad = 0.08 * (y.max() - y.min()) + 1e-9 * max(1.0, abs(y.max()))
            bot.set_ylim(y.min() - pad, y.max() + pad)
        bot.set_xlim(k[bsel][0] / 1.4, k[-1] * 1.4)
        bot.ticklabel_format(axis="y", useOffset=False)
        bot.set(title=f"fit range k ≥ {kmin:g}; derived d1 = {format_pm(d1, d1se).replace(' (exact)', '')}",
                xlabel=_label(ds, "k"), ylabel=_label(ds, "k_d", "k · D_k"))
    _legend(fig, ly, [Line2D([], [], marker="o", color=COLORS["data"], label="k·D_k"),
                      Line2D([], [], marker="s", mfc="white", color=COLORS["plain"], label="k·positive-weight term"),
                      Line2D([], [], marker="^", mfc="white", color=COLORS["band"], label="k·self-normalisation term"),
                      _line("0.3", "--", 0.7, label="derived limits"),
                      Patch(color=COLORS["band"], alpha=0.5, label="derived d1 ± 2 MCSE"),
                      _line(COLORS["fit"], lw=1.3, label="fit d1 + d2/k")])
    doc.save(fig)


def _retrieval_page(doc: ReportDocument, ds: xr.Dataset, idx: list[int]) -> None:
    k = ds["k"].values.astype(float)
    n_top = int(ds.attrs.get("n_top", 10))
    cap = (f"Top: top-1 agreement, the fraction of queries for which the most similar database point under the "
           f"softmax kernel Q_k is also the most likely under the ideal kernel M_k. Bottom: recall@{n_top}, the "
           f"overlap of the two top-{n_top} sets over {n_top} (k ≥ {n_top}). Error bars ±2 MCSE over blocks (mostly "
           f"hidden by the markers). For uniform π with τ = 1/κ_M both kernels order the database identically.")
    fig, axes, ly = doc.figure("Retrieval quality: softmax search against ideal search on the same database", 2,
                               len(idx), caption=cap, subtitle=f"top row: top-1 agreement; bottom row: recall@{n_top}; "
                               "panel titles: the value at the largest k ± MCSE")
    for col, i in enumerate(idx):
        for row, (name, what) in enumerate((("top1", "top-1 agreement"), ("recall", f"recall@{n_top}"))):
            ax = axes[row, col]
            v, se = ds[name].values[i], ds[f"{name}_mcse"].values[i]
            ok = np.isfinite(v) & (k >= n_top)
            if not ok.any():
                ax.text(0.5, 0.5, "no estimates", transform=ax.transAxes, ha="center", fontsize=SMALL)
                ax.set(xticks=[], yticks=[], title=str(ds["setting"].values[i]))
                continue
            ax.errorbar(k[ok], v[ok], yerr=2 * np.nan_to_num(se[ok]), fmt="o-", ms=3.5, lw=0.8, color=COLORS["data"])
            _log_axes(ax, k)
            ax.set_ylim(-0.02, 1.05)
            g = int(np.nonzero(ok)[0][-1])
            ax.set_title(f"{ds['setting'].values[i]}: {_pm(v[g], se[g])} at k = {k[g]:g}", fontsize=8.5)
            ax.set(xlabel=_label(ds, "k"), ylabel=what)
    _legend(fig, ly, [_marker(COLORS["data"], label="block mean ± 2 MCSE")])
    doc.save(fig)


def _resid_page(doc: ReportDocument, ds: xr.Dataset, idx: list[int]) -> None:
    k = ds["k"].values.astype(float)
    cap = ("Standardised residuals (estimate − fit)/MCSE of the rate fit (top, on the log scale) and of the d1 fit "
           "(bottom). Filled points: k ≥ k_min, in the fit; hollow grey points: k < k_min, outside it, where higher "
           "orders of the expansion dominate and residuals are large by design; grey triangles at the edge: residuals "
           "beyond the axis range (the largest is given in the panel title). Dashed lines: ±2; dotted: ±3.")
    fig, axes, ly = doc.figure("Residuals of the two fits", 2, len(idx), caption=cap)
    for col, i in enumerate(idx):
        for row, (name, what) in enumerate((("resid_rate", "rate fit"), ("resid_d1", "d1 fit"))):
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
    cap = ("Top: Monte Carlo standard error of D_k for three estimators: the plain difference l_k − CE(M_k, Q_k) "
           "(d_plain_mcse), the same with the positive's score replaced by its exact conditional mean (d_rb_mcse), "
           "and with the six control variates on top (d_mcse). Bottom: variance-reduction factors (plain / "
           "control-variate MCSE)² and (conditional-mean-only / control-variate MCSE)²: how many times more blocks "
           "the simpler estimator would need for the same precision.")
    if n > 1:
        cap += (f" Each MCSE is estimated from {n} blocks, so a factor is uncertain by roughly "
                f"±{200 / math.sqrt(n - 1):.0f}% (normal theory).")
    fig, axes, ly = doc.figure("Variance reduction: conditional mean of the positive's score and control variates",
                               2, len(idx), caption=cap)
    for col, i in enumerate(idx):
        top, bot = axes[:, col]
        if _empty(top, ds, i) | _empty(bot, ds, i):
            continue
        cv, rb, pl = ds["d_mcse"].values[i], ds["d_rb_mcse"].values[i], ds["d_plain_mcse"].values[i]
        top.plot(k, pl, "s-", color=COLORS["plain"], ms=3.5, mfc="white")
        top.plot(k, rb, "^-", color=COLORS["ref"], ms=3.5, mfc="white")
        top.plot(k, cv, "o-", color=COLORS["data"], ms=3.5)
        with np.errstate(divide="ignore", invalid="ignore"):
            g1, g2 = (pl / cv) ** 2, (rb / cv) ** 2
        for g, mk, c in ((g1, "s", COLORS["plain"]), (g2, "^", COLORS["ref"])):
            ok = np.isfinite(g) & (g > 0)
            bot.plot(k[ok], g[ok], mk + "-", color=c, ms=3.5)
        bot.axhline(1, color="0.3", ls="--", lw=0.8)
        _log_axes(top, k, cv, rb, pl)
        allg = np.concatenate([g1, g2])
        _log_axes(bot, k, allg[np.isfinite(allg) & (allg > 0)], np.array([1.0]))
        top.set(title=str(ds["setting"].values[i]), xlabel=_label(ds, "k"), ylabel="MCSE of D_k (nats)")
        bot.set(xlabel=_label(ds, "k"), ylabel="variance-reduction factor")
    _legend(fig, ly, [Line2D([], [], marker="o", color=COLORS["data"], label="control variates (d_mcse)"),
                      Line2D([], [], marker="^", mfc="white", color=COLORS["ref"], label="conditional mean only"),
                      Line2D([], [], marker="s", mfc="white", color=COLORS["plain"], label="plain difference"),
                      Line2D([], [], marker="s", color=COLORS["plain"], label="(plain / CV MCSE)²"),
                      Line2D([], [], marker="^", color=COLORS["ref"], label="(cond. mean / CV MCSE)²"),
                      _line("0.3", "--", 0.8, label="factor 1")])
    doc.save(fig)


def search_ce_sections(doc: ReportDocument, ds: xr.Dataset) -> None:
    """The pages of the C2 study (all but provenance), for its own report or the validation report."""
    _check(ds)
    n = ds.sizes["setting"]
    groups = [list(range(j, min(n, j + SETTINGS_PER_PAGE))) for j in range(0, n, SETTINGS_PER_PAGE)]
    _title_page(doc, ds)
    for page in (_rate_page, _constant_page, _retrieval_page, _resid_page, _variance_page):
        for idx in groups:
            page(doc, ds, idx)
