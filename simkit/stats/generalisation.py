"""Rules of the generalisation study's sweeps of E[G] (claims C3, C5, C6) and of its pre-registered
non-inferiority and bound checks (protocols/generalisation.md).

Each rule returns its values, its problems (phrases) and a verdict: :func:`rate_sweep` (slope of log E[G]
on log n, H0 >= -1/2 broken, or on log tau, growth as tau falls), :func:`trend_sweep` (E[G] per doubling
of k, one-sided, or of d, two-sided with an equivalence test), :func:`ni_verdicts` and
:func:`c3_conclusion` (the non-inferiority rule in k and its positive control), :func:`bound_vars` (the
Theorem-1 bound against the realised gap). The tests themselves are those of :mod:`simkit.stats.trend`.
"""

from __future__ import annotations

import numpy as np
import xarray as xr
from numpy.typing import NDArray

from simkit.exact.bounds import compare_to_bound, linear_class_bound
from simkit.stats.analysis import mean_mcse
from simkit.stats.trend import (NonInferiority, equivalence_test, log_sd_slope, non_inferiority, one_sided_rate,
                                trend_test)

__all__ = ["rate_sweep", "trend_sweep", "sweep_detail", "ni_detail", "ni_summary", "ni_verdicts", "c3_conclusion",
           "bound_vars", "sweep_schema", "ni_schema", "BOUND_SCHEMA", "NI_WHAT"]


def rate_sweep(s: str, lv: NDArray, blocks: NDArray, gap: NDArray, *, alpha: float, power: float
               ) -> tuple[dict, list[str], str]:
    """n sweep (H0 slope <= -1/2) or tau sweep (H0 slope >= 0) of log E[G]: values, reasons, verdict."""
    rc = one_sided_rate(lv, blocks, bound=-0.5 if s == "n" else 0.0, alternative="greater" if s == "n" else "less",
                        alpha=alpha, power=power)
    out = {"slope": rc.slope, "slope_se": rc.se, "slope_t": rc.t, "slope_p": rc.p, "slope_detect": rc.detect,
           "fit": rc.fitted}
    reasons, verdict = [], "fail"
    finite = np.isfinite(rc.slope)
    if not finite:
        reasons.append("mean G not positive at every level: no log-log fit")
    elif s == "n" and rc.reject:
        reasons.append(f"slope {rc.slope:.3f} ± {rc.se:.3f} is above -1/2 (t = {rc.t:.2f} > {rc.critical:.2f})")
    elif s == "tau" and not rc.reject:
        reasons.append(f"slope {rc.slope:.3f} ± {rc.se:.3f}: growth of G as tau falls not shown "
                       f"(t = {rc.t:.2f}, needs < {-rc.critical:.2f})")
    else:
        verdict = "pass"
    if s == "tau":
        out["false_fail"] = rc.miss_rate_at_estimate()
        return out, reasons, verdict
    # the n^{-1/2} sample variability: sd of G from (mean of G, mean of G^2) over blocks
    out["sd_slope"], out["sd_slope_se"] = log_sd_slope(lv, gap) if finite else (np.nan, np.nan)
    return out, reasons, verdict


def trend_sweep(s: str, lv: NDArray, blocks: NDArray, k_trend_min: int, *, alpha: float, power: float,
                equiv_margin: float) -> tuple[dict, list[str], str]:
    """k sweep (one-sided: no growth over k >= k_trend_min) or d sweep (two-sided, plus TOST) of E[G]."""
    x = np.log2(lv)
    sel = lv >= k_trend_min if s == "k" else np.ones(lv.size, bool)
    tt = trend_test(x[sel], blocks[:, sel], alternative="greater" if s == "k" else "two-sided", alpha=alpha,
                    power=power)
    grow = trend_test(x[sel], blocks[:, sel], alternative="greater", alpha=alpha, power=power)
    level = float(np.mean(mean_mcse(blocks[:, sel], axis=0)[0]))
    out = {"trend": tt.slope, "trend_se": tt.se, "trend_t": tt.t, "trend_p": tt.p, "trend_detect": tt.detect,
           "trend_level": level, "growth_p": grow.p, "rel_trend": tt.slope / level, "rel_trend_se": tt.se / level}
    if s == "d" and np.isfinite(tt.slope):
        # equivalence (two one-sided tests): |trend| < equiv_margin * E[G] per doubling
        eq = equivalence_test(tt, equiv_margin * level, alpha=alpha)
        out.update(equiv_margin=eq.margin, equiv_p=eq.p, equiv_verdict="pass" if eq.passed else "fail",
                   equiv_power0=eq.power0)
    if not np.isfinite(tt.slope):
        return out, ["fewer than 3 finished blocks"], "fail"
    if tt.reject:
        return out, [f"trend {tt.slope:+.4f} ± {tt.se:.4f} nat per doubling of {s} (t = {tt.t:.2f}, critical "
                     f"{tt.critical:.2f})"], "fail"
    return out, [], "pass"


