"""Statistics of claim C5 (temperature as a regulariser) over a (setting, tau) grid.

Arrays are laid out (setting, tau, ...); per-block values (setting, tau, block, ...). KL(Q(x,.) || pi)
estimates against the bound 2/tau (:func:`kl_summary`, :func:`kl_problems`: direct and importance
estimators, the largest over anchors and its one-sided upper value ``KL_hat - z MCSE``); CE Monte
Carlo against exact (:func:`ce_summary`, :func:`ce_problems`); the growth of the expansion scale and
of |c1| as tau falls (:func:`c1_problems`) and where c1 peaks and changes sign (:func:`c1_shape`);
Bonferroni critical values (:func:`critical_values`); the norms clause's summaries and verdict rule
(:func:`norm_summary`, :func:`norm_verdicts`; simkit.estimators.norms). The problems are phrases for
:func:`simkit.runner.verdicts.verdict`.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
from scipy import stats

from simkit.stats.analysis import combine_verdicts, mean_mcse
from simkit.stats.trend import growth_rule

__all__ = ["tau_grid", "critical_values", "nan_reduce", "ce_summary", "bias_summary", "kl_summary", "gap_summary",
           "kl_problems", "ce_problems", "c1_problems", "c1_shape", "norm_summary", "norm_verdicts", "NORM_CONTROLS",
           "RULE_FIELDS", "summary_schema", "norm_schema", "ce_pvalues", "setting_rules", "NORM_RULE_NAMES",
           "kl_exact_check", "kl_mc_check", "ce_check", "c1_check"]


def tau_grid(tau_min: float, tau_max: float, n: int) -> list[float]:
    """``n`` temperatures spaced evenly in log tau from ``tau_min`` to ``tau_max`` (6 significant digits)."""
    return [float(f"{t:.6g}") for t in np.geomspace(tau_min, tau_max, n)]


def critical_values(n_set: int, n_tau: int, n_blocks: int, kl_anchors: int, alpha: float) -> dict[str, float]:
    """Critical values of the three statistical C5 checks at family-wise rate ``alpha`` each (Bonferroni).

    ce: two-sided Student t (n_blocks - 1 df) over the n_set * n_tau cells; kl: one-sided normal
    over every (cell, anchor, estimator); c1: one-sided normal for the one comparison per setting.
    """
    nb = int(n_blocks)
    m_kl = 2 * n_set * n_tau * max(nb * int(kl_anchors), 1)
    return {"ce": float(stats.t.isf(alpha / (2 * n_set * n_tau), max(nb - 1, 1))),
            "kl": float(stats.norm.isf(alpha / m_kl)),
            "c1": float(stats.norm.isf(alpha / max(n_set, 1)))}


def nan_reduce(fn, a: np.ndarray, axis: int = -1) -> np.ndarray:
    """``fn`` (np.nanmax or np.nanmin) over ``axis`` ignoring non-finite entries; NaN where none is finite."""
    a = np.where(np.isfinite(a), a, np.nan)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN slices (failed cells) give NaN, as documented
        return fn(a, axis=axis)


def ce_summary(ell_inf: np.ndarray, ce: np.ndarray, entropy: np.ndarray) -> dict:
    """Monte Carlo CE (block mean of l_inf over axis 2) against the exact (value, MCSE) pairs ``ce``: its
    z-score; the entropy H beside it."""
    est, se = mean_mcse(ell_inf, axis=2)
    with np.errstate(invalid="ignore", divide="ignore"):
        z = (est - ce[..., 0]) / np.sqrt(se**2 + ce[..., 1] ** 2)
    return {"ce_exact": ce[..., 0], "ce_exact_mcse": ce[..., 1], "ce_estimate": est, "ce_estimate_mcse": se,
            "ce_z": z, "entropy": entropy[..., 0], "entropy_mcse": entropy[..., 1]}


def bias_summary(p: dict, taus: np.ndarray, k_onset_factor: float) -> dict:
    """c1 with its MCSE, the expansion scales E[Z2/Z^2], E[m1/Z], their max, the predicted onset of the
    1/k regime (``k_onset_factor`` x scale) and the bound e^{2/tau} on Z2/Z^2."""
    scale = np.maximum(p["rho"], p["mbar"])
    return {"c1_exact": p["c1"][..., 0], "c1_exact_mcse": p["c1"][..., 1], "z2_ratio": p["rho"],
            "m1_ratio": p["mbar"], "expansion_scale": scale, "k_onset": k_onset_factor * scale,
            "scale_bound": np.exp(2.0 / taus)}


def kl_summary(blocks: dict, p: dict, bound: np.ndarray, z_kl: float) -> dict:
    """KL(Q || pi): exact mean and supremum, both estimators' means, maxima and one-sided upper values."""
    n_set, n_tau = p["kl_sup"].shape
    out = {"kl_bound": bound, "kl_mean_exact": p["kl_mean"][..., 0], "kl_mean_exact_mcse": p["kl_mean"][..., 1],
           "kl_sup_exact": p["kl_sup"]}
    for est, suffix in (("q", ""), ("is", "_is")):
        v, se = blocks[f"kl_{est}"], blocks[f"kl_{est}_mcse"]
        out[f"kl_mean{suffix}"], out[f"kl_mean{suffix}_mcse"] = mean_mcse(v.mean(axis=3), axis=2)
        dm, dm_se = mean_mcse((v - blocks["kl_exact"]).mean(axis=3), axis=2)
        with np.errstate(invalid="ignore", divide="ignore"):
            out[f"kl{suffix}_z"] = dm / dm_se
        flat, flat_se = v.reshape(n_set, n_tau, -1), se.reshape(n_set, n_tau, -1)
        j = np.argmax(np.where(np.isfinite(flat), flat, -np.inf), axis=2)[..., None]
        out[f"kl_max{suffix}"] = np.take_along_axis(flat, j, 2)[..., 0]
        out[f"kl_max{suffix}_mcse"] = np.take_along_axis(flat_se, j, 2)[..., 0]
        out[f"kl_upper{suffix}"] = nan_reduce(np.nanmax, flat - z_kl * flat_se)
    out["kl_max_anchor_exact"] = nan_reduce(np.nanmax, blocks["kl_exact"].reshape(n_set, n_tau, -1))
    out["kl_ratio"], out["kl_ratio_mcse"] = out["kl_max"] / bound, out["kl_max_mcse"] / bound
    out["kl_is_ess_min"] = nan_reduce(np.nanmin, blocks["kl_is_ess"].reshape(n_set, n_tau, -1))
    return out


