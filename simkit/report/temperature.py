"""PDF report of the C5 study (``studies/temperature.py``), read from its saved dataset alone.

Built from the generic pieces of :mod:`simkit.report` (:class:`~simkit.report.ReportDocument`,
:func:`~simkit.report.format_pm` and the plotting helpers); nothing is recomputed. The study's
``report()`` (:meth:`simkit.runner.Study.report`) adds these pages and the provenance pages.

Pages: (1) claim C5, method, the three checks per setting with verdicts, rules and false-failure
rates, findings; (2) one table per setting over tau (CE, c1, scales, KL, gap, each with its
MCSE); (3) CE(tau), exact and Monte Carlo, with the bound H and z-scores; (4) c1(tau) and the
expansion scales; (5) KL(Q || pi) against 2/tau; (6) gap_k at fixed k and k gap_k against c1;
(7) the norms clause (pre-registered, protocols/temperature.md): G, G·τ, the sensitivity S of the gap to the
negatives' embedding norms and its controls, the rule and the verdicts, and their figure; (8) provenance.
"""

from __future__ import annotations

import math

import numpy as np
import xarray as xr
from matplotlib.axes import Axes
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from simkit.stats.analysis import combine_verdicts
from simkit.report.document import (COLORS, LEADING, SETTINGS_PER_PAGE, SMALL, ReportDocument, _json_attr, _legend,
                                    _line, _marker, _power_label, _v, format_pm)
from simkit.report.spec import TitlePage, fin, render, require

__all__ = ["temperature_sections"]

C5_TEXT = (
    "Claim C5 (temperature as a regulariser). With score s(x, y) = φ(x)·φ(y)/τ, the softmax retrieval kernel "
    "Q(x, dy) = e^{s(x,y)} π(dy)/Z(x) has density q = e^s/Z with e^{−2/τ} ≤ q ≤ e^{2/τ}, so KL(Q(x,·) ‖ π) ≤ 2/τ "
    "for every anchor x and every embedding: a high temperature keeps Q close to π. As τ → 0 the bound is void, "
    "and the finite-k bias of InfoNCE grows (docs/theory.md, section 2 and C5). The cross-entropy CE(M, Q) ≥ H = "
    "−E_x KL(M(x,·) ‖ π), with equality only when Q = M.")

_REQUIRED = ("setting", "tau", "k", "ce_exact", "ce_estimate", "ce_estimate_mcse", "ce_z", "c1_exact", "z2_ratio",
             "kl_bound", "kl_max", "kl_max_mcse", "kl_mean", "kl_mean_exact", "gap", "gap_mcse", "k_gap",
             "verdict_kl", "verdict_ce", "verdict_c1")


def _pm(value: float, se: float) -> str:
    """format_pm, but an exact value (MCSE 0) as four significant digits, without '(exact)'."""
    return fin(value, ".4g") if float(se) == 0 and math.isfinite(float(value)) else format_pm(value, se)


def _k_shown(ds: xr.Dataset) -> tuple[int, int]:
    cfg = _json_attr(ds, "config", {})
    k = ds["k"].values
    kf = int(cfg.get("k_fixed", 64)) if isinstance(cfg, dict) else 64
    return (kf if kf in k else int(k[min(len(k) - 1, 6)])), int(k[-1])


def _tau_axes(ax: Axes, taus: np.ndarray) -> None:
    """Log tau axis over the grid with labels such as 0.02, 0.1, 1, 10."""
    ax.set_xscale("log")
    ax.set_xlim(taus.min() / 1.3, taus.max() * 1.3)
    ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())


def _log_y(ax: Axes, *ys: np.ndarray, pad: float = 3.0) -> None:
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: _power_label(v)))
    ax.yaxis.set_minor_formatter(NullFormatter())
    y = np.concatenate([np.ravel(a) for a in ys]) if ys else np.array([])
    y = y[np.isfinite(y) & (y > 0)]
    if y.size:
        ax.set_ylim(y.min() / pad, y.max() * pad)



def _log_err(v: np.ndarray, se: np.ndarray) -> list[np.ndarray]:
    """±2 MCSE bars for positive values on a log axis: the lower bar clipped above zero, NaN as 0."""
    se2 = np.nan_to_num(2 * np.asarray(se, float), nan=0.0)
    return [np.clip(np.minimum(se2, 0.999 * v), 0.0, None), se2]


def _kappa_line(ax: Axes, ds: xr.Dataset, i: int) -> None:
    km = float(_v(ds, "kappa_m", i))
    if math.isfinite(km) and km > 0:
        ax.axvline(1.0 / km, color=COLORS["ref"], ls=":", lw=1.0, zorder=1)


# ------------------------------------------------------------------------------------------------
# title page and tables

def _checks_table(ds: xr.Dataset):
    header = ["setting", "π", "d", "κ_M", "(i) KL ≤ 2/τ: largest KL_max/(2/τ) ± MCSE",
              "(ii) CE Monte Carlo = exact: largest |z|", "(iii) bias inflation: |c1(τ_min)| / max |c1(τ ≥ 1/κ_M)|",
              "c1 peaks at τ; c1 = 0 at τ", "E[Z2/Z²] log–log slope (−(d−1)/2)", "verdicts (i) · (ii) · (iii)"]
    rows, colors = [], {}
    for i, s in enumerate(ds["setting"].values):
        fam = str(_v(ds, "pi", i))
        kp = float(_v(ds, "kappa_pi", i))
        ratio = ds["kl_ratio"].values[i]
        j = int(np.nanargmax(np.where(np.isfinite(ratio), ratio, -np.inf)))
        v = [str(ds[f"verdict_{c}"].values[i]) for c in ("kl", "ce", "c1")]
        rows.append([
            str(s), f"{fam}\nκ_π = {kp:g}" if fam != "uniform" else fam, f"{_v(ds, 'dim', i)}",
            f"{float(_v(ds, 'kappa_m', i)):g}",
            f"{_pm(ratio[j], ds['kl_ratio_mcse'].values[i, j])} at τ = {float(ds['tau'].values[j]):.3g}",
            f"{fin(_v(ds, 'ce_max_abs_z', i), '.2f')} (limit {float(ds.attrs.get('z_ce', np.nan)):.2f})",
            _pm(_v(ds, "c1_ratio", i), _v(ds, "c1_ratio_mcse", i)),
            f"{fin(_v(ds, 'tau_c1_peak', i))}; {fin(_v(ds, 'tau_c1_zero', i))}",
            f"{fin(_v(ds, 'scale_slope', i), '.2f')} ({fin(_v(ds, 'scale_slope_predicted', i), '.1f')})",
            " · ".join(x.upper() for x in v)])
        worst = combine_verdicts(v)
        colors[(i, len(header) - 1)] = COLORS.get(worst, COLORS["fail"])
    return header, rows, [0.8, 0.55, 0.25, 0.35, 1.45, 0.9, 1.1, 0.95, 0.85, 0.95], colors