def sweep_detail(s: str, v, *, power: float, equiv_margin: float) -> str:
    """The claim-row text of sweep ``s`` (n, k, tau or d) from its values ``v(name)`` (the fields of
    :func:`rate_sweep` or :func:`trend_sweep`): estimate with SE, p-value and the detectable effect."""
    if s == "n":
        return (f"n-slope {v('slope'):.3f} ± {v('slope_se'):.3f} (p of H0 <= -1/2: {v('slope_p'):.2g}; a slope "
                f"{v('slope_detect'):.3f} above -1/2 is detected with probability {power:g}); sd(G) slope "
                f"{v('sd_slope'):.3f} ± {v('sd_slope_se'):.3f}")
    if s == "tau":
        return (f"tau-slope {v('slope'):.3f} ± {v('slope_se'):.3f} (p {v('slope_p'):.2g}); false-failure rate is the "
                "plug-in P(no rejection) at the estimated slope")
    share = f"{100 * v('trend_detect') / v('trend_level'):.0f}% of E[G] = {v('trend_level'):.4f}"
    if s == "k":
        return (f"k-trend {v('trend'):+.4f} ± {v('trend_se'):.4f} nat per doubling (p {v('trend_p'):.2g}); growth of "
                f"{v('trend_detect'):.4f} nat per doubling ({share}) is detected with probability {power:g}")
    return (f"d-trend {v('trend'):+.4f} ± {v('trend_se'):.4f} nat per doubling (p {v('trend_p'):.2g}; one-sided p of "
            f"growth {v('growth_p'):.2g}); a trend of ±{v('trend_detect'):.4f} nat ({share}) per doubling is detected "
            f"with probability {power:g}; relative trend {100 * v('rel_trend'):+.1f}% ± {100 * v('rel_trend_se'):.1f}% "
            f"per doubling, equivalence within ±{100 * equiv_margin:g}% (TOST, supplementary): {v('equiv_verdict')} "
            f"(p {v('equiv_p'):.2g})")


def ni_detail(s: str, v, k, *, delta: float) -> str:
    """The claim-row text of non-inferiority sweep ``s`` over the levels ``k`` from its values ``v(name)``
    (the fields of :func:`ni_summary`)."""
    return (f"{s} (k = {int(np.min(k))}..{int(np.max(k))}): b = {v('b'):.4f} ± {v('b_se'):.4f} (growth "
            f"{100 * v('growth'):+.1f}% ± {100 * v('growth_se'):.1f}% per doubling of k; mean E[G] {v('level'):.4f}), "
            f"t = {v('ni_t'):.2f} on {int(v('ni_blocks')) - 1} df, one-sided p = {v('ni_p'):.3g} against growth "
            f">= {100 * delta:g}%")


def ni_summary(k: NDArray, blocks: NDArray, *, delta: float, alpha: float) -> tuple[NonInferiority, dict]:
    """The non-inferiority test of growth in k (:func:`simkit.stats.trend.non_inferiority`) on ``blocks``
    (blocks, levels) and its fields for the dataset (b, its SE, growth 2^b - 1 with SE, t, p, reject, blocks,
    and ``level``: the mean over the levels of the complete blocks)."""
    res = non_inferiority(k, blocks, delta=delta, alpha=alpha)
    ok = blocks[np.all(np.isfinite(blocks), axis=1)]
    fields = {"b": res.b, "b_se": res.se, "growth": res.growth, "growth_se": res.growth_se, "ni_t": res.t,
              "ni_p": res.p, "ni_reject": float(res.reject), "ni_blocks": float(res.n_blocks),
              "level": float(np.mean(ok)) if ok.size else np.nan}
    return res, {key: np.asarray(val, dtype=float) for key, val in fields.items()}


