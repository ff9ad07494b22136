"""Sensitivity of the rate verdict to its analysis choices: block size and the fit's truncation.

* :func:`block_groups`: the independent units of a design whose tasks hold several sub-blocks;
* :func:`exact_fit_bias`: the rate fit and the constant fit of :mod:`simkit.stats.analysis` applied
  to an exact curve, i.e. the estimates the method would report without Monte Carlo error (its
  deterministic bias at a given k_min);
* :func:`k_min_sensitivity`, :func:`pilot_sensitivity`: a rate rule re-applied at other k_min factors,
  and to the same blocks re-weighted with other control-variate coefficients;
* :func:`sensitivity_vars`, :func:`sensitivity_tables`, :func:`put_row`: the two tables of a dataset
  (schema entries, empty tables, one cell's row); :func:`nested_pilot_coefficients`, the coefficients
  the pilot-size table compares; :func:`sub_blocks_per_task`, :func:`size_cell_blocks`: how a cell of
  the block-size table splits its anchors into blocks over the engine's tasks.
"""

from __future__ import annotations

import copy
import math

import numpy as np
import statsmodels.api as sm
from numpy.typing import ArrayLike, NDArray

from simkit.estimators.infonce import gap_with_coefficients
from simkit.stats.analysis import mean_mcse

__all__ = ["block_groups", "exact_fit_bias", "k_min_sensitivity", "pilot_sensitivity", "sensitivity_vars",
           "sensitivity_tables", "put_row", "nested_pilot_coefficients", "sub_blocks_per_task", "size_cell_blocks", "KMF_FIELDS",
           "PILOT_FIELDS"]


def block_groups(blocks: ArrayLike) -> NDArray[np.float64]:
    """Independent (sub-)blocks: ``(block, sub, k)`` -> ``(units, k)``, rows without a finite value dropped
    (a task that ran fewer sub-blocks leaves all-NaN rows)."""
    b = np.asarray(blocks, dtype=float)
    a = b.reshape(-1, b.shape[-1])
    return a[np.any(np.isfinite(a), axis=1)]


def exact_fit_bias(k: ArrayLike, gap_exact: ArrayLike, gap_mcse: ArrayLike, k_min: float) -> tuple[float, float]:
    """``(slope, c1)`` of the rate fit (log gap on 1, log k, 1/k; weights (gap / mcse)^2) and the constant fit
    (gap on 1/k, 1/k^2; weights 1 / mcse^2) applied to the exact curve over k >= k_min, with the Monte Carlo
    weights of :func:`simkit.stats.analysis.fit_rate` and ``fit_inverse_powers``. NaN when fewer than 4
    levels with a finite positive MCSE remain or the exact curve is not positive there."""
    k, gap_exact, gap_mcse = (np.asarray(a, dtype=float) for a in (k, gap_exact, gap_mcse))
    sel = (k >= k_min) & np.isfinite(gap_exact) & np.isfinite(gap_mcse) & (gap_mcse > 0)
    if sel.sum() < 4 or np.any(gap_exact[sel] <= 0):
        return math.nan, math.nan
    ks, g, se = k[sel], gap_exact[sel], gap_mcse[sel]
    x = np.column_stack([np.ones_like(ks), np.log(ks), 1.0 / ks])
    slope = sm.WLS(np.log(g), x, weights=(g / se) ** 2).fit().params[1]
    c1 = sm.WLS(g, np.column_stack([1.0 / ks, 1.0 / ks**2]), weights=1.0 / se**2).fit().params[0]
    return float(slope), float(c1)


def k_min_sensitivity(rule, blocks: NDArray, factors, k: NDArray, gap_exact: NDArray, gap_mcse: NDArray) -> list[dict]:
    """``rule(blocks, factor)`` (a dict as :func:`simkit.stats.analysis.rate_verdict` returns) at each k_min
    factor, each with ``slope_exact_fit`` and ``c1_exact_fit`` (:func:`exact_fit_bias` at its k_min; NaN
    without one)."""
    rows = []
    for f in factors:
        r = dict(rule(blocks, f))
        r["slope_exact_fit"], r["c1_exact_fit"] = (exact_fit_bias(k, gap_exact, gap_mcse, r["k_min"])
                                                   if np.isfinite(r["k_min"]) else (math.nan, math.nan))
        rows.append(r)
    return rows


