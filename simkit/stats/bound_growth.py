"""Growth in k of bounds on InfoNCE loss differences: the non-inferiority rule that a softmax-average
bound does not grow, its positive controls, and the claim-row checks of a dataset it was applied to.

Cells are (setting, eps); a setting whose perturbation is ``"bump"`` displaces only rare negatives, so
there the max bound B_max is a second positive control. The rule (as in protocols/continuity.md):

* :func:`ni_columns`, :func:`secondary_columns`: the one-sided non-inferiority tests of the OLS slope
  of log2 E B on log2 k (:func:`simkit.stats.trend.fit_range_non_inferiority`) and the secondary growth
  tests, per cell, as dataset columns;
* :func:`confirmatory_verdicts`: per-cell primary, control and secondary verdicts and the conclusion;
* :func:`slope_problems`, :func:`cell_verdict`: the exploratory rule (B_avg flat, B_max growing);
* :func:`bounds_check`, :func:`primary_check`, :func:`control_check`, :func:`secondary_check`,
  :func:`slopes_check`, :func:`flat_pvalues`, :func:`primary_rate`, :func:`control_rate`: what a
  :class:`simkit.runner.Check` evaluates on the dataset.
"""

from __future__ import annotations

import math

import numpy as np

from simkit.stats.analysis import combine_verdicts
from simkit.stats.trend import (fit_range_non_inferiority, growth_test, non_inferiority_plugin_miss_rate,
                                union_bound)

__all__ = ["ni_columns", "secondary_columns", "confirmatory_verdicts", "slope_problems", "cell_verdict",
           "bounds_check", "primary_check", "control_check", "secondary_check", "slopes_check", "flat_pvalues",
           "primary_rate", "control_rate", "NI_FIELDS"]

#: dataset field suffixes of one non-inferiority test
NI_FIELDS = ("b", "b_se", "growth", "growth_se", "t", "p")


def _is_bump(perturbation) -> bool:
    return str(perturbation) == "bump"


def _verdict(problems, errors):
    from simkit.runner.verdicts import verdict
    return verdict(problems, errors)


def ni_columns(blocks: dict, quantities: dict, k, k_min: int, *, delta: float, alpha: float) -> dict:
    """``ni_<q>_<field>`` (:data:`NI_FIELDS`) for each ``q -> (per-block variable, role)`` of ``quantities``
    and ``ni_blocks`` (the finished blocks of B_avg's test); ``blocks[var]`` is (setting, block, eps, k)."""
    n_set, _, n_eps = blocks["bound_avg"].shape[:3]
    out = {}

    def rule(b):
        return fit_range_non_inferiority(k, b, k_min, delta=delta, alpha=alpha)
    for q, (var, _) in quantities.items():
        tests = [[rule(blocks[var][s, :, e]) for e in range(n_eps)] for s in range(n_set)]
        for field, attr in zip(NI_FIELDS, ("b", "se", "growth", "growth_se", "t", "p")):
            out[f"ni_{q}_{field}"] = np.array([[getattr(t, attr) for t in row] for row in tests], dtype=float)
    out["ni_blocks"] = np.array([[rule(blocks["bound_avg"][s, :, e]).n_blocks for e in range(n_eps)]
                                 for s in range(n_set)], dtype=float)
    return out


def secondary_columns(blocks: dict, k, k_min: int, *, alpha: float) -> dict:
    """``s1_*`` (E B_max grows) and ``s2_*`` (E B_max / E B_avg grows): ``b, b_se, t, p`` of the one-sided
    :func:`simkit.stats.trend.growth_test` per cell."""
    n_set, _, n_eps = blocks["bound_avg"].shape[:3]
    bmax, bavg = blocks["bound_max"], blocks["bound_avg"]
    s1 = [[growth_test(k, bmax[s, :, e], k_min, alpha=alpha) for e in range(n_eps)] for s in range(n_set)]
    s2 = [[growth_test(k, np.stack([bmax[s, :, e], bavg[s, :, e]], axis=1), k_min, alpha=alpha, ratio=True)
           for e in range(n_eps)] for s in range(n_set)]
    out = {}
    for name, res in (("s1", s1), ("s2", s2)):
        for i, field in enumerate(("b", "b_se", "t", "p")):
            out[f"{name}_{field}"] = np.array([[r[i] for r in row] for row in res], dtype=float)
    return out