def gap_summary(blocks: dict, gap_exact: np.ndarray, k: np.ndarray) -> dict:
    """Block means (axis 2) of the gap with and without control variates and of R_k, k x gap, and the
    z-score of the gap against ``gap_exact``."""
    out = {}
    for name, var in (("gap", "gap_cv"), ("gap_plain", "gap_plain"), ("loss", "loss")):
        out[name], out[f"{name}_mcse"] = mean_mcse(blocks[var], axis=2)
    with np.errstate(invalid="ignore", divide="ignore"):
        out["gap_z"] = (out["gap"] - gap_exact) / out["gap_mcse"]
    out["k_gap"], out["k_gap_mcse"] = out["gap"] * k, out["gap_mcse"] * k
    out["gap_exact"] = gap_exact
    return out


def ce_pvalues(ds, alpha: float) -> dict[str, tuple[float, float]]:
    """Component tests of the CE check (for calibration): per (setting, tau), the two-sided Student t p-value
    of ce_z on n_blocks - 1 df, at the Bonferroni level alpha / (n_set n_tau), so that the check fails
    exactly when one of them rejects. Uniform when CE(M, Q) is the exact value (a point null)."""
    z = ds["ce_z"].values
    nb, (n_set, n_tau) = ds.sizes["block"], z.shape
    alpha = alpha / (n_set * n_tau)
    labels = ds["setting_label"].values if "setting_label" in ds.variables else ds["setting"].values
    return {f"{s}:ce@tau={float(t):.4g}": (float(2 * stats.t.sf(abs(z[i, j]), max(nb - 1, 1)))
                                            if np.isfinite(z[i, j]) else math.nan, alpha)
            for i, s in enumerate(labels) for j, t in enumerate(ds["tau"].values)}


def kl_problems(kl_exact: np.ndarray, sup: np.ndarray, up: np.ndarray, up_is: np.ndarray, bound: np.ndarray,
                 taus: np.ndarray, z_kl: float) -> tuple[list[str], list[str]]:
    """Check (i) for one setting: (problems of the exact part, problems of the Monte Carlo part)."""
    exact_probs, mc_probs = [], []
    if not (np.all(np.isfinite(kl_exact)) and np.all(np.isfinite(sup))):
        exact_probs.append("missing exact KL values")
    elif np.any(kl_exact > bound[:, None]) or np.any(sup > bound):
        exact_probs.append("an exact per-anchor KL exceeds 2/tau")
    for u, what in ((up, "direct"), (up_is, "importance")):
        if not np.all(np.isfinite(u)):
            mc_probs.append(f"{what}: no finite estimates at some tau")
        elif np.any(u > bound):
            mc_probs.append(f"{what}: KL_hat - {z_kl:.2f} MCSE exceeds 2/tau at tau = "
                            f"{', '.join(f'{t:g}' for t in taus[u > bound])}")
    return exact_probs, mc_probs


def ce_problems(z: np.ndarray, taus: np.ndarray, z_ce: float) -> list[str]:
    """Check (ii) for one setting."""
    if not np.all(np.isfinite(z)):
        return ["no finite z-score at some tau"]
    bad = np.abs(z) > z_ce
    if np.any(bad):
        return [f"|z| > {z_ce:.2f} at tau = " + ", ".join(f"{t:g} (z = {zz:+.2f})" for t, zz in zip(taus[bad], z[bad]))]
    return []