def _title_page(doc: ReportDocument, ds: xr.Dataset) -> None:
    cfg = _json_attr(ds, "config", {})
    cfg = cfg if isinstance(cfg, dict) else {}
    nb, n_set, n_tau = ds.sizes.get("block", "?"), ds.sizes["setting"], ds.sizes["tau"]
    alpha = float(ds.attrs.get("alpha", np.nan))
    kf, kmax = _k_shown(ds)
    taus = ds["tau"].values
    render(doc, ds, (TitlePage(),))
    doc.text(C5_TEXT, after=0.1)
    doc.text(
        f"Method. {n_set} settings (π, M = vMF(x, κ_M), φ = identity on S^(d−1)) × {n_tau} temperatures from "
        f"{taus.min():g} to {taus.max():g} (log grid). Exact values: CE, c1 and the expansion scales E[Z2/Z²], "
        f"E[m1/Z] (simkit.exact; for the mixture Monte Carlo over x from each cell's own random stream), the exact gap_k for "
        f"uniform π, and the closed form KL(Q(x,·) ‖ π) = E_Q[x·y]/τ − log Z(x) with E_Q[x·y] = d/da log Z(a x) at "
        f"a = 1/τ (derived here: Q(x,·) is a vMF mixture with concentrations ‖κ_j μ_j + a x‖; simkit.distributions.softmax_kernel). "
        f"Monte Carlo, per cell, {nb} independent blocks: {cfg.get('block_anchors', '?')} InfoNCE anchors sharing "
        f"{kmax} negatives give CE as the block mean of l_∞ = −s(x, x⁺) + log Z(x) and gap_k for k = 1, 2, …, {kmax} "
        f"(control variates, simkit.estimators.infonce); {cfg.get('kl_anchors', '?')} KL anchors x ~ π each get "
        f"{cfg.get('kl_samples', '?')} draws y ~ π (importance form E_π[q log q]) and as many y ~ Q(x,·) (direct form "
        f"E_Q[log q], exact sampler), each with its MCSE over the draws. Values are estimate ± MCSE.", after=0.1)
    verdicts = {c: [str(v) for v in ds[f"verdict_{c}"].values] for c in ("kl", "ce", "c1")}
    n_pass = sum(all(verdicts[c][i] == "pass" for c in verdicts) for i in range(n_set))
    doc.heading(f"Checks and verdicts: {n_pass} of {n_set} settings pass all three")
    header, rows, widths, colors = _checks_table(ds)
    doc.table(header, rows, widths, colors=colors, size=7.5)
    doc.text(
        f"Rules (α = {alpha:g} per check, dataset attribute 'alpha'). (i) Every exact per-anchor KL (at the sampled "
        f"anchors and the largest over x, kl_sup_exact) is ≤ 2/τ, and for both Monte Carlo estimators the largest "
        f"KL_hat − z·MCSE over anchors is ≤ 2/τ, z = {float(ds.attrs.get('z_kl', np.nan)):.2f} (one-sided, "
        f"Bonferroni over every cell, anchor and estimator). (ii) |z| ≤ {float(ds.attrs.get('z_ce', np.nan)):.2f} at "
        f"every τ, z = (CE_MC − CE_exact)/√(MCSE² + MCSE_exact²), a two-sided Student t bound with {nb} − 1 degrees "
        f"of freedom, Bonferroni over the {n_set * n_tau} cells. (iii) E[Z2/Z²] is nondecreasing as τ decreases "
        f"(exact values; Monte Carlo for the mixture), and |c1| at the smallest τ exceeds every |c1| with τ ≥ 1/κ_M by more than "
        f"{float(ds.attrs.get('z_c1', np.nan)):.2f} MCSE on each side (MCSE 0 where exact). "
        f"False-failure rates: the exact part of (i) is a deterministic check of the proved bound (it has no "
        f"false-failure rate: it fails only if the bound or the code is wrong; claim row 1, verdict_kl_exact); its "
        f"Monte Carlo part ≤ α (claim row 2, verdict_kl_mc); (ii) α, nominally; (iii) ≤ α (only the mixture's Monte "
        f"Carlo c1 and E[Z2/Z²] can err); so at most {1 - (1 - alpha) ** 3:.2g} for the three statistical checks "
        f"together. A setting with a failed task is marked 'error'.", size=SMALL)
    doc.text(
        "Findings to read with the figures. The bound 2/τ holds with a wide margin everywhere: for a continuous π the "
        "KL grows only like ((d−1)/2) log(1/τ) as τ → 0 and like Var_π(x·y)/(2τ²) as τ → ∞, so the ratio KL/(2/τ) "
        "is largest at intermediate τ (column (i)). c1 itself is not monotone in τ: it peaks near τ ≈ 1/κ_M, then "
        "falls and changes sign, because its negative part −(E[Z2/Z²] − 1)/2 grows like τ^(−(d−1)/2) while E[m1/Z] "
        "saturates; it is |c1| and the expansion scale (hence the k needed before gap_k ≈ c1/k) that small τ "
        "inflates. The importance-form KL is unbiased but heavy-tailed at small τ (its effective sample size is "
        "given in the tables); the direct form has bounded summands and agrees with the closed form throughout.",
        size=SMALL)
    errs = ds["cell_error"].values if "cell_error" in ds else np.full((n_set, n_tau), "")
    bad = [i for i in range(n_set) if any(verdicts[c][i] != "pass" for c in verdicts) or any(str(e) for e in errs[i])]
    if bad:
        doc.heading("Failures and task errors")
        rows = []
        for i in bad:
            why = "; ".join(f"({n}) {verdicts[c][i]}: {ds[f'verdict_{c}_reason'].values[i] or '—'}"
                            for n, c in (("i", "kl"), ("ii", "ce"), ("iii", "c1")) if verdicts[c][i] != "pass")
            task = "; ".join(f"τ = {float(ds['tau'].values[j]):g}: {e}" for j, e in enumerate(errs[i]) if str(e))
            rows.append([str(ds["setting"].values[i]), why or "—", task or "—"])
        doc.table(["setting", "failed checks: why", "task errors (variable cell_error)"], rows, [1.0, 4.0, 4.0],
                  colors={(r, 0): COLORS["fail"] for r in range(len(rows))})
    else:
        doc.text("All settings pass all three checks; no task raised an error.", size=SMALL, weight="bold")