def confirmatory_verdicts(out: dict, settings, perturbations, errors, *, alpha_ni: float, delta: float) -> dict:
    """Per-cell verdicts of the rule (primary, control, secondary) from the summary arrays in ``out``
    (``ni_<q>_p``, ``ni_<q>_b``, ``s1_p``, ``s2_p``, violation counts), and the conclusion. Returns arrays
    ``verdict``, ``verdict_reason``, ``control_verdict``, ``control_reason``, ``secondary_verdict``,
    ``secondary_reason`` (setting, eps) and the scalar ``conclusion``."""
    n_set, n_eps = np.shape(out["ni_avg_p"])
    res = {n: np.empty((n_set, n_eps), dtype=object) for n in ("verdict", "verdict_reason", "control_verdict",
                                                               "control_reason", "secondary_verdict",
                                                               "secondary_reason")}
    for i, j in np.ndindex(n_set, n_eps):
        err = [str(errors[i])]
        p, b = float(out["ni_avg_p"][i, j]), float(out["ni_avg_b"][i, j])
        res["verdict"][i, j], res["verdict_reason"][i, j] = _verdict(
            [] if p < alpha_ni else ["b undefined (a mean B_avg <= 0 or fewer than 3 blocks): non-inferiority not shown"]
            if not math.isfinite(p) else [f"B_avg growth {100 * (2 ** b - 1):+.2f}% per doubling: non-inferiority to "
                                          f"+{100 * delta:g}% not shown (p = {p:.3g} >= {alpha_ni:g})"], err)
        probs = []
        for q in (["negmax", "max"] if _is_bump(perturbations[i]) else ["negmax"]):
            pq = float(out[f"ni_{q}_p"][i, j])
            if not math.isfinite(pq):
                probs.append(f"{q}: b undefined")
            elif pq < alpha_ni:
                probs.append(f"{q} passed the non-inferiority rule (growth {100 * float(out[f'ni_{q}_growth'][i, j]):+.2f}"
                             f"% per doubling, p = {pq:.3g}): the rule cannot detect max-type growth here")
        res["control_verdict"][i, j], res["control_reason"][i, j] = _verdict(probs, err)
        res["secondary_verdict"][i, j], res["secondary_reason"][i, j] = _verdict(
            [f"{text} not shown (p = {ps:.3g})" for name, text in (("s1", "B_max growth"), ("s2", "growth of E B_max / "
                                                                                             "E B_avg"))
             if not ((ps := float(out[f"{name}_p"][i, j])) < alpha_ni and math.isfinite(ps))], err)
    n_viol = int(sum(np.nansum(out[f"violations_{t}"]) for t in ("score", "avg", "max")))
    prim, ctrl = combine_verdicts(res["verdict"]), combine_verdicts(res["control_verdict"])
    if any(str(e) for e in errors):
        conclusion = "error (a task failed)"
    elif n_viol:
        conclusion = "not confirmed (bound violated)"
    elif ctrl != "pass":
        conclusion = "not confirmed (inconclusive: the positive control passed the rule)"
    elif prim != "pass":
        conclusion = "not confirmed (growth >= delta not excluded)"
    else:
        conclusion = "confirmed"
    res["conclusion"] = conclusion
    return res


def slope_problems(p_avg: float, p_max: float, b_avg: float, b_max: float, *, alpha: float) -> list[str]:
    """The statistical part of a cell's exploratory verdict: B_avg flat (two-sided), B_max growing (one-sided)."""
    if not np.isfinite(p_avg) or not np.isfinite(p_max):
        return ["slope fit failed (too few blocks or non-positive means)"]
    out = []
    if p_avg < alpha:
        out.append(f"B_avg slope {b_avg:.2e} != 0 (p = {p_avg:.2g})")
    if not p_max < alpha:
        out.append(f"B_max growth not detected (slope {b_max:.2e}, p = {p_max:.2g})")
    return out