def c1_problems(c1: np.ndarray, c1_se: np.ndarray, rho: np.ndarray, taus: np.ndarray, kappa_m: float,
                 z_c1: float) -> tuple[list[str], float, float]:
    """Check (iii) for one setting: (problems, |c1(tau_min)| / max |c1(tau >= 1/kappa_M)|, its MCSE)."""
    probs, ratio, ratio_se = [], math.nan, math.nan
    r_seq = rho[np.argsort(taus)[::-1]]  # by decreasing tau
    if not np.all(np.isfinite(r_seq)):
        probs.append("missing expansion scales")
    elif np.any(np.diff(r_seq) < -1e-12 * np.abs(r_seq[1:])):
        probs.append("E[Z2/Z^2] decreases as tau decreases somewhere on the grid")
    ref = taus >= 1.0 / kappa_m
    small = int(np.argmin(taus))
    if not ref.any() or taus[small] >= 1.0 / kappa_m:
        probs.append(f"the grid must reach both sides of 1/kappa_M = {1 / kappa_m:g}")
    elif not np.all(np.isfinite(c1)):
        probs.append("missing c1 values")
    else:
        jr = int(np.argmax(np.abs(c1) * ref))
        ratio = abs(c1[small]) / abs(c1[jr])
        ratio_se = ratio * math.hypot(c1_se[small] / c1[small], c1_se[jr] / c1[jr])
        if not abs(c1[small]) - z_c1 * c1_se[small] > np.max(np.abs(c1[ref]) + z_c1 * c1_se[ref]):
            probs.append(f"|c1(tau_min)| = {abs(c1[small]):.4g} does not exceed max |c1| = "
                         f"{np.max(np.abs(c1[ref])):.4g} over tau >= 1/kappa_M (with {z_c1:.2f} MCSE margins)")
    return probs, ratio, ratio_se


def c1_shape(c1: np.ndarray, rho: np.ndarray, taus: np.ndarray, dim: int) -> dict:
    """Descriptive fields of one setting: where c1 peaks and changes sign; growth of the expansion scale."""
    out = {"tau_c1_peak": math.nan, "tau_c1_zero": math.nan, "scale_slope": math.nan,
           "scale_slope_predicted": -(dim - 1) / 2}
    if np.all(np.isfinite(c1)):
        out["tau_c1_peak"] = taus[int(np.argmax(c1))]
        ch = np.nonzero(np.sign(c1)[:-1] != np.sign(c1)[1:])[0]
        if ch.size:
            j = int(ch[-1])
            c, lt = c1[j:j + 2], np.log(taus[j:j + 2])
            out["tau_c1_zero"] = float(np.exp(lt[0] - c[0] * (lt[1] - lt[0]) / (c[1] - c[0])))
    if taus.size >= 2 and np.all(rho[:2] > 0):
        out["scale_slope"] = np.log(rho[1] / rho[0]) / np.log(taus[1] / taus[0])
    return out


def setting_rules(s: dict, kl_exact: np.ndarray, bound: np.ndarray, taus: np.ndarray, kappa_m: float, dim: int,
                  crit: dict) -> tuple[dict, dict[str, list[str]]]:
    """The C5 rules of one setting from its summaries ``s`` (over tau) and per-anchor exact KL values
    ``kl_exact`` (tau, anchors): descriptive fields (c1 ratio with MCSE, :func:`c1_shape`, the largest
    |ce_z| and KL ratio) and the problems of each rule: ``kl_exact``, ``kl_mc`` (:func:`kl_problems`),
    ``kl`` (both), ``ce`` (:func:`ce_problems`), ``c1`` (:func:`c1_problems`); ``crit`` from
    :func:`critical_values`."""
    exact_probs, mc_probs = kl_problems(kl_exact, s["kl_sup_exact"], s["kl_upper"], s["kl_upper_is"], bound, taus,
                                        crit["kl"])
    c1_probs, ratio, ratio_se = c1_problems(s["c1_exact"], s["c1_exact_mcse"], s["z2_ratio"], taus, kappa_m,
                                            crit["c1"])
    out = {"c1_ratio": ratio, "c1_ratio_mcse": ratio_se, **c1_shape(s["c1_exact"], s["z2_ratio"], taus, dim),
           "ce_max_abs_z": nan_reduce(np.nanmax, np.abs(s["ce_z"]), axis=0),
           "kl_ratio_max": nan_reduce(np.nanmax, s["kl_ratio"], axis=0)}
    return out, {"kl_exact": exact_probs, "kl_mc": mc_probs, "kl": exact_probs + mc_probs,
                 "ce": ce_problems(s["ce_z"], taus, crit["ce"]), "c1": c1_probs}