def _exact_or_pm(value: float, se: float, fmt: str) -> str:
    return fin(value, fmt) if se == 0 else _pm(value, se)


def _setting_tables(doc: ReportDocument, ds: xr.Dataset) -> None:
    """Two tables per setting over tau: cross-entropy and bias; KL against 2/tau."""
    kf, kmax = _k_shown(ds)
    gf, gm = int(np.nonzero(ds["k"].values == kf)[0][0]), ds.sizes["k"] - 1
    ess_min = float(ds.attrs.get("ess_reliable", 100.0))
    n_anchor = ds.sizes.get("block", 0) * ds.sizes.get("anchor", 0)
    head_a = ["τ", "CE exact", "CE Monte Carlo", "z", "H", "c1 exact", "E[Z2/Z²]", "E[m1/Z]",
              f"{kf}·gap_{kf}", f"{kmax}·gap_{kmax}"]
    width_a = [0.45, 1.2, 1.15, 0.45, 0.95, 1.05, 0.7, 0.6, 1.2, 1.3]
    head_b = ["τ", "2/τ", "E_x KL exact", "E_x KL direct", "E_x KL importance", "max KL exact (anchors; sup)",
              "max KL direct", "max KL importance", "min ESS", "max KL / (2/τ)"]
    width_b = [0.45, 0.4, 1.35, 1.05, 1.1, 1.0, 0.95, 0.95, 0.5, 1.0]
    doc.new_page()
    doc.heading("Results per setting and temperature (estimate ± MCSE; exact values without ±)")
    doc.text(f"First table: cross-entropy and the finite-k bias. H = −E_x KL(M ‖ π) ≤ CE. k·gap_k at k = {kf} and "
             f"k = {kmax} approaches c1 once k ≫ the expansion scales E[Z2/Z²], E[m1/Z]. Second table: KL(Q(x,·) ‖ π) "
             f"against 2/τ. 'direct': y ~ Q(x,·); 'importance': y ~ π. max KL: the largest per-anchor estimate over "
             f"the "
             f"{n_anchor} KL anchors with that anchor's MCSE over its draws (where the KL is small the largest of many "
             f"noisy estimates lies above the exact maximum); exact: the largest closed-form value at the same "
             f"anchors, and over all x (sup; probe points for a mixture). ESS: effective sample size of the importance "
             f"weights; below {ess_min:g} (marked *) the importance estimate and its MCSE are unreliable. Shaded rows: "
             f"τ < 1/κ_M.", size=SMALL)
    for i, s in enumerate(ds["setting"].values):
        km = float(_v(ds, "kappa_m", i))
        rows_a, rows_b, colors = [], [], {}
        for j, t in enumerate(ds["tau"].values):
            v = lambda n: float(ds[n].values[i, j])  # noqa: E731
            ess = v("kl_is_ess_min")
            star = " *" if ess < ess_min else ""
            rows_a.append([
                f"{t:.3g}", _exact_or_pm(v("ce_exact"), v("ce_exact_mcse"), ".4f"),
                _pm(v("ce_estimate"), v("ce_estimate_mcse")), fin(v("ce_z"), "+.2f"),
                _exact_or_pm(v("entropy"), v("entropy_mcse"), ".4f"),
                _exact_or_pm(v("c1_exact"), v("c1_exact_mcse"), ".4g"), fin(v("z2_ratio"), ".4g"),
                fin(v("m1_ratio"), ".4g"),
                _pm(ds["k_gap"].values[i, j, gf], ds["k_gap_mcse"].values[i, j, gf]),
                _pm(ds["k_gap"].values[i, j, gm], ds["k_gap_mcse"].values[i, j, gm])])
            rows_b.append([
                f"{t:.3g}", fin(float(ds["kl_bound"].values[j]), ".3g"),
                _exact_or_pm(v("kl_mean_exact"), v("kl_mean_exact_mcse"), ".4g"),
                _pm(v("kl_mean"), v("kl_mean_mcse")), _pm(v("kl_mean_is"), v("kl_mean_is_mcse")) + star,
                f"{fin(v('kl_max_anchor_exact'), '.3g')}; {fin(v('kl_sup_exact'), '.3g')}",
                _pm(v("kl_max"), v("kl_max_mcse")), _pm(v("kl_max_is"), v("kl_max_is_mcse")) + star,
                fin(ess, ".0f") + star, _pm(v("kl_ratio"), v("kl_ratio_mcse"))])
            if t < 1.0 / km:
                colors.update({(j, c): COLORS["span"] for c in range(len(head_a))})
        title = f"{s}: π {_v(ds, 'pi', i)}, d = {_v(ds, 'dim', i)}, κ_M = {km:g}, 1/κ_M = {1 / km:.3g}"
        for what, head, rows, widths in (("cross-entropy and bias", head_a, rows_a, width_a),
                                          ("KL(Q(x,·) ‖ π) against 2/τ", head_b, rows_b, width_b)):
            # no orphaned rows: the heading stays on a page with the table's header and 5 rows
            doc.heading(f"{title} — {what}", size=10, keep=0.5 + 6 * (7.0 * LEADING / 72 + 0.1))
            doc.table(head, rows, widths, size=7.0, colors=colors, after=0.1)