def pilot_sensitivity(rule, gap_plain: NDArray, means: tuple, coefs, factor: float) -> list[dict]:
    """``rule(blocks, factor)`` on the same blocks re-weighted with each control-variate coefficient array of
    ``coefs`` (:func:`simkit.estimators.infonce.gap_with_coefficients`), each with ``gap_mcse_kmax``, the MCSE
    of the re-weighted gap at the largest k."""
    rows = []
    for coef in coefs:
        g = gap_with_coefficients(gap_plain, means, coef)
        rows.append({**rule(g, factor), "gap_mcse_kmax": mean_mcse(g[:, -1])[1]})
    return rows


#: dataset name (after the table's prefix) -> field of :func:`k_min_sensitivity`'s rows
KMF_FIELDS = {**{n: n for n in ("slope", "slope_se", "k_min", "slope_p_half", "slope_exact_fit", "c1_exact_fit",
                                "verdict")}, "c1_z": "const_z", "c1_estimate": "const_estimate",
              "c1_estimate_mcse": "const_estimate_mcse", "reason": "reason"}
#: dataset name (after the table's prefix) -> field of :func:`pilot_sensitivity`'s rows
PILOT_FIELDS = {"slope": "slope", "slope_se": "slope_se", "c1_z": "const_z", "c1_estimate": "const_estimate",
                "c1_estimate_mcse": "const_estimate_mcse", "gap_mcse_kmax": "gap_mcse_kmax", "verdict": "verdict",
                "reason": "reason"}


def sensitivity_vars(cell: str, pilot_blocks: str) -> dict:
    """Schema entries (:class:`simkit.runner.Var`) of the k_min-factor table (``kmf_<name>``, dims
    ``(cell, "kmf")``) and the pilot-size table (``pilot_<name>``, dims ``(cell, "pilot")``) that
    :func:`sensitivity_tables` and :func:`put_row` fill; ``pilot_blocks`` says which blocks the pilot
    table re-weights."""
    from simkit.runner.study import Var
    kmf, pil = (cell, "kmf"), (cell, "pilot")
    out = {f"kmf_{n}": Var(kmf, f"k_min-factor sensitivity: {n}", "1", f"rate_verdict field {n!r} at k_min = smallest "
                           "grid k >= kmf * expansion_scale (exploratory)")
           for n in ("slope", "slope_se", "k_min", "c1_z", "c1_estimate", "c1_estimate_mcse", "slope_p_half")}
    out.update({f"pilot_{n}": Var(pil, f"pilot-size sensitivity: {n}", "1", f"rate_verdict field {n!r} with the "
                                  f"coefficients of that pilot applied to the same blocks ({pilot_blocks}; exploratory)")
                for n in ("slope", "slope_se", "c1_z", "c1_estimate", "c1_estimate_mcse")})
    for pre, dims, what in (("kmf", kmf, "k_min-factor"), ("pilot", pil, "pilot-size")):
        out[f"{pre}_verdict"] = Var(dims, f"{what} sensitivity: rate verdict", "1", "rate_verdict (exploratory)")
        out[f"{pre}_reason"] = Var(dims, f"{what} sensitivity: reason", "1", "empty when it passed")
    out["kmf_slope_exact_fit"] = Var(kmf, "k_min-factor sensitivity: slope of the fit to the exact curve", "1",
                                     "deterministic bias of the rate fit at that k_min (NaN without an exact curve)")
    out["kmf_c1_exact_fit"] = Var(kmf, "k_min-factor sensitivity: c1 of the fit to the exact curve, in nats", "1",
                                  "deterministic bias of the constant fit")
    out["pilot_gap_mcse_kmax"] = Var(pil, "pilot-size sensitivity: MCSE of gap at k_max, in nats", "1",
                                     "sd over blocks / sqrt(n_blocks) of the gap at the largest k")
    return out