def cell_verdict(viol: dict, slope_probs: list[str], error: str) -> tuple[str, str]:
    """A cell's exploratory verdict: bound violations (``{bound: count}``) and :func:`slope_problems`."""
    return _verdict([f"B_{t} violated on {n} (tuple, k) pairs" for t, n in viol.items() if n] + slope_probs, [error])


def n_violations(ds) -> int:
    """Tuples violating any of the three bounds, over the dataset."""
    return int(sum(int(ds[f"violations_{t}"].values.sum()) for t in ("avg", "max", "score")))


def _task_error(ds) -> bool:
    return "cell_error" in ds and any(str(e) for e in ds["cell_error"].values.ravel())


def _cells(ds):
    return [(i, j, str(s), float(e)) for i, s in enumerate(ds["setting"].values) for j, e in enumerate(ds["eps"].values)]


def bounds_check(ds) -> dict:
    """Deterministic: B_score, B_avg and B_max are proved bounds, so no tuple may violate them."""
    n = n_violations(ds)
    detail = (f"{n} bound violations over {int(ds.attrs.get('tuples_per_k', 0))} tuples x {ds.sizes['k']} k x "
              f"{ds.sizes['eps']} eps x {ds.sizes['setting']} settings; largest |dl|/B_avg "
              f"{float(np.nanmax(ds['tightness_avg'].values)):.3g}, |dl|/B_max "
              f"{float(np.nanmax(ds['tightness_max'].values)):.3g}")
    return {"estimate": n, "estimate_mcse": 0.0, "verdict": "error" if _task_error(ds) else ("fail" if n else "pass"),
            "detail": detail}


def primary_check(ds) -> dict:
    """Primary: non-inferiority of E B_avg in every cell (intersection-union); estimate: the largest growth
    per doubling over the cells."""
    g, gse = ds["ni_avg_growth"].values, ds["ni_avg_growth_se"].values
    worst = np.unravel_index(int(np.nanargmax(np.where(np.isfinite(g), g, np.inf))), g.shape) if g.size else (0, 0)
    parts = [f"{s} eps {e:g}: growth {100 * g[i, j]:+.3f}% ± {100 * gse[i, j]:.3f}% per doubling (b = "
             f"{ds['ni_avg_b'].values[i, j]:.2e} ± {ds['ni_avg_b_se'].values[i, j]:.1e}), t = "
             f"{ds['ni_avg_t'].values[i, j]:.1f}, p = {ds['ni_avg_p'].values[i, j]:.2g} -> {ds['verdict'].values[i, j]}"
             for i, j, s, e in _cells(ds)]
    return {"estimate": g[worst], "estimate_mcse": gse[worst], "verdict": combine_verdicts(ds["verdict"].values),
            "detail": f"conclusion: {ds['conclusion'].values.item()}; " + "; ".join(parts)}


def control_check(ds) -> dict:
    """Positive control: the negatives' max (every cell) and B_max (bump cells) must NOT pass the rule;
    estimate: the smallest control growth per doubling."""
    parts, vals = [], []
    for i, j, s, e in _cells(ds):
        qs = ("negmax", "max") if _is_bump(ds["perturbation"].values[i]) else ("negmax",)
        for q in qs:
            vals.append((ds[f"ni_{q}_growth"].values[i, j], ds[f"ni_{q}_growth_se"].values[i, j]))
            parts.append(f"{s} eps {e:g} {q}: growth {100 * vals[-1][0]:+.2f}% ± {100 * vals[-1][1]:.2f}%, p = "
                         f"{ds[f'ni_{q}_p'].values[i, j]:.2g}")
    g = np.array([v[0] for v in vals], dtype=float)
    m = int(np.nanargmin(np.where(np.isfinite(g), g, -np.inf))) if g.size else 0
    return {"estimate": vals[m][0], "estimate_mcse": vals[m][1], "verdict": combine_verdicts(ds["control_verdict"].values),
            "detail": "; ".join(parts)}