# ------------------------------------------------------------------------------------------------
# figure pages

def _ce_page(doc: ReportDocument, ds: xr.Dataset, idx: list[int]) -> None:
    taus = ds["tau"].values
    zc = float(ds.attrs.get("z_ce", np.nan))
    cap = ("Top: CE(M, Q) as τ varies. Black line: exact CE (simkit.exact; a band of ±2 MCSE for the mixture, whose "
           "E_x log Z is Monte Carlo); blue points: Monte Carlo CE, the block mean of l_∞ = −s(x, x⁺) + log Z(x), "
           "±2 MCSE; green dashed: H = −E_x KL(M(x,·) ‖ π) ≤ CE, attained only where Q = M (uniform π at τ = 1/κ_M, "
           "where CE = −I(x; x⁺)); dotted vertical: τ = 1/κ_M. Bottom: z = (MC − exact)/SE; dashed red: the "
           f"Bonferroni limits ±{zc:.2f} of check (ii); dotted grey: ±2.")
    fig, axes, ly = doc.figure("Cross-entropy CE(τ): exact against Monte Carlo, and its lower bound H", 2, len(idx),
                               caption=cap, subtitle="panel titles: the smallest CE − H on the grid (how close Q "
                               "comes to M) and where it occurs")
    for col, i in enumerate(idx):
        top, bot = axes[:, col]
        ce, ces = ds["ce_exact"].values[i], ds["ce_exact_mcse"].values[i]
        est, se = ds["ce_estimate"].values[i], ds["ce_estimate_mcse"].values[i]
        h, hs = float(ds["entropy"].values[i, 0]), float(ds["entropy_mcse"].values[i, 0])
        if np.any(ces > 0):
            top.fill_between(taus, ce - 2 * ces, ce + 2 * ces, color="0.75", lw=0)
        top.plot(taus, ce, color=COLORS["exact"], lw=1.0, zorder=3)
        top.errorbar(taus, est, yerr=2 * se, fmt="o", ms=3.5, mfc="white", color=COLORS["data"], zorder=5)
        if math.isfinite(h):
            top.axhline(h, color=COLORS["band"], ls="--", lw=1.0)
            if hs > 0:
                top.axhspan(h - 2 * hs, h + 2 * hs, color=COLORS["band"], alpha=0.2, lw=0)
        _kappa_line(top, ds, i)
        _tau_axes(top, taus)
        gap = ce - h
        j = int(np.nanargmin(gap)) if np.any(np.isfinite(gap)) else 0
        top.set_title(f"{ds['setting'].values[i]}: min CE − H = {fin(gap[j], '.3g')} at τ = {taus[j]:.3g}")
        top.set(xlabel="temperature τ", ylabel="CE (nat)")
        z = ds["ce_z"].values[i]
        for lv, ls, c in ((zc, "--", COLORS["fit"]), (2.0, ":", COLORS["ref"])):
            if math.isfinite(lv):
                for sg in (-1, 1):
                    bot.axhline(sg * lv, color=c, ls=ls, lw=0.9)
        bot.axhline(0, color="0.3", lw=0.5)
        bot.plot(taus, z, "o", color=COLORS["data"], ms=4)
        top_z = max(zc + 0.5 if math.isfinite(zc) else 5.0, 1.15 * float(np.nanmax(np.abs(z))) if np.any(
            np.isfinite(z)) else 0.0)
        bot.set_ylim(-top_z, top_z)
        _tau_axes(bot, taus)
        bot.set(xlabel="temperature τ", ylabel="z of Monte Carlo − exact",
                title=f"largest |z| = {fin(_v(ds, 'ce_max_abs_z', i), '.2f')}: {ds['verdict_ce'].values[i]}")
    _legend(fig, ly, [_line(COLORS["exact"], label="exact CE"), _marker(COLORS["data"], hollow=True,
                      label="Monte Carlo ± 2 MCSE"), _line(COLORS["band"], "--", label="H (CE ≥ H)"),
                      _line(COLORS["ref"], ":", label="τ = 1/κ_M"), _line(COLORS["fit"], "--", 0.9,
                      label=f"±{zc:.2f} (check ii)")])
    doc.save(fig)


