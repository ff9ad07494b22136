"""The norms clause of C5 beyond the 1/tau score scale (protocols/temperature_scaled.md).

Every score s = psi(x).psi(y)/tau carries the factor 1/tau, and so does the sensitivity
S = dG/deps = E[sum_j p_j s_j](fresh - train) of the gap to the negatives' norms: S growing like 1/tau
as tau falls is the score scale, not the gap becoming sensitive. :func:`scaled_growth_rule` tests growth
of tau S instead: one-sided, slope of log(tau E[S]) on log tau below a margin b0 < 0 (which a pure
1/tau scaling, slope 0, does not clear), and E[S] > 0 at the smallest tau of its grid, both at alpha
(an intersection-union test, :func:`simkit.stats.trend.growth_rule` with the scale removed). It also
says when the data refute H1 (the opposite one-sided tests reject). :func:`scaled_summary`,
:func:`scaled_verdicts` and :func:`scaled_schema` give the dataset variables of the rule, its two
controls (the fixed reference's S, E[S] = 0; a score-ignored change of the norms, S = 0) and the
verdicts; :func:`rule_check` turns them into a claim check's result.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np
from numpy.typing import ArrayLike
from scipy import stats

from simkit.stats.analysis import jackknife, mean_mcse
from simkit.stats.temperature import NORM_CONTROLS, RULE_FIELDS, nan_reduce, norm_verdicts
from simkit.stats.trend import GrowthRule, growth_rule, paired_t_power

__all__ = ["ScaledGrowthRule", "planned_miss_rate", "PLANNED_SD", "PLANNED_DISTANCE", "scaled_growth_rule", "SCALED_FIELDS", "scaled_summary", "scaled_verdicts",
           "scaled_schema", "rule_check", "SCALED_STATS"]

#: fields of :class:`ScaledGrowthRule` stored per rule: name -> description
SCALED_FIELDS = {
    **RULE_FIELDS,
    "b": "OLS slope of log(tau E[S]) on log tau (block-mean curve): the slope of log E[S] plus 1",
    "t": "(b - b0) / b_se on blocks - 1 df", "p": "one-sided P(T <= t); H0 b >= b0 (tau S does not grow enough)",
    "level": "E[S] at the smallest tau of the grid, in nats",
    "refute_p": "one-sided P(T >= t): small when b >= b0 is shown (growth of tau S below the margin)",
    "level_refute_p": "one-sided P(T <= level_t): small when E[S] <= 0 is shown at the smallest tau",
    "refuted": "1 if a refutation test rejects at alpha (the data contradict H1; the slope's only when defined)",
}
#: per-block quantities summarised with their MCSE (prefix ``scaled_``)
SCALED_STATS = ("gap_cv", "sens_cv", "sens", "sens_ref", "sens_ignored", "sens_fd")


@dataclass(frozen=True)
class ScaledGrowthRule(GrowthRule):
    """A :class:`~simkit.stats.trend.GrowthRule` whose slope ``b`` is that of log(tau E[X]), with the
    refutation tests: ``refute_p`` = P(T >= t) (b >= b0 shown), ``level_refute_p`` = P(T <= level_t)."""

    refute_p: float = math.nan
    level_refute_p: float = math.nan
    refuted: bool = False


def scaled_growth_rule(taus: ArrayLike, blocks: ArrayLike, *, b0: float, alpha: float) -> ScaledGrowthRule:
    """Intersection-union rule "tau E[X] grows as tau falls, and E[X] > 0 at the smallest tau".

    Parameters
    ----------
    taus : array_like, shape (J,)
        Temperatures (at least two distinct, > 0).
    blocks : array_like, shape (n_blocks, J)
        Per-block estimates of X (not multiplied by tau) at each tau; blocks with a NaN are dropped.
    b0 : float
        Margin, < 0: H0 ``b >= b0`` for the slope b of log(tau E[X]) on log tau.
    alpha : float
        Level of each one-sided test (and of each refutation test).

    Returns
    -------
    ScaledGrowthRule
        As :func:`~simkit.stats.trend.growth_rule` at margin ``b0 - 1`` on X (the OLS slope of
        log(tau m) on log tau is that of log m plus 1 exactly; t, p and the level test are unchanged),
        with ``b`` the slope of log(tau E[X]) and the refutation tests (the slope's needs a defined b).
    """
    if not (isinstance(b0, (int, float, np.floating)) and b0 < 0):
        raise ValueError(f"'b0' must be a number < 0, got {b0!r}")
    r = growth_rule(taus, blocks, b0=float(b0) - 1.0, alpha=alpha)
    df = r.n_blocks - 1
    refute_p = float(stats.t.sf(r.t, df)) if r.defined else math.nan
    level_refute_p = float(stats.t.cdf(r.level_t, df)) if r.n_blocks >= 3 else math.nan
    b = r.b + 1.0
    why = []
    if r.defined and not r.p < alpha:
        why.append(f"slope of log(tau S) {b:.3f} ± {r.se:.3f}: b < {b0:.3f} not shown (p = {r.p:.3g} >= {alpha:g})")
    if r.n_blocks >= 3 and not r.level_p < alpha:
        why.append(f"mean at tau = {float(np.min(taus)):g} {r.level:.4g} ± {r.level_se:.2g}: > 0 not shown "
                   f"(p = {r.level_p:.3g} >= {alpha:g})")
    reason = "; ".join(why) if r.defined else r.reason
    base = {f.name: getattr(r, f.name) for f in fields(GrowthRule)}
    base.update(b=b, reason=reason)
    return ScaledGrowthRule(**base, refute_p=refute_p, level_refute_p=level_refute_p,
                            refuted=bool((r.defined and refute_p < alpha) or level_refute_p < alpha))


def _ratio_jackknife(num: np.ndarray, den: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """E[num]/E[den] per tau from (tau, block) arrays and its delete-one-block jackknife SE."""
    ok = np.all(np.isfinite(num), axis=0) & np.all(np.isfinite(den), axis=0)
    a = np.concatenate([num[:, ok], den[:, ok]]).T
    j = num.shape[0]
    if a.shape[0] < 3:
        return np.full(j, np.nan), np.full(j, np.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        est, se, _ = jackknife(lambda m: m[:j] / m[j:], a)
    return est, se


def scaled_summary(v: dict[str, np.ndarray], taus: np.ndarray, *, b0: float, alpha: float) -> tuple[dict, dict]:
    """Summaries and rules from the per-block values ``v`` (name -> (tau, block), the names of
    :data:`simkit.estimators.norms.NORM_BLOCK_STATS`): block means with MCSE (:data:`SCALED_STATS`), tau S
    and tau G, S/G, the finite-difference check, and :func:`scaled_growth_rule` on
    :data:`simkit.stats.temperature.NORM_CONTROLS`'s quantities as ``scaled_<rule>_<field>``."""
    taus = np.asarray(taus, dtype=float)
    out = {}
    for n in SCALED_STATS:
        out[f"scaled_{n}"], out[f"scaled_{n}_mcse"] = mean_mcse(v[n], axis=1)
    for n, q in (("sens_tau", "sens_cv"), ("gap_tau", "gap_cv")):
        out[f"scaled_{n}"], out[f"scaled_{n}_mcse"] = taus * out[f"scaled_{q}"], taus * out[f"scaled_{q}_mcse"]
    out["scaled_sens_gap"], out["scaled_sens_gap_se"] = _ratio_jackknife(v["sens_cv"], v["gap_cv"])
    with np.errstate(invalid="ignore", divide="ignore"):
        out["scaled_fd_rel_error"] = nan_reduce(np.nanmax, np.abs(v["sens_fd"] - v["sens"]) / np.abs(v["sens"]))
    out["scaled_converged"] = mean_mcse(v["converged"], axis=1)[0]
    rules = {c: scaled_growth_rule(taus, v[q].T, b0=b0, alpha=alpha) for c, q in NORM_CONTROLS.items()}
    for c, r in rules.items():
        for f in SCALED_FIELDS:
            out[f"scaled_{c}_{f}"] = float(getattr(r, "se" if f == "b_se" else f))
    return out, rules


def scaled_verdicts(primary, null, ignored, errors: str) -> dict:
    """The verdict rule of protocols/temperature_scaled.md section 7: that of
    :func:`simkit.stats.temperature.norm_verdicts` (primary passes, neither control passes), as
    ``scaled_*``, with the conclusion "refuted" when the primary rule fails, its refutation test
    rejects and both controls behave."""
    out = {k.replace("norm", "scaled", 1): val for k, val in norm_verdicts(primary, null, ignored, errors).items()}
    controls_ok = out["scaled_null_verdict"] == "pass" and out["scaled_ignored_verdict"] == "pass"
    if not errors and controls_ok and not primary.passed and primary.refuted:
        out["scaled_conclusion"] = "refuted (growth of tau S below the margin, or S <= 0, shown)"
    return out


def scaled_schema(rule_names: dict[str, str]) -> dict:
    """The dataset variables of :func:`scaled_summary` and :func:`scaled_verdicts` over (tau_s[, scaled_block])
    and the raw blocks ``raw_scaled_<name>``, as :class:`simkit.runner.Var` (``rule_names``: rule -> what
    it is applied to)."""
    from simkit.estimators.norms import NORM_BLOCK_STATS
    from simkit.runner.schema import estimate_vars, verdict_vars
    from simkit.runner.study import Var

    TS, TB = ("tau_s",), ("tau_s", "scaled_block")
    where = "protocols/temperature_scaled.md"
    out = {
        "tau_s": Var(TS, "temperature tau of the scaled-norms design", "1", f"grid of {where}"),
        "scaled_block": Var(("scaled_block",), "replicate block of the scaled-norms design", "1",
                            "independent training samples, seeds apart from the norms design's"),
        **{f"raw_scaled_{n}": Var(TB, f"per-block {ln}" + (", in nats" if nats else ""), "1", d)
           for n, (ln, nats, d) in NORM_BLOCK_STATS.items()},
    }
    for n in SCALED_STATS:
        ln, _, d = NORM_BLOCK_STATS[n]
        out.update(estimate_vars(f"scaled_{n}", TS, f"E[{ln}]", f"mean over blocks; {d}", nats=True,
                                 mcse="sd over blocks / sqrt(blocks)"))
    out.update({
        "scaled_sens_tau": Var(TS, "normalised sensitivity tau S, in nats", "1", "tau x scaled_sens_cv: the "
                               "primary estimand's curve (flat in tau if S grows only like 1/tau)"),
        "scaled_sens_tau_mcse": Var(TS, "MCSE of scaled_sens_tau, in nats", "1", "tau x scaled_sens_cv_mcse"),
        "scaled_gap_tau": Var(TS, "normalised gap tau G, in nats", "1", "tau x scaled_gap_cv"),
        "scaled_gap_tau_mcse": Var(TS, "MCSE of scaled_gap_tau, in nats", "1", "tau x scaled_gap_cv_mcse"),
        "scaled_sens_gap": Var(TS, "secondary: E[S] / E[G]", "1", "elasticity of the gap to the negatives' norms"),
        "scaled_sens_gap_se": Var(TS, "jackknife SE of scaled_sens_gap", "1", "delete-one-block jackknife"),
        "scaled_fd_rel_error": Var(TS, "largest |S_fd - S| / |S| over blocks", "1",
                                   "finite difference against the pathwise derivative (same phi_hat and tuples)"),
        "scaled_converged": Var(TS, "fraction of converged trainings", "1", "L-BFGS-B success flag"),
        **verdict_vars("scaled_verdict", (), "verdict of the scaled rule", f"pass when scaled_growth_rule passes "
                       f"on sens_cv ({where} section 7)", reason_long_name="why the scaled rule did not pass"),
        **verdict_vars("scaled_null_verdict", (), "verdict of the scaled rule's null control", "pass when the "
                       "rule does NOT pass on sens_ref", reason_long_name="why the null control check did not pass"),
        **verdict_vars("scaled_ignored_verdict", (), "verdict of the scaled rule's score-ignored control", "pass "
                       "when the rule does NOT pass on sens_ignored",
                       reason_long_name="why the score-ignored control check did not pass"),
        "scaled_conclusion": Var((), "confirmatory conclusion on the norms clause beyond the 1/tau scale", "1",
                                 f"confirmed / refuted / not confirmed ({where} section 7)"),
    })
    for c, what in rule_names.items():
        for f, d in SCALED_FIELDS.items():
            out[f"scaled_{c}_{f}"] = Var((), f"{what}, scaled rule: {f}", "1", d)
    return out


def rule_check(ds, prefix: str, c: str, b0: float, name: str, slope: str = "") -> dict:
    """A claim check's result (:func:`simkit.runner.check_result`) for rule ``c`` ("primary", "null",
    "ignored") stored as ``<prefix>_<c>_<field>`` with verdicts ``<prefix>[_<c>]_verdict``; ``slope``
    names the slope in the text (e.g. "of log(tau E[S]) ")."""
    from simkit.runner import check_result

    if f"{prefix}_{c}_b" not in ds.variables:  # a dataset written before this rule was wired
        return check_result(math.nan, math.nan, "error", f"{name}: not in this dataset", "rule not run")
    g = lambda f: float(ds[f"{prefix}_{c}_{f}"].values)  # noqa: E731
    v = f"{prefix}_verdict" if c == "primary" else f"{prefix}_{c}_verdict"
    text = (f"{name}: slope {slope}b = {g('b'):.3f} ± {g('b_se'):.3f} (H0 b >= {b0:.3f}: t = {g('t'):.2f}, "
            f"p = {g('p'):.3g}); E[S](tau_min) = {g('level'):.4g} ± {g('level_se'):.2g} (p = {g('level_p'):.3g}); "
            f"ratio tau_min/tau_max {g('ratio'):.3g}; {int(g('n_blocks'))} blocks")
    out = check_result(g("b"), g("b_se"), str(ds[v].values), text, str(ds[f"{v}_reason"].values))
    if c == "primary":
        out["detail"] += f"; conclusion: {ds[f'{prefix}_conclusion'].values}"
    return out


#: planning values of protocols/temperature_scaled.md section 5: conservative per-block sd of the slope of
#: log(tau E[S]) (upper 90% chi-square bound on the earlier run's) and the distance of its slope to the margin
PLANNED_SD, PLANNED_DISTANCE = 1.850, 0.372


def planned_miss_rate(n_blocks: int, alpha: float, floor: float) -> float:
    """The scaled rule's stated false-failure rate at a design of ``n_blocks`` blocks: 1 - the planned power of
    its one-sided t test (:func:`simkit.stats.trend.paired_t_power` at the protocol's planning values), never
    below ``floor`` (the protocol's rounded 0.10 at its own 384 blocks)."""
    if n_blocks < 2:
        return 1.0
    return max(float(floor), 1.0 - paired_t_power(int(n_blocks), PLANNED_SD, PLANNED_DISTANCE, alpha))