def ni_verdicts(ni: dict, *, alpha: float, delta: float) -> dict[str, tuple[str, str]]:
    """The verdict rule of protocols/generalisation.md section 7 for each NI sweep present.

    ``ni`` maps a sweep to ``(NonInferiority, task errors)``. kprim, krot, kbrown pass when
    non-inferiority (growth < delta per doubling of k) is shown; the positive control kctl passes
    (behaves) when its b is defined and the same rule does NOT show non-inferiority.
    """
    out = {}
    for s, (res, err) in ni.items():
        if err:
            out[s] = ("error", f"task errors: {err}")
        elif s == "kctl":
            out[s] = (("pass", "") if res.defined and not res.reject else
                      ("fail", f"the positive control passed the non-inferiority rule (p = {res.p:.3g} < {alpha:g}): "
                       "the design cannot detect growth in k" if res.defined else
                       "control b undefined (a mean G <= 0 or < 3 blocks): the design cannot detect growth"))
        elif not res.defined:
            out[s] = ("fail", "b undefined (a mean G <= 0 or fewer than 3 blocks): non-inferiority not shown")
        elif res.reject:
            out[s] = ("pass", "")
        else:
            out[s] = ("fail", f"growth {100 * res.growth:+.1f}% per doubling of k: non-inferiority to "
                      f"+{100 * delta:g}% not shown (p = {res.p:.3g} >= {alpha:g})")
    return out


def c3_conclusion(verdicts: dict[str, str]) -> str:
    """The confirmatory C3 conclusion (protocols/generalisation.md section 7) from the kprim and kctl verdicts."""
    prim, ctl = verdicts.get("kprim", "absent"), verdicts.get("kctl", "absent")
    if "error" in (prim, ctl):
        return "error (a task of the primary or control sweep failed)"
    if prim == "absent" or ctl == "absent":
        return "not evaluated (the primary or the control sweep was not run)"
    if ctl != "pass":
        return "not confirmed (inconclusive: the positive control was not flagged)"
    return "confirmed" if prim == "pass" else "not confirmed (growth >= delta not excluded)"


def bound_vars(raw: xr.Dataset, out: dict, points: NDArray, *, sweeps: tuple[str, ...], p: int, iso_min: float,
               eta: float, z_upper: float) -> dict:
    """Per-point Theorem-1 bound terms (linear class Theta_s, s = ``iso_min``, on S^(p-1); level ``eta`` of the
    variability term) at the linear points of ``sweeps``, and the deterministic check that the upper MCSE
    limit ``gap_cv + z_upper gap_cv_mcse`` stays below the complexity term at every fully specified point
    (protocols/generalisation.md section 6). ``raw``: the study's raw dataset over ``point``; ``out``: its
    block means with MCSE."""
    npt = raw.sizes["point"]
    names = ("bound_complexity", "bound_variability", "bound_bias", "bound_total", "bound_ratio", "in_class")
    res = {name: np.full(npt, np.nan) for name in names}
    sweeps_, fams = raw["sweep"].values.astype(str), raw["family"].values.astype(str)
    iso = raw["raw_isometry"].values
    for i in range(npt):
        if fams[i] != "linear" or sweeps_[i] not in sweeps:
            continue
        b = linear_class_bound(int(raw["n"].values[i]), int(raw["k"].values[i]), float(raw["tau"].values[i]),
                               float(raw["prep_c1_id"].values[i]), p=p, s=iso_min, eta=eta)
        res["bound_complexity"][i], res["bound_variability"][i] = b.complexity, b.variability
        res["bound_bias"][i], res["bound_total"][i] = b.bias, b.total
        fin = iso[i][np.isfinite(iso[i])]
        res["in_class"][i] = float(np.mean(fin >= iso_min)) if fin.size else np.nan
    res["gap_upper"] = out["gap_cv"] + z_upper * out["gap_cv_mcse"]
    res["excess_upper"] = out["excess"] + z_upper * out["excess_mcse"]
    with np.errstate(invalid="ignore", divide="ignore"):
        res["bound_ratio"] = out["gap_cv"] / res["bound_complexity"]
    cmp = compare_to_bound(res["bound_complexity"], res["gap_upper"], res["in_class"])
    spec, bad, outside = cmp.specified, cmp.above, cmp.outside
    reasons = []
    if bad.any():
        reasons.append("E[G] upper limit above the bound at " + ", ".join(str(points[i]) for i in np.flatnonzero(bad)))
    if not spec.any():
        reasons.append("no fully specified point")
    note = []
    if outside.any():
        note.append("not specified (a phi_hat outside Theta_s or no estimate): "
                    + ", ".join(str(points[i]) for i in np.flatnonzero(outside)))
    if np.any(fams == "fourier"):
        note.append("not specified for the Fourier family (W unbounded: no parameter radius)")
    note.append("the 1/k term has no bound constant in docs/theory.md (plug-in |c1(id)|/k reported); the bound on E is "
                "therefore not fully specified, the bound on E[G] is")
    res["bound_verdict"] = np.array("fail" if reasons else "pass")
    res["bound_reason"] = np.array("; ".join(reasons + note))
    res["bound_max_ratio"] = np.array(cmp.max_ratio)
    res["bound_points"] = np.array(float(spec.sum()))
    return res