def _c1_page(doc: ReportDocument, ds: xr.Dataset, idx: list[int]) -> None:
    taus = ds["tau"].values
    kf, kmax = _k_shown(ds)
    cap = ("Top: |c1(τ)| on a log scale, c1 = E_x[m1/Z − (Z2/Z² − 1)/2] (exact; ±2 MCSE bars for the mixture). Filled: "
           "c1 > 0; hollow: c1 < 0. c1 peaks near τ = 1/κ_M (dotted), then changes sign (dashed vertical) and its "
           "magnitude grows without bound as τ → 0. Bottom: the expansion scales E_x[Z2/Z²] (blue) and E_x[m1/Z] "
           "(orange): gap_k = c1/k + O(1/k²) is accurate only for k well above them. Dash-dotted: the universal bound "
           "e^{2/τ} ≥ Z2/Z² (q ≤ e^{2/τ}), far above the actual growth; grey dotted: slope −(d−1)/2 through the "
           f"smallest τ (Laplace approximation for a continuous π); thin horizontal lines: k = {kf} and k = {kmax}.")
    fig, axes, ly = doc.figure("Small τ inflates the bias constant: |c1(τ)| and the expansion scale", 2, len(idx),
                               caption=cap, subtitle="panel titles: the τ where c1 peaks and where it changes sign; "
                               "the log–log slope of E[Z2/Z²] at the smallest τ")
    for col, i in enumerate(idx):
        top, bot = axes[:, col]
        c1, c1s = ds["c1_exact"].values[i], ds["c1_exact_mcse"].values[i]
        a = np.abs(c1)
        top.plot(taus, a, color=COLORS["exact"], lw=0.8, zorder=2)
        for pos, mfc in ((True, COLORS["data"]), (False, "white")):
            m = np.isfinite(c1) & ((c1 > 0) == pos)
            if m.any():
                top.errorbar(taus[m], a[m], yerr=_log_err(a[m], c1s[m]), fmt="o", ms=4,
                             color=COLORS["data"], mfc=mfc, zorder=5)
        _kappa_line(top, ds, i)
        t0 = float(_v(ds, "tau_c1_zero", i))
        if math.isfinite(t0):
            top.axvline(t0, color=COLORS["fit"], ls="--", lw=0.9)
        _tau_axes(top, taus)
        _log_y(top, a)
        top.set_title(f"{ds['setting'].values[i]}: c1 peaks at τ = {fin(_v(ds, 'tau_c1_peak', i))}, "
                      f"c1 = 0 at τ ≈ {fin(t0)}", fontsize=8.5)
        top.set(xlabel="temperature τ", ylabel="|c1| (nat)")
        rho, mb = ds["z2_ratio"].values[i], ds["m1_ratio"].values[i]
        bot.plot(taus, rho, "s-", color=COLORS["data"], ms=3.5, lw=0.9)
        bot.plot(taus, mb, "^-", color=COLORS["plain"], ms=3.5, lw=0.9)
        bnd = ds["scale_bound"].values
        ymax = 30 * np.nanmax(np.concatenate([rho, mb, [kmax]]))
        okb = bnd < ymax
        bot.plot(taus[okb], bnd[okb], "-.", color=COLORS["fit"], lw=1.0)
        j0 = int(np.argmin(taus))
        slope = float(_v(ds, "scale_slope_predicted", i))
        if math.isfinite(slope) and math.isfinite(rho[j0]):
            bot.plot(taus, rho[j0] * (taus / taus[j0]) ** slope, ":", color=COLORS["ref"], lw=1.1)
        for kk in (kf, kmax):
            bot.axhline(kk, color="0.5", lw=0.6)
            bot.text(taus.max() * 1.25, kk, f"k = {kk}", ha="right", va="bottom", fontsize=6.5, color="0.35")
        _tau_axes(bot, taus)
        _log_y(bot, rho, mb, np.array([kmax, 0.8]), pad=2.0)
        bot.set_ylim(0.7, ymax)
        bot.set(xlabel="temperature τ", ylabel="expansion scale",
                title=f"E[Z2/Z²] slope {fin(_v(ds, 'scale_slope', i), '.2f')} (−(d−1)/2 = {fin(slope, '.1f')})")
    _legend(fig, ly, [_marker(COLORS["data"], label="c1 > 0"), _marker(COLORS["data"], hollow=True, label="c1 < 0"),
                      _line(COLORS["fit"], "--", 0.9, label="c1 = 0"), _line(COLORS["ref"], ":", label="τ = 1/κ_M"),
                      Line2D([], [], marker="s", color=COLORS["data"], label="E[Z2/Z²]"),
                      Line2D([], [], marker="^", color=COLORS["plain"], label="E[m1/Z]"),
                      _line(COLORS["fit"], "-.", label="bound e^{2/τ}"),
                      _line(COLORS["ref"], ":", 1.1, label="slope −(d−1)/2")])
    doc.save(fig)