#: the three rules of the norms clause: name -> the per-block quantity it is applied to
NORM_CONTROLS = {"primary": "sens_cv", "null": "sens_ref", "ignored": "sens_ignored"}
#: what each rule of the norms clause is applied to (long names of its fields in :func:`norm_schema`)
NORM_RULE_NAMES = {"primary": "primary S (control variate)", "null": "null control S of the fixed reference",
                   "ignored": "control S with a score-ignored component"}
#: fields of one rule (simkit.stats.trend.growth_rule) in :func:`norm_summary`: name -> description
RULE_FIELDS = {
    "b": "OLS slope of log E[S] on log tau (block-mean curve)", "b_se": "delete-one-block jackknife SE of b",
    "t": "(b - b0) / b_se on norm_blocks - 1 df", "p": "one-sided P(T <= t); H0 b >= b0",
    "level": "E[S] at the smallest tau, in nats", "level_se": "MCSE of level, in nats",
    "level_t": "level / level_se", "level_p": "one-sided P(T >= level_t); H0 E[S](tau_min) <= 0",
    "ratio": "E[S](tau_min) / E[S](tau_max)", "passed": "1 if both one-sided tests reject at alpha (rule passes)",
    "defined": "1 if every block mean and jackknife replicate is > 0", "n_blocks": "finished blocks",
}


def norm_summary(v: dict[str, np.ndarray], taus: np.ndarray, *, b0: float, alpha: float) -> dict:
    """Summaries and rules of the norms clause from its per-block values ``v`` (name -> (tau, block)):
    block means with MCSE, G tau and S tau, the finite-difference check, and :data:`NORM_CONTROLS`'s rules
    (one-sided growth of E[S] as tau falls, margin ``b0``, level ``alpha``) as ``norm_<rule>_<field>``.
    Returns ``(values, rules)``; :func:`norm_verdicts` turns the rules into verdicts."""
    out = {}
    for n in ("gap_cv", "gap", "sens_cv", "sens", "sens_ref", "sens_ignored", "sens_fd", "train_risk"):
        out[f"norm_{n}"], out[f"norm_{n}_mcse"] = mean_mcse(v[n], axis=1)
    out["norm_gap_tau"], out["norm_gap_tau_mcse"] = taus * out["norm_gap_cv"], taus * out["norm_gap_cv_mcse"]
    out["norm_sens_tau"], out["norm_sens_tau_mcse"] = taus * out["norm_sens_cv"], taus * out["norm_sens_cv_mcse"]
    with np.errstate(invalid="ignore", divide="ignore"):
        out["norm_fd_rel_error"] = nan_reduce(np.nanmax, np.abs(v["sens_fd"] - v["sens"]) / np.abs(v["sens"]))
    out["norm_converged"], out["norm_iterations"] = mean_mcse(v["converged"], axis=1)[0], mean_mcse(
        v["iterations"], axis=1)[0]
    rules = {c: growth_rule(taus, v[q].T, b0=b0, alpha=alpha) for c, q in NORM_CONTROLS.items()}
    for c, r in rules.items():
        for f in RULE_FIELDS:
            out[f"norm_{c}_{f}"] = float(getattr(r, "se" if f == "b_se" else f))
    g = growth_rule(taus, v["gap_cv"].T, b0=0.0, alpha=0.5)  # descriptive slope of log E[G] only
    out["norm_gap_slope"], out["norm_gap_slope_se"] = g.b, g.se
    out["norm_sens_slope_tau"] = rules["primary"].b + 1.0
    return out, rules


def norm_verdicts(primary, null, ignored, errors: str) -> dict:
    """The verdict rule of the norms clause (protocols/temperature.md section 7) from the three growth_rule
    results: the primary rule must pass and neither control may pass; ``errors`` (task errors) make all "error"."""
    out = {}
    if errors:
        for c in ("", "_null", "_ignored"):
            out[f"norm{c}_verdict"], out[f"norm{c}_verdict_reason"] = "error", f"task errors: {errors}"
        out["norm_conclusion"] = "not confirmed (task errors)"
        return out
    out["norm_verdict"], out["norm_verdict_reason"] = ("pass", "") if primary.passed else ("fail", primary.reason)
    for c, r in (("null", null), ("ignored", ignored)):
        out[f"norm_{c}_verdict"], out[f"norm_{c}_verdict_reason"] = (
            ("fail", "the control passed the rule: the design cannot tell growth from noise") if r.passed
            else ("pass", ""))
    if out["norm_null_verdict"] != "pass" or out["norm_ignored_verdict"] != "pass":
        out["norm_conclusion"] = "not confirmed (inconclusive: a control passed the rule)"
    elif primary.passed:
        out["norm_conclusion"] = "confirmed"
    else:
        out["norm_conclusion"] = f"not confirmed ({primary.reason or 'the primary rule did not pass'})"
    return out