def secondary_check(ds) -> dict:
    """Secondary: S1 E B_max grows and S2 E B_max / E B_avg grows, one-sided, every cell; estimate: the
    smallest S2 slope."""
    b, se = ds["s2_b"].values, ds["s2_b_se"].values
    m = np.unravel_index(int(np.nanargmin(np.where(np.isfinite(b), b, -np.inf))), b.shape)
    parts = [f"{s} eps {e:g}: S1 b = {ds['s1_b'].values[i, j]:.4f} ± {ds['s1_b_se'].values[i, j]:.4f} (p = "
             f"{ds['s1_p'].values[i, j]:.2g}), S2 b = {b[i, j]:.4f} ± {se[i, j]:.4f} (p = {ds['s2_p'].values[i, j]:.2g})"
             for i, j, s, e in _cells(ds)]
    return {"estimate": b[m], "estimate_mcse": se[m], "verdict": combine_verdicts(ds["secondary_verdict"].values),
            "detail": "; ".join(parts)}


def slopes_check(ds, *, alpha: float) -> dict:
    """Exploratory: per cell, WLS slope of B_avg = 0 not rejected two-sided and B_max growing one-sided, each at
    ``alpha``; estimate the B_avg slope farthest from 0."""
    b, se = ds["slope_avg"].values, ds["slope_avg_se"].values
    with np.errstate(invalid="ignore", divide="ignore"):
        z = np.where(np.isfinite(b), np.abs(b) / se, np.inf)
    worst = np.unravel_index(int(np.argmax(z)), z.shape)
    verdicts, parts = [], []
    for i, j, s, e in _cells(ds):
        probs = slope_problems(*(float(ds[n].values[i, j]) for n in ("slope_avg_p", "slope_max_p", "slope_avg",
                                                                     "slope_max")), alpha=alpha)
        v = "error" if str(ds["flat_verdict"].values[i, j]) == "error" else ("fail" if probs else "pass")
        verdicts.append(v)
        parts.append(f"{s} eps {e:g}: B_avg slope {b[i, j]:.2e} ± {se[i, j]:.1e}, B_max slope "
                     f"{ds['slope_max'].values[i, j]:.3f} ± {ds['slope_max_se'].values[i, j]:.3f}, "
                     f"B_max/B_avg at k = {int(ds['k'].values[-1])}: {ds['ratio_max_avg'].values[i, j, -1]:.3f} "
                     f"-> {v}" + (f" ({'; '.join(probs)})" if probs else ""))
    return {"estimate": b[worst], "estimate_mcse": se[worst], "verdict": combine_verdicts(verdicts),
            "detail": "; ".join(parts)}


def flat_pvalues(ds, *, alpha: float) -> dict[str, tuple[float, float]]:
    """Component tests of the exploratory check (for calibration): per cell, the two-sided p-value of B_avg
    slope = 0 (a point null: uniform only if E B_avg is exactly flat in k). B_max's growth test must reject
    (power), so it has no row."""
    return {f"{s}:flat@eps={e:g}": (float(ds["slope_avg_p"].values[i, j]), alpha) for i, j, s, e in _cells(ds)}


def primary_rate(ds, *, delta: float, alpha: float) -> float:
    """P(primary fails | b = 0 in every cell), the claim in its strict form (flat), with the run's SEs: a cell
    rejects when b_hat < b0 + t_alpha SE, so it fails with probability 1 - F_t(b0 / SE + t_alpha)."""
    df = np.maximum(ds["ni_blocks"].values - 1, 1)
    return union_bound(non_inferiority_plugin_miss_rate(ds["ni_avg_b_se"].values, df, delta=delta, alpha=alpha))


def control_rate(ds, *, alpha: float) -> float:
    """P(control fails | every control grows by at least delta): a control test wrongly shows non-inferiority
    with probability <= alpha at the margin, so the union over the control tests is <= 1 - (1 - alpha)^n."""
    n = sum(2 if _is_bump(ds["perturbation"].values[i]) else 1 for i in range(ds.sizes["setting"]))
    return float(1.0 - (1.0 - alpha) ** n)