def _kl_page(doc: ReportDocument, ds: xr.Dataset, idx: list[int]) -> None:
    taus = ds["tau"].values
    bound = ds["kl_bound"].values
    ess_min = float(ds.attrs.get("ess_reliable", 100.0))
    cap = ("Top: KL(Q(x,·) ‖ π) against the bound 2/τ (red), log–log. Black: exact E_x KL (closed form averaged over "
           "x ~ π); black dashed: the exact largest KL over x. Blue circles: Monte Carlo E_x KL, direct form "
           "(y ~ Q(x,·)), ±2 MCSE; blue triangles: the largest per-anchor direct estimate, ±2 of its MCSE; orange "
           "squares: importance-form mean (y ~ π), hollow where the smallest effective sample size is below "
           f"{ess_min:g} (heavy-tailed weights: unreliable). Bottom: the looseness max KL/(2/τ), Monte Carlo (blue, "
           "±2 MCSE) and exact (black dashed); 1 would mean the bound is attained. Where the KL is small (large τ) the "
           "largest of many noisy per-anchor estimates lies above the exact maximum: selection of noise, not a "
           "failure of the closed form.")
    fig, axes, ly = doc.figure("Temperature as a regulariser: KL(Q(x,·) ‖ π) ≤ 2/τ", 2, len(idx), caption=cap,
                               subtitle="panel titles: the largest KL/(2/τ) over τ and anchors (± MCSE)")
    for col, i in enumerate(idx):
        top, bot = axes[:, col]
        top.plot(taus, bound, color=COLORS["fit"], lw=1.6)
        top.plot(taus, ds["kl_mean_exact"].values[i], color=COLORS["exact"], lw=1.0)
        top.plot(taus, ds["kl_sup_exact"].values[i], "--", color=COLORS["exact"], lw=0.9)
        m, ms_ = ds["kl_mean"].values[i], ds["kl_mean_mcse"].values[i]
        mx, mxs = ds["kl_max"].values[i], ds["kl_max_mcse"].values[i]
        pm_, px = m > 0, mx > 0  # a log axis: positive estimates only
        top.errorbar(taus[pm_], m[pm_], yerr=_log_err(m[pm_], ms_[pm_]), fmt="o", ms=3.5, color=COLORS["data"],
                     mfc="white", zorder=5)
        top.errorbar(taus[px] * 1.06, mx[px], yerr=_log_err(mx[px], mxs[px]), fmt="^", ms=3.5,
                     color=COLORS["data"], zorder=5)
        mi, ess = ds["kl_mean_is"].values[i], ds["kl_is_ess_min"].values[i]
        for ok, mfc in ((ess >= ess_min, COLORS["plain"]), (ess < ess_min, "white")):
            sel = ok & np.isfinite(mi) & (mi > 0)
            top.plot(taus[sel] / 1.06, mi[sel], "s", color=COLORS["plain"], mfc=mfc, ms=3.5, zorder=4)
        _tau_axes(top, taus)
        _log_y(top, bound, ds["kl_mean_exact"].values[i], mx)
        r, rs = ds["kl_ratio"].values[i], ds["kl_ratio_mcse"].values[i]
        j = int(np.nanargmax(np.where(np.isfinite(r), r, -np.inf)))
        top.set_title(f"{ds['setting'].values[i]}: max KL/(2/τ) = {_pm(r[j], rs[j])} at τ = {taus[j]:.3g}",
                      fontsize=8.5)
        top.set(xlabel="temperature τ", ylabel="KL (nat)")
        bot.errorbar(taus[px], r[px], yerr=_log_err(r[px], rs[px]), fmt="^", ms=3.5, color=COLORS["data"])
        bot.plot(taus, ds["kl_sup_exact"].values[i] / bound, "--", color=COLORS["exact"], lw=0.9)
        bot.axhline(1.0, color=COLORS["fit"], lw=1.6)
        _tau_axes(bot, taus)
        _log_y(bot, r, ds["kl_sup_exact"].values[i] / bound, np.array([1.0]))
        bot.set(xlabel="temperature τ", ylabel="max KL / (2/τ)", title=f"check (i): {ds['verdict_kl'].values[i]}")
    _legend(fig, ly, [_line(COLORS["fit"], lw=1.6, label="2/τ (ratio 1)"), _line(COLORS["exact"], label="exact E_x KL"),
                      _line(COLORS["exact"], "--", 0.9, label="exact max over x"),
                      _marker(COLORS["data"], hollow=True, label="MC E_x KL (direct)"),
                      _marker(COLORS["data"], "^", label="MC max over anchors"),
                      _marker(COLORS["plain"], "s", label="MC E_x KL (importance)"),
                      _marker(COLORS["plain"], "s", hollow=True, label=f"importance, ESS < {ess_min:g}")])
    doc.save(fig)


def _gap_page(doc: ReportDocument, ds: xr.Dataset, idx: list[int]) -> None:
    taus = ds["tau"].values
    kf, kmax = _k_shown(ds)
    k = ds["k"].values
    gs = [int(np.nonzero(k == kk)[0][0]) for kk in (kf, kmax)]
    cols = (COLORS["plain"], COLORS["data"])
    cap = (f"Top: |gap_k| = |R_k − log k − CE| at k = {kf} (orange) and k = {kmax} (blue) against τ, ±2 MCSE "
           "(control-variate estimator); filled where gap_k > 0, hollow where < 0 (top row only); dashed: |c1|/k "
           "for each k; thin "
           f"black: the exact gap (uniform π). Bottom: k·gap_k against the exact c1 (black) on a symmetric-log scale "
           f"(linear within ±1). Grey shading: τ where {kmax} < {float(ds.attrs.get('k_onset_factor', 16)):g} × "
           "expansion scale, i.e. even k_max is short of the 1/k regime; there k·gap_k departs from c1. Dotted "
           "vertical: τ = 1/κ_M.")
    fig, axes, ly = doc.figure("The finite-k gap at fixed k as τ varies: where the 1/k regime starts", 2, len(idx),
                               caption=cap, subtitle="panel titles: the smallest τ on the grid at which k_max reaches "
                               "the 1/k regime by the k_onset rule")
    for col, i in enumerate(idx):
        top, bot = axes[:, col]
        c1 = ds["c1_exact"].values[i]
        short = ds["k_onset"].values[i] > kmax
        for ax in (top, bot):
            for j in np.nonzero(short)[0]:
                lo = taus[j] / math.sqrt(taus[1] / taus[0]) if j == 0 else math.sqrt(taus[j - 1] * taus[j])
                hi = taus[j] * math.sqrt(taus[1] / taus[0]) if j == len(taus) - 1 else math.sqrt(taus[j] * taus[j + 1])
                ax.axvspan(lo, hi, color=COLORS["span"], lw=0, zorder=0)
            _kappa_line(ax, ds, i)
        allv = []
        for g, kk, c in zip(gs, (kf, kmax), cols):
            v, se = ds["gap"].values[i, :, g], ds["gap_mcse"].values[i, :, g]
            av = np.abs(v)
            for pos, mfc in ((True, c), (False, "white")):
                m = np.isfinite(v) & ((v > 0) == pos)
                if m.any():
                    top.errorbar(taus[m], av[m], yerr=_log_err(av[m], se[m]), fmt="o",
                                 ms=3.5, color=c, mfc=mfc, zorder=5)
            top.plot(taus, np.abs(c1) / kk, "--", color=c, lw=0.9)
            ex = ds["gap_exact"].values[i, :, g] if "gap_exact" in ds else np.full(taus.size, np.nan)
            if np.any(np.isfinite(ex)):
                top.plot(taus, np.abs(ex), color=COLORS["exact"], lw=0.6)
            kg, kse = ds["k_gap"].values[i, :, g], ds["k_gap_mcse"].values[i, :, g]
            bot.errorbar(taus * (0.97 if kk == kf else 1.03), kg, yerr=2 * kse, fmt="o", ms=3.5, color=c, zorder=5)
            allv += [av, np.abs(c1) / kk]
        bot.plot(taus, c1, color=COLORS["exact"], lw=1.0, zorder=3)
        _tau_axes(top, taus)
        _log_y(top, *allv)
        ok = np.nonzero(~short)[0]
        first = f"τ = {taus[ok[0]]:.3g}" if ok.size else "none"
        top.set_title(f"{ds['setting'].values[i]}: k_max in the 1/k regime from {first}", fontsize=8.5)
        top.set(xlabel="temperature τ", ylabel="|gap_k| (nat)")
        bot.set_yscale("symlog", linthresh=1.0)
        _tau_axes(bot, taus)
        bot.set(xlabel="temperature τ", ylabel="k · gap_k (nat)", title="k·gap_k against c1")
    _legend(fig, ly, [_marker(cols[0], label=f"k = {kf}"), _marker(cols[1], label=f"k = {kmax}"),
                      _marker("0.4", hollow=True, label="gap_k < 0"), _line("0.4", "--", 0.9, label="|c1|/k"),
                      _line(COLORS["exact"], lw=0.6, label="exact gap (uniform π)"),
                      _line(COLORS["exact"], lw=1.0, label="exact c1 (bottom)"),
                      Patch(color=COLORS["span"], label="k_max short of the 1/k regime")])
    doc.save(fig)