def summary_schema(alpha: float, ess_reliable: float, k_onset_factor: float) -> dict:
    """The dataset variables of the per-block KL estimates and of :func:`ce_summary`, :func:`bias_summary`,
    :func:`kl_summary`, :func:`gap_summary`, :func:`c1_problems` and :func:`c1_shape` over (setting, tau[, k]), as
    :class:`simkit.runner.Var` (``alpha``, ``ess_reliable`` and ``k_onset_factor`` enter the descriptions)."""
    from simkit.exact.divergence import N_SUP_GRID, N_SUP_PROBES
    from simkit.runner.study import Var

    S, T, ST, STK = ("setting",), ("tau",), ("setting", "tau"), ("setting", "tau", "k")
    STB = ("setting", "tau", "block")
    out = {
        # per-block KL estimates (simkit.distributions.softmax_kernel.kl_estimates)
        "raw_kl_exact": Var((*STB, "anchor"), "exact KL(Q(x,.) || pi) at a KL anchor, in nats", "1",
                            "closed form (simkit.distributions.softmax_kernel.kl_q_pi)"),
        "raw_kl_q": Var((*STB, "anchor"), "direct KL estimate at a KL anchor, in nats", "1",
                        f"mean of log q over y ~ Q(x,.); per-anchor KL estimate (simkit.distributions.softmax_kernel)"),
        "raw_kl_q_mcse": Var((*STB, "anchor"), "MCSE of raw_kl_q, in nats", "1", "sd over draws / sqrt(kl_samples)"),
        "raw_kl_is": Var((*STB, "anchor"), "importance KL estimate at a KL anchor, in nats", "1",
                         f"mean of q log q over y ~ pi; per-anchor KL estimate (simkit.distributions.softmax_kernel)"),
        "raw_kl_is_mcse": Var((*STB, "anchor"), "MCSE of raw_kl_is, in nats", "1", "sd over draws / sqrt(kl_samples)"),
        "raw_kl_is_ess": Var((*STB, "anchor"), "effective sample size of the importance weights", "1",
                             "(sum q)^2 / sum q^2 over the kl_samples draws y ~ pi"),
        # cross-entropy
        "ce_exact": Var(ST, "exact cross-entropy CE(M, Q), in nats", "1", "simkit.exact.cross_entropy"),
        "ce_exact_mcse": Var(ST, "MCSE of ce_exact, in nats", "1", "0 where exact (quadrature); Monte Carlo over x "
                             "(the cell's prepare rng) for mixtures"),
        "ce_estimate": Var(ST, "Monte Carlo CE, in nats", "1", "block mean of l_inf = -s(x,x+) + log Z(x)"),
        "ce_estimate_mcse": Var(ST, "MCSE of ce_estimate, in nats", "1", "sd over blocks / sqrt(n_blocks)"),
        "ce_z": Var(ST, "z-score of ce_estimate against ce_exact", "1",
                    "(ce_estimate - ce_exact) / sqrt(ce_estimate_mcse^2 + ce_exact_mcse^2)"),
        "entropy": Var(ST, "H = -E_x KL(M(x,.) || pi), in nats", "1", "lower bound of CE, attained when Q = M; "
                       "-I(x; x+) for uniform pi; closed form for a single vMF pi, Monte Carlo for mixtures "
                       "(simkit.exact.divergence.entropy_h)"),
        "entropy_mcse": Var(ST, "MCSE of entropy, in nats", "1", "0 where exact"),
        # bias constant and expansion scales
        "c1_exact": Var(ST, "exact c1, in nats", "1", "E[m1/Z - (Z2/Z^2 - 1)/2] (simkit.exact.bias_constant)"),
        "c1_exact_mcse": Var(ST, "MCSE of c1_exact, in nats", "1", "0 where exact; Monte Carlo over x (the cell's "
                             "prepare rng, independent across tau) otherwise"),
        "z2_ratio": Var(ST, "E_x[Z2/Z^2]", "1", "relative second moment of e^s/Z: the expansion scale of the negatives "
                        "(simkit.exact.expansion_scales; nondecreasing in 1/tau)"),
        "m1_ratio": Var(ST, "E_x[m1/Z]", "1", "weight scale of the positive (simkit.exact.expansion_scales)"),
        "expansion_scale": Var(ST, "expansion scale", "1", "max(E[Z2/Z^2], E[m1/Z])"),
        "k_onset": Var(ST, "predicted start of the 1/k regime", "1", f"{k_onset_factor:g} x expansion_scale (rate_k's "
                       "k_min rule); the expansion is in powers of the scale over k"),
        "scale_bound": Var(T, "bound e^{2/tau} on Z2/Z^2", "1", "Z2/Z^2 = E_pi q^2 <= sup q <= e^{2/tau} for every pi "
                           "and phi"),
        # KL(Q || pi)
        "kl_bound": Var(T, "bound 2/tau, in nats", "1", "KL(Q(x,.) || pi) <= 2/tau (docs/theory.md section 2)"),
        "kl_mean_exact": Var(ST, "exact E_x KL(Q(x,.) || pi), in nats", "1", "closed form per anchor "
                             "(simkit.distributions.softmax_kernel.kl_q_pi) averaged over x ~ pi by quadrature (Monte Carlo for "
                             "mixtures)"),
        "kl_mean_exact_mcse": Var(ST, "MCSE of kl_mean_exact, in nats", "1", "0 where exact"),
        "kl_sup_exact": Var(ST, "largest exact KL(Q(x,.) || pi) over x, in nats", "1", f"uniform: constant; vMF: max "
                            f"over {N_SUP_GRID} values of mu.x; mixture: max over {N_SUP_PROBES} random probe points (a "
                            "lower bound on the supremum)"),
        "kl_max_anchor_exact": Var(ST, "largest exact KL over the sampled KL anchors, in nats", "1",
                                   "closed form at the same anchors as kl_max"),
        "kl_ratio": Var(ST, "looseness: kl_max / (2/tau)", "1", "how far below the bound the largest measured KL lies"),
        "kl_ratio_mcse": Var(ST, "MCSE of kl_ratio", "1", "kl_max_mcse / (2/tau)"),
        "kl_is_ess_min": Var(ST, "smallest effective sample size of the importance weights", "1",
                             f"(sum q)^2 / sum q^2 over the anchors; below {ess_reliable:g} the importance estimate and "
                             "its MCSE are unreliable"),
        # finite-k gap
        "gap": Var(STK, "finite-k gap R_k - log k - CE, in nats", "1", "block mean of the control-variate estimator "
                   "(simkit.estimators.infonce.GapEstimator)"),
        "gap_mcse": Var(STK, "MCSE of gap, in nats", "1", "sd over blocks / sqrt(n_blocks)"),
        "gap_plain": Var(STK, "gap without control variates, in nats", "1", "block mean of l_k - log k - l_inf"),
        "gap_plain_mcse": Var(STK, "MCSE of gap_plain, in nats", "1", "sd over blocks / sqrt(n_blocks)"),
        "k_gap": Var(STK, "k times gap, in nats", "1", "approaches c1 once k >> expansion scale"),
        "k_gap_mcse": Var(STK, "MCSE of k_gap, in nats", "1", "k * gap_mcse"),
        "gap_exact": Var(STK, "exact gap, in nats", "1", "simkit.exact.gap_exact; uniform pi only, NaN otherwise"),
        "gap_z": Var(STK, "z-score of gap against gap_exact", "1", "(gap - gap_exact) / gap_mcse; diagnostic, uniform "
                     "pi only"),
        "loss": Var(STK, "InfoNCE risk R_k, in nats", "1", "block mean of l_k"),
        "loss_mcse": Var(STK, "MCSE of loss, in nats", "1", "sd over blocks / sqrt(n_blocks)"),
        # per-setting descriptive fields
        "tau_c1_peak": Var(S, "tau at which c1 is largest on the grid", "1", "descriptive"),
        "tau_c1_zero": Var(S, "tau at which c1 changes sign", "1", "log-linear interpolation between the grid points "
                           "of the last sign change; NaN if c1 keeps one sign"),
        "scale_slope": Var(S, "log-log slope of E[Z2/Z^2] at the two smallest tau", "1",
                           "descriptive: Z2/Z^2 grows like tau^{-(d-1)/2} for a continuous pi"),
        "scale_slope_predicted": Var(S, "-(d-1)/2", "1", "Laplace approximation of Z and Z2 at small tau"),
        "c1_ratio": Var(S, "|c1(tau_min)| / max |c1| over tau >= 1/kappa_M", "1", "inflation of the bias constant"),
        "c1_ratio_mcse": Var(S, "MCSE of c1_ratio", "1", "delta method from c1_exact_mcse; 0 where c1 is exact"),
        "ce_max_abs_z": Var(S, "largest |ce_z| over tau", "1", "check (ii) requires <= attrs['z_ce']"),
        "kl_ratio_max": Var(S, "largest kl_ratio over tau", "1", "looseness of 2/tau at its tightest"),
    }
    for _est, _suffix, _what in (("q", "", "direct: y ~ Q(x,.), mean of log q"),
                                 ("is", "_is", "importance: y ~ pi, mean of q log q")):
        out.update({
            f"kl_mean{_suffix}": Var(ST, f"Monte Carlo E_x KL(Q(x,.) || pi), {_est}, in nats", "1",
                                     f"mean over the KL anchors of the per-anchor estimate ({_what})"),
            f"kl_mean{_suffix}_mcse": Var(ST, f"MCSE of kl_mean{_suffix}, in nats", "1",
                                          "sd of block means / sqrt(n_blocks): anchors and draws"),
            f"kl{_suffix}_z": Var(ST, f"z-score of the {_est} estimates against the closed form", "1",
                                  "block mean of (estimate - exact KL) over the same anchors, over its MCSE; diagnostic "
                                  "of the closed form"),
            f"kl_max{_suffix}": Var(ST, f"largest per-anchor Monte Carlo KL, {_est}, in nats", "1",
                                    f"max over the n_blocks x kl_anchors KL anchors ({_what})"),
            f"kl_max{_suffix}_mcse": Var(ST, f"MCSE of kl_max{_suffix}, in nats", "1",
                                         "the per-anchor MCSE (sd over draws / sqrt(kl_samples)) of that anchor"),
            f"kl_upper{_suffix}": Var(ST, f"max over anchors of KL_hat - z MCSE, {_est}, in nats", "1",
                                      f"z = attrs['z_kl'] (one-sided, Bonferroni over every cell, anchor and estimator "
                                      f"at {alpha:g}); C5 requires kl_upper <= 2/tau"),
        })

    return out