def sensitivity_tables(n_cell: int, n_kmf: int, n_pilot: int) -> dict:
    """Empty tables for :func:`put_row`: NaN numbers, empty reasons, verdicts "" (k_min factor) and "n/a"
    (pilot size: cells without a pilot-size row keep it)."""
    out = {}
    for pre, fields, m, text in (("kmf", KMF_FIELDS, n_kmf, ""), ("pilot", PILOT_FIELDS, n_pilot, "n/a")):
        for n in fields:
            out[f"{pre}_{n}"] = (np.full((n_cell, m), np.nan) if n not in ("verdict", "reason") else
                                 [[text if n == "verdict" else ""] * m for _ in range(n_cell)])
    return out


def put_row(out: dict, prefix: str, i: int, rows: list[dict], fields: dict | None = None) -> None:
    """Row ``i`` of the table ``<prefix>_<name>``: the field ``fields[name]`` of each of ``rows`` (default
    :data:`KMF_FIELDS` for prefix "kmf", :data:`PILOT_FIELDS` for "pilot")."""
    fields = fields if fields is not None else {"kmf": KMF_FIELDS, "pilot": PILOT_FIELDS}[prefix]
    for name, field in fields.items():
        for j, r in enumerate(rows):
            out[f"{prefix}_{name}"][i][j] = r[field]


def nested_pilot_coefficients(estimator, anchors: int, rng, pilots, n_k: int) -> NDArray[np.float64]:
    """Control-variate coefficients ``(len(pilots), n_k, 4)`` of ``estimator`` (a
    :class:`simkit.estimators.infonce.GapEstimator`) from each pilot size (blocks of ``anchors``; 0: its
    Taylor values). Nested pilots: every calibration starts from a copy of ``rng``'s state, so a larger
    pilot extends a smaller one; ``rng`` itself does not advance. Rows beyond the estimator's grid: NaN."""
    out = np.full((len(pilots), n_k, 4), np.nan)
    m = estimator.grid.size
    for j, p in enumerate(pilots):
        out[j, :m] = estimator.default_coef() if p == 0 else estimator.calibrate(anchors, copy.deepcopy(rng), n_blocks=p)
    return out


def sub_blocks_per_task(name: str, sizes, total: int, n_tasks: int) -> int:
    """The layout of block-size cells: ``total`` anchors per cell over ``n_tasks`` engine tasks, in blocks of
    each of ``sizes`` anchors. A size up to ``total / n_tasks`` divides it (each task runs several
    sub-blocks); a larger size divides ``total`` (the first ``total / size`` tasks run one block); every
    size leaves >= 3 blocks. Returns the sub-blocks a task holds (at least 1); ``ValueError`` naming the
    list parameter ``name`` otherwise."""
    per_task = total // n_tasks
    for b in sizes:
        if (per_task % b) if b <= per_task else (total % b):
            raise ValueError(f"'{name}' must divide sens_total / n_blocks = {per_task} (sizes up to it) or "
                             f"sens_total = {total} (larger sizes), got {b}")
        if total // b < 3:
            raise ValueError(f"'{name}' must leave >= 3 blocks of {b} anchors in sens_total = {total}, got {b}")
    return max([1] + [per_task // b for b in sizes if b <= per_task])


def size_cell_blocks(draw, size: int, total: int, n_tasks: int, task) -> list:
    """One task's blocks of a block-size cell (layout of :func:`sub_blocks_per_task`): ``draw()`` (one block
    of ``size`` anchors) ``total / n_tasks / size`` times, or once if ``task()`` (the task's index, read
    only then) is below ``total / size``, or not at all."""
    per_task = total // n_tasks
    if size <= per_task:
        return [draw() for _ in range(per_task // size)]
    return [draw()] if task() < total // size else []