# ------------------------------------------------------------------------------------------------
# the norms clause (pre-registered: protocols/temperature.md)

_NORM_ROWS = (("primary", "primary: S of φ̂ (control variate)", "norm_verdict"),
              ("null", "null control: S of the fixed reference ψ = r·x (E[S] = 0)", "norm_null_verdict"),
              ("ignored", "control: norms changed in a score-ignored component (S = 0)", "norm_ignored_verdict"))


def _norms_pages(doc: ReportDocument, ds: xr.Dataset) -> None:
    """Norms clause: the table of G, G·τ, S, S·τ and the controls over τ, the rule and the verdicts; a figure."""
    cfg = _json_attr(ds, "config", {})
    cfg = cfg if isinstance(cfg, dict) else {}
    taus = ds["tau_n"].values
    sc = lambda n: float(ds[n].values)  # noqa: E731
    alpha, b0 = float(ds.attrs.get("norm_alpha", np.nan)), float(ds.attrs.get("norm_b0", np.nan))
    label = str(ds.attrs.get("analysis", ""))
    sha = str(ds.attrs.get("protocol_sha256", "?"))[:16]
    doc.new_page()
    doc.heading("Norms clause of C5: the gap's sensitivity to the norms of the negatives' embeddings")
    doc.text(
        f"Pre-registered in {ds.attrs.get('protocol_path', 'protocols/temperature.md')} (sha256 {sha}…, commit "
        f"{str(ds.attrs.get('protocol_commit', '?'))[:12]}); {label or 'analysis label unknown'}. Embeddings before "
        f"normalisation ψ(x) = r(x) u_W(x): u_W(x) = Wx/|Wx| (W 3×3) trained by ERM (L-BFGS-B) on n = "
        f"{cfg.get('norm_n', '?')} tuples, r(x) = exp(β e₁·x) fixed with β = {cfg.get('norm_beta', '?')} (norms in "
        f"[{sc('norm_r_min'):.3g}, {sc('norm_r_max'):.3g}]); score ψ(x)·ψ(y)/τ; π uniform on S², x⁺ ~ vMF(x, "
        f"{cfg.get('norm_kappa_m', '?')}), k = {cfg.get('norm_k', '?')} negatives; {ds.sizes['norm_block']} "
        f"independent blocks, each with its own training sample, initial W and {cfg.get('norm_eval', '?')} fresh "
        f"tuples shared by every τ. G = R_k(φ̂) − R̂(φ̂) (fresh minus training tuples) with the exactly zero-mean "
        f"control G(ψ_ref), ψ_ref = r(x)·x not trained. The negatives' norms are scaled, ψ(y_j) → e^ε ψ(y_j), and "
        f"S = dG/dε at 0 = E[Σ_j p_j s_j] (fresh) − mean over the training tuples (pathwise; a central finite "
        f"difference with common random numbers is the check column), control variate S(ψ_ref). G·τ and S·τ "
        f"remove the 1/τ scale of the scores: flat in τ means growth no faster than 1/τ.", after=0.08)
    doc.text(
        f"Rule (intersection-union, each test one-sided at α = {alpha:g}): the slope b of log E[S] on log τ over the "
        f"grid is < b0 = {b0:.4f} (E[S] at least doubles from τ = {taus.max():g} to τ = {taus.min():g}; jackknife "
        f"t test) AND E[S](τ_min) > 0 (t test); b is undefined, and the rule fails, if a block mean or a jackknife "
        f"replicate of the curve is ≤ 0. Both controls must not pass it.", size=SMALL)
    doc.text(f"Conclusion: {ds['norm_conclusion'].values}.", weight="bold")
    head = ["τ", "E[G] ± MCSE", "G·τ ± MCSE", "E[S] ± MCSE", "S·τ ± MCSE", "null: E[S_ref] ± MCSE",
            "ignored: E[S]", "FD vs pathwise (max rel.)", "plain E[S] ± MCSE", "converged"]
    rows = []
    for j, t in enumerate(taus):
        v = lambda n: float(ds[n].values[j])  # noqa: E731
        rows.append([f"{t:g}", format_pm(v("norm_gap_cv"), v("norm_gap_cv_mcse")),
                     format_pm(v("norm_gap_tau"), v("norm_gap_tau_mcse")),
                     format_pm(v("norm_sens_cv"), v("norm_sens_cv_mcse")),
                     format_pm(v("norm_sens_tau"), v("norm_sens_tau_mcse")),
                     format_pm(v("norm_sens_ref"), v("norm_sens_ref_mcse")), fin(v("norm_sens_ignored"), ".2g"),
                     fin(v("norm_fd_rel_error"), ".2g"), format_pm(v("norm_sens"), v("norm_sens_mcse")),
                     fin(v("norm_converged"), ".2f")])
    doc.table(head, rows, [0.45, 1.15, 1.15, 1.1, 1.15, 1.2, 0.7, 0.8, 1.1, 0.6], size=7.0)
    doc.text(f"Secondary (descriptive): slope of log E[G] on log τ = {_pm(sc('norm_gap_slope'), sc('norm_gap_slope_se'))}"
             f" (−1: G grows like the 1/τ scale of the scores; below −1: faster); slope of log E[S·τ] = b + 1 = "
             f"{fin(sc('norm_sens_slope_tau'), '.3f')}.", size=SMALL)
    head = ["estimate", "slope b ± SE", "t (H0 b ≥ b0)", "p", "E[S](τ_min) ± MCSE", "p (H0 ≤ 0)",
            "E[S](τ_min)/E[S](τ_max)", "blocks", "rule", "check verdict"]
    rows, colors = [], {}
    for r, (c, what, vname) in enumerate(_NORM_ROWS):
        g = lambda f: float(ds[f"norm_{c}_{f}"].values)  # noqa: E731
        verdict = str(ds[vname].values)
        why = str(ds[f"{vname}_reason"].values)
        rows.append([what, _pm(g("b"), g("b_se")), fin(g("t"), ".2f"), fin(g("p"), ".3g"),
                     format_pm(g("level"), g("level_se")), fin(g("level_p"), ".3g"), fin(g("ratio"), ".3g"),
                     f"{int(g('n_blocks'))}", "passes" if g("passed") == 1 else "does not pass",
                     verdict.upper() + (f": {why}" if why else "")])
        colors[(r, len(head) - 1)] = COLORS.get(verdict, COLORS["fail"])
    doc.table(head, rows, [1.9, 0.9, 0.65, 0.6, 1.0, 0.6, 0.8, 0.45, 0.65, 1.6], size=7.0, colors=colors)
    reason = str(ds["norm_verdict_reason"].values)
    if reason:
        doc.text(f"Primary rule: {reason}.", size=SMALL)

    cap = ("Left: E[G] (blue) and the normalised G·τ (orange) against τ, ±2 MCSE; a flat G·τ means G grows like "
           "the 1/τ scale of the scores. Right: the sensitivity E[S] to the negatives' norms (blue, filled where > 0) "
           "and S·τ (orange), with |E[S_ref]| of the null control (grey, hollow; its true value is 0) and the margin "
           "slope b0 (dashed, through E[S] at τ = 1): the rule needs the blue curve steeper than the dashed one "
           "and positive at the smallest τ.")
    fig, axes, ly = doc.figure("Norms clause: G and G·τ; the gap's sensitivity S to the negatives' norms", 1, 2,
                               caption=cap)
    left, right = axes[0]
    for ax, pairs in ((left, (("norm_gap_cv", COLORS["data"]), ("norm_gap_tau", COLORS["plain"]))),
                      (right, (("norm_sens_cv", COLORS["data"]), ("norm_sens_tau", COLORS["plain"])))):
        allv = []
        for name, col in pairs:
            v, se = ds[name].values, ds[f"{name}_mcse"].values
            pos = np.isfinite(v) & (v > 0)
            ax.errorbar(taus[pos], v[pos], yerr=_log_err(v[pos], se[pos]), fmt="o-", ms=3.5, lw=0.9, color=col)
            allv.append(v[pos])
        if ax is right:
            ref = np.abs(ds["norm_sens_ref"].values)
            ax.plot(taus, ref, "o", ms=3.5, mfc="white", color="0.5")
            s1 = ds["norm_sens_cv"].values[int(np.argmax(taus))]
            if np.isfinite(s1) and s1 > 0:
                ax.plot(taus, s1 * (taus / taus.max()) ** b0, "--", color=COLORS["fit"], lw=1.0)
            allv.append(ref)
        _tau_axes(ax, taus)
        _log_y(ax, *allv)
    left.set(xlabel="temperature τ", ylabel="nats", title="E[G] and G·τ")
    right.set(xlabel="temperature τ", ylabel="nats", title="E[S] = dE[G]/dε and S·τ")
    _legend(fig, ly, [_marker(COLORS["data"], label="E[G] (left), E[S] (right)"),
                      _marker(COLORS["plain"], label="G·τ (left), S·τ (right)"),
                      _marker("0.5", hollow=True, label="|E[S_ref]|: null control"),
                      _line(COLORS["fit"], "--", 1.0, label="margin slope b0")])
    doc.save(fig)


def temperature_sections(doc: ReportDocument, ds: xr.Dataset) -> None:
    """The pages of the C5 study (all but provenance), for its own report or the validation report."""
    require(ds, _REQUIRED, "temperature")
    n = ds.sizes["setting"]
    groups = [list(range(j, min(n, j + SETTINGS_PER_PAGE))) for j in range(0, n, SETTINGS_PER_PAGE)]
    _title_page(doc, ds)
    _setting_tables(doc, ds)
    for page in (_ce_page, _c1_page, _kl_page, _gap_page):
        for idx in groups:
            page(doc, ds, idx)
    if "norm_verdict" in ds:
        _norms_pages(doc, ds)