def norm_schema(rule_names: dict[str, str]) -> dict:
    """The dataset variables of the norms clause over (tau_n[, norm_block]): the raw blocks of
    :func:`simkit.estimators.norms.norm_block`, :func:`norm_summary`'s summaries and rules (``rule_names``:
    rule -> what it is applied to) and :func:`norm_verdicts`' verdicts, as :class:`simkit.runner.Var`."""
    from simkit.estimators.norms import NORM_BLOCK_STATS
    from simkit.runner.schema import estimate_vars, verdict_vars
    from simkit.runner.study import Var

    TN, TB = ("tau_n",), ("tau_n", "norm_block")
    out = {
        "tau_n": Var(TN, "temperature tau of the norms design", "1", "score psi(x).psi(y)/tau, psi = r u_W"),
        "norm_block": Var(("norm_block",), "replicate block of the norms design", "1", "independent training samples"),
        **{f"raw_norm_{n}": Var(TB, f"per-block {ln}" + (", in nats" if nats else ""), "1", d)
           for n, (ln, nats, d) in NORM_BLOCK_STATS.items()},
    }
    for n in ("gap_cv", "gap", "sens_cv", "sens", "sens_ref", "sens_ignored", "sens_fd", "train_risk"):
        ln, _, d = NORM_BLOCK_STATS[n]
        out.update(estimate_vars(f"norm_{n}", TN, f"E[{ln}]", f"mean over blocks; {d}", nats=True,
                                 mcse="sd over blocks / sqrt(blocks)"))
    out.update({
        "norm_gap_tau": Var(TN, "normalised gap G tau, in nats", "1", "tau x norm_gap_cv: flat in tau if G grows "
                            "only like the 1/tau scale of the scores"),
        "norm_gap_tau_mcse": Var(TN, "MCSE of norm_gap_tau, in nats", "1", "tau x norm_gap_cv_mcse"),
        "norm_sens_tau": Var(TN, "normalised sensitivity S tau, in nats", "1", "tau x norm_sens_cv"),
        "norm_sens_tau_mcse": Var(TN, "MCSE of norm_sens_tau, in nats", "1", "tau x norm_sens_cv_mcse"),
        "norm_fd_rel_error": Var(TN, "largest |S_fd - S| / |S| over blocks", "1",
                                 "finite difference against the pathwise derivative (same phi_hat and tuples)"),
        "norm_converged": Var(TN, "fraction of converged trainings", "1", "L-BFGS-B success flag"),
        "norm_iterations": Var(TN, "mean L-BFGS-B iterations", "1", "over blocks"),
        "norm_r_min": Var((), "smallest norm factor r = e^-beta", "1", "r(x) = exp(beta e_1.x)"),
        "norm_r_max": Var((), "largest norm factor r = e^beta", "1", "r(x) = exp(beta e_1.x)"),
        "norm_gap_slope": Var((), "secondary: slope of log E[G] on log tau", "1", "block-mean curve of gap_cv, "
                              "jackknife SE; -1 is the 1/tau scaling of the scores, below -1 is growth beyond it"),
        "norm_gap_slope_se": Var((), "jackknife SE of norm_gap_slope", "1", "NaN if a block mean of G is <= 0"),
        "norm_sens_slope_tau": Var((), "secondary: slope of log E[S tau] on log tau", "1", "norm_primary_b + 1"),
        **verdict_vars("norm_verdict", (), "verdict of the pre-registered primary rule", "pass when growth_rule "
                       "passes on sens_cv (protocols/temperature.md section 7)",
                       reason_long_name="why the primary rule did not pass"),
        **verdict_vars("norm_null_verdict", (), "verdict of the null control", "pass when the rule does NOT pass on "
                       "sens_ref", reason_long_name="why the null control check did not pass"),
        **verdict_vars("norm_ignored_verdict", (), "verdict of the score-ignored control", "pass when the rule does "
                       "NOT pass on sens_ignored", reason_long_name="why the score-ignored control check did not pass"),
        "norm_conclusion": Var((), "confirmatory conclusion on the norms clause of C5", "1",
                               "confirmed / not confirmed (protocols/temperature.md section 7)"),
    })
    for c, what in rule_names.items():
        for f, d in RULE_FIELDS.items():
            out[f"norm_{c}_{f}"] = Var((), f"{what}: {f}", "1", d)
    return out