def _v(dims, long_name, description, nats=False):
    from simkit.runner.study import Var
    return Var(dims, f"{long_name}, in nats" if nats else long_name, "1", description)


P = ("point",)


def sweep_schema(s: str, *, alpha: float, power: float, equiv_margin: float) -> dict:
    """The variables ``<s>_<name>`` of :func:`rate_sweep` (n, tau) or :func:`trend_sweep` (k, d) for sweep ``s``
    and its verdict (scalars; ``fit`` per point), as :class:`simkit.runner.Var`."""
    out = {}
    if s in ("n", "tau"):
        what = "log E[G] on log n" if s == "n" else "log E[G] on log tau"
        bound = -0.5 if s == "n" else 0.0
        out.update({
            "slope": _v((), f"slope of {what}", "WLS on the block means, all levels"),
            "slope_se": _v((), "SE of slope", "delete-one-block jackknife"),
            "slope_t": _v((), f"t statistic against {bound:g}", "(slope - bound) / SE"),
            "slope_p": _v((), "one-sided p-value", "H0: slope <= -1/2" if s == "n" else
                          "H0: slope >= 0 (G does not grow as tau falls)"),
            "slope_detect": _v((), f"slope change detected with probability {power:g}",
                               "(t_(1-alpha) + t_power) SE, from the bound towards H1"),
            "fit": _v(P, "fitted E[G]", f"exp of the log-log WLS fit (NaN outside the {s} sweep)", nats=True),
        })
        if s == "n":
            out["sd_slope"] = _v((), "slope of log sd(G) on log n",
                                 "OLS on the block-level sd; sampling variability is O(n^-1/2) (NaN: < 3 blocks)")
            out["sd_slope_se"] = _v((), "SE of sd_slope", "delete-one-block jackknife")
        else:
            out["false_fail"] = _v((), "plug-in false-failure rate",
                                   "P(the test fails to reject) if the true slope equals the estimate")
    else:
        one = s == "k"
        out.update({
            "trend": _v((), f"slope of E[G] in log2 {s}", "per doubling; mean of per-block OLS slopes"
                        + (" over k >= k_trend_min" if one else ""), nats=True),
            "trend_se": _v((), "SE of trend", "sd of the per-block slopes / sqrt(blocks)", nats=True),
            "trend_t": _v((), "t statistic", "trend / SE"),
            "trend_p": _v((), "p-value", "one-sided (H0: trend <= 0)" if one else "two-sided (H0: trend = 0)"),
            "trend_detect": _v((), f"trend detected with probability {power:g}",
                               "(t_(1-alpha) + t_power) SE" if one else "(t_(1-alpha/2) + t_power) SE", nats=True),
            "trend_level": _v((), "mean E[G] over the trend levels", "for relative statements", nats=True),
            "growth_p": _v((), "one-sided p-value of growth", "H0: trend <= 0"),
            "rel_trend": _v((), "trend relative to E[G]", "trend / trend_level: fraction of E[G] per doubling"),
            "rel_trend_se": _v((), "SE of rel_trend", "trend_se / trend_level (the level's own MCSE is ignored)"),
        })
        if s == "d":
            out.update({
                "equiv_margin": _v((), "equivalence margin", f"{equiv_margin:g} x E[G] per doubling of d", nats=True),
                "equiv_p": _v((), "p-value of the equivalence test",
                              "max of the two one-sided p-values (TOST); H0: |trend| >= margin"),
                "equiv_verdict": _v((), "equivalence verdict", f"pass when both one-sided tests reject at {alpha:g}"),
                "equiv_power0": _v((), "probability of passing the equivalence test at trend 0",
                                   "t approximation with the estimated SE"),
            })
    out["verdict"] = _v((), f"verdict of the {s}-sweep check", "pass, fail or error (a task failed)")
    out["verdict_reason"] = _v((), "why the check did not pass", "empty when it passed")
    return {f"{s}_{name}": var for name, var in out.items()}