# ----------------------------------------------------------------------------------------------
# claim-check results of the KL, CE and c1 checks from a summarised dataset (studies/temperature.py)

def _argmax2(a: np.ndarray) -> tuple[int, int]:
    return np.unravel_index(int(np.argmax(np.where(np.isfinite(a), a, -np.inf))), a.shape)


def _detail(ds, texts: list[str], v: str, c: str) -> str:
    """One clause per setting; the reason of check ``c`` shown where the verdict ``v`` did not pass."""
    from simkit.runner.verdicts import cell_detail
    verdicts = [str(x) for x in ds[v].values]
    reasons = [str(r) if x != "pass" else "" for r, x in zip(ds[f"verdict_{c}_reason"].values, verdicts)]
    return cell_detail(ds["setting"].values, texts, verdicts, reasons)


def kl_exact_check(ds) -> dict:
    """Claim-check result of the exact part of the KL check: the largest exact KL / (2/tau) (verdicts per setting in the detail)."""
    ratio = np.fmax(ds["kl_max_anchor_exact"].values, ds["kl_sup_exact"].values) / ds["kl_bound"].values
    i, j = _argmax2(ratio)
    texts = [f"largest exact KL/(2/tau) = {float(nan_reduce(np.nanmax, r, axis=0)):.3g}" for r in ratio]
    return {"estimate": ratio[i, j], "estimate_mcse": 0.0, "verdict": combine_verdicts(ds["verdict_kl_exact"].values),
            "detail": _detail(ds, texts, "verdict_kl_exact", "kl")}


def kl_mc_check(ds) -> dict:
    """Claim-check result of the Monte Carlo part of the KL check: the largest KL_hat / (2/tau) (verdicts per setting in the detail)."""
    ratio = ds["kl_ratio"].values
    i, j = _argmax2(ratio)
    texts = [f"max KL/(2/tau) = {float(ds['kl_ratio_max'].values[n]):.3g}, at tau_min KL max "
             f"{float(ds['kl_max'].values[n, 0]):.3g} ± {float(ds['kl_max_mcse'].values[n, 0]):.2g} vs 2/tau = "
             f"{float(ds['kl_bound'].values[0]):.3g}" for n in range(ds.sizes["setting"])]
    return {"estimate": ratio[i, j], "estimate_mcse": ds["kl_ratio_mcse"].values[i, j],
            "verdict": combine_verdicts(ds["verdict_kl_mc"].values), "detail": _detail(ds, texts, "verdict_kl_mc", "kl")}


def ce_check(ds) -> dict:
    """Claim-check result of the CE check: the largest |z| of CE Monte Carlo against exact (verdicts per setting in the detail)."""
    z = ds["ce_z"].values
    i, j = _argmax2(np.abs(z))
    texts = [f"max |z| = {float(m):.2f}" for m in ds["ce_max_abs_z"].values]
    return {"estimate": z[i, j], "estimate_mcse": 1.0, "verdict": combine_verdicts(ds["verdict_ce"].values),
            "detail": _detail(ds, texts, "verdict_ce", "ce")}


def c1_check(ds) -> dict:
    """Claim-check result of the c1 check: the smallest |c1(tau_min)| / max |c1(tau >= 1/kappa_M)| over settings (verdicts per setting in the detail)."""
    f = {n: ds[n].values for n in ("tau_c1_peak", "tau_c1_zero", "c1_ratio", "scale_slope", "scale_slope_predicted")}
    texts = [f"c1 peaks at tau = {f['tau_c1_peak'][n]:.3g}, changes sign at tau = {f['tau_c1_zero'][n]:.3g}, "
             f"|c1(tau_min)| / max |c1(tau >= 1/kappa_M)| = {f['c1_ratio'][n]:.3g}, E[Z2/Z^2] slope "
             f"{f['scale_slope'][n]:.2f} (-(d-1)/2 = {f['scale_slope_predicted'][n]:.1f})"
             for n in range(ds.sizes["setting"])]
    w = int(np.argmin(np.where(np.isfinite(f["c1_ratio"]), f["c1_ratio"], np.inf)))
    return {"estimate": f["c1_ratio"][w], "estimate_mcse": ds["c1_ratio_mcse"].values[w],
            "verdict": combine_verdicts(ds["verdict_c1"].values), "detail": _detail(ds, texts, "verdict_c1", "c1")}