#: what each non-inferiority sweep tests (prefix of its variables' long names)
NI_WHAT = {"kprim": "primary C3 (vMF kernel, fresh replicate of the k sweep)",
            "kctl": "positive control (linear class at tau sqrt(k_trend_min/k): complexity term grows like sqrt k)",
            "krot": "C7: C3 under the rotated vMF kernel", "kbrown": "C7: C3 under the Brownian kernel"}


def ni_schema(s: str) -> dict:
    """The pre-registered non-inferiority variables ``<s>_<name>`` of NI sweep ``s`` (scalars; the study
    fills them from :func:`simkit.stats.trend.non_inferiority` and :func:`ni_verdicts`)."""
    out = {
        "b": _v((), "slope b of log2 E[G] on log2 k", "OLS on the block-mean curve over k >= k_trend_min"),
        "b_se": _v((), "jackknife SE of b", "delete-one-block jackknife"),
        "growth": _v((), "growth of E[G] per doubling of k", "2^b - 1"),
        "growth_se": _v((), "SE of growth", "delta method: ln 2 * 2^b * b_se"),
        "ni_t": _v((), "non-inferiority t statistic", "(b - log2(1 + delta)) / b_se, n_blocks - 1 df"),
        "ni_p": _v((), "one-sided p-value of non-inferiority", "P(T <= ni_t); H0: growth >= delta"),
        "ni_reject": _v((), "non-inferiority shown", "1 if ni_p < alpha (growth < delta per doubling of k)"),
        "ni_blocks": _v((), "blocks in the test", "finished blocks"),
        "level": _v((), "mean E[G] over the k levels of the test", "mean of the block means", nats=True),
        "verdict": _v((), "verdict", "pass, fail or error (protocols/generalisation.md section 7)"),
        "verdict_reason": _v((), "why the check did not pass", "empty when it passed"),
    }
    return {f"{s}_{k}": v.like(long_name=f"{NI_WHAT[s]}: {v.long_name}") for k, v in out.items()}


#: the variables of :func:`bound_vars` and the C3 conclusion (:func:`c3_conclusion`)
BOUND_SCHEMA = {
    "bound_complexity": _v(P, "Theorem-1 complexity term 2 Rad_n (bound on E[G])",
                           "simkit.exact.bounds.theorem1_bound for the linear class Theta_s (s = ISO_MIN, 9 parameters in "
                           "the Frobenius ball of radius sqrt 3, L_phi = 2/s), loss Lipschitz 4 L_phi/tau and range "
                           "4/tau; NaN for the Fourier family", nats=True),
    "bound_variability": _v(P, "Theorem-1 sample-variability term", "McDiarmid: (4/tau) sqrt(log(1/eta) / (2n)), "
                            "eta = ETA; mean zero, so it bounds G of one training set, not E[G]", nats=True),
    "bound_bias": _v(P, "Theorem-1 1/k term (plug-in, not a bound)", "|c1(identity)| / k: docs/theory.md gives the "
                     "constant of gap_k = c1/k + O(1/k^2) but no bound on |gap_k(phi_hat)| or the remainder", nats=True),
    "bound_total": _v(P, "sum of the three Theorem-1 terms", "complexity + variability + plug-in 1/k term", nats=True),
    "gap_upper": _v(P, "upper MCSE limit of E[G]", "gap_cv + z_(1-alpha) gap_cv_mcse", nats=True),
    "excess_upper": _v(P, "upper MCSE limit of E[E]", "excess + z_(1-alpha) excess_mcse (plain E)", nats=True),
    "bound_ratio": _v(P, "E[G] / complexity term", "how far the realised gap sits below the bound on E[G]"),
    "in_class": _v(P, "fraction of phi_hat in the bound's class", "fraction of blocks with sigma_min/sigma_max of W "
                   ">= ISO_MIN (phi_hat in Theta_s, where the bound applies)"),
    "bound_verdict": _v((), "verdict of the bound check", "pass when gap_upper <= bound_complexity at every "
                        "fully specified point (linear family, all phi_hat in Theta_s); fail otherwise"),
    "bound_reason": _v((), "why the bound check did not pass, and which points are not specified", "text"),
    "bound_max_ratio": _v((), "largest gap_upper / bound_complexity", "over the fully specified points"),
    "bound_points": _v((), "fully specified points", "points where the bound on E[G] is evaluated and applies"),
    "c3_conclusion": _v((), "confirmatory C3 conclusion", "protocols/generalisation.md section 7"),
}
