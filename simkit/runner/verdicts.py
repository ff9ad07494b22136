"""Verdicts, claim-row results and the default summary, assembled one way for every study.

A study lists the *problems* of a rule (one phrase each) and the *task errors* of the cells the rule
reads; :func:`verdict` turns them into ``("error" | "fail" | "pass", reason)``: a failed task makes
the verdict "error" whatever the problems (a rule on missing blocks says nothing), its note first.
A :class:`~simkit.runner.Check` returns :func:`check_result`, whose detail ends ``-> verdict (reason)``;
:func:`cell_detail` joins one such clause per cell. :func:`claim_summary` is the summary a study
prints after a run, unless it writes its own.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import NamedTuple

import numpy as np
import xarray as xr

__all__ = ["Verdict", "verdict", "cell_errors", "outcome", "check_result", "cell_detail", "not_finite",
           "claim_summary", "estimate_table", "dataset_config", "recorded_sha", "scalar", "one_pvalue",
           "TASK_FAILED", "settings_check"]

#: the default note of a verdict whose cells had task errors
TASK_FAILED = "a task failed (see cell_error)"


class Verdict(NamedTuple):
    """A rule's verdict (``"pass"``, ``"fail"`` or ``"error"``) and why it did not pass (empty if it did)."""

    verdict: str
    reason: str


def verdict(problems: Iterable[str], errors: Sequence[str] = (), *, error_note: str = TASK_FAILED) -> Verdict:
    """The verdict of a rule from its problems and the task errors of the cells it reads.

    ``error_note`` is formatted with ``n`` (the number of errors) and ``errors`` (them, joined by
    "; "), e.g. ``"task errors: {errors}"``; it leads the reason of an "error" verdict.
    """
    problems = [str(p) for p in problems if p]
    errors = [str(e) for e in errors if e]
    if errors:
        note = error_note.format(n=len(errors), errors="; ".join(errors))
        return Verdict("error", "; ".join([note, *problems]))
    return Verdict("fail" if problems else "pass", "; ".join(problems))


def cell_errors(ds: xr.Dataset, index: Iterable[int] | None = None, labels: Sequence | None = None) -> list[str]:
    """The non-empty ``cell_error`` strings of the cells ``index`` (all if None), prefixed ``"label: "``
    when ``labels`` (one per cell of the dataset) are given. A dataset without ``cell_error``: none."""
    if "cell_error" not in ds:
        return []
    err = np.asarray(ds["cell_error"].values).ravel()
    idx = range(err.size) if index is None else index
    return [(f"{labels[i]}: " if labels is not None else "") + str(err[i]) for i in idx if str(err[i])]


def not_finite(values, problem: str) -> list[str]:
    """``[problem]`` if any of ``values`` is NaN or infinite (or there are none), else ``[]``."""
    a = np.asarray(values, dtype=float)
    return [problem] if a.size == 0 or not np.all(np.isfinite(a)) else []


def outcome(verdict: str, reason: str = "") -> str:
    """The end of a check's detail: ``" -> verdict"``, and ``" (reason)"`` when there is one."""
    return f" -> {verdict}" + (f" ({reason})" if reason else "")


def check_result(estimate, estimate_mcse, verdict: str, detail: str, reason: str = "") -> dict:
    """What a :class:`~simkit.runner.Check`'s ``evaluate`` returns; the detail ends with :func:`outcome`."""
    return {"estimate": estimate, "estimate_mcse": estimate_mcse, "verdict": str(verdict),
            "detail": detail + outcome(str(verdict), str(reason))}


def cell_detail(labels: Sequence, texts: Sequence[str], verdicts: Sequence, reasons: Sequence | None = None) -> str:
    """``"label: text -> verdict (reason); ..."``, one clause per cell."""
    reasons = [""] * len(labels) if reasons is None else reasons
    return "; ".join(f"{lab}: {t}{outcome(str(v), str(r))}" for lab, t, v, r in zip(labels, texts, verdicts, reasons))


def claim_summary(rows: Iterable[dict]) -> str:
    """One line per claim row: ``claim: verdict -- detail`` (the default ``Study.summary_text``)."""
    return "\n".join(f"{r['claim']}: {r['verdict']} -- {r['detail']}" for r in rows)


def estimate_table(ds: xr.Dataset, dim: str, columns: dict[str, str], *, select: dict | None = None,
                   fmt: str = ".4g") -> str:
    """A text table with one row per value of ``dim`` and a column per variable: ``value ± MCSE`` where
    ``<name>_mcse`` (or ``<name>_se``) exists, the value alone otherwise (text as it is). ``columns``
    maps a variable to its heading; ``select`` picks one index of other dimensions (e.g. ``{"k": -1}``)."""
    head = [dim, *columns.values()]
    rows = []
    for i, label in enumerate(np.asarray(ds[dim].values).ravel()):
        def pick(name):
            v = ds[name]
            return v.isel({dim: i, **{d: j for d, j in (select or {}).items() if d in v.dims}}).values.item()
        row = [str(label)]
        for name in columns:
            value = pick(name)
            if isinstance(value, str):
                row.append(value)
                continue
            text = format(float(value), fmt)
            err = next((e for e in (f"{name}_mcse", f"{name}_se") if e in ds), None)
            row.append(text + (" ± " + format(float(pick(err)), ".2g") if err else ""))
        rows.append(row)
    widths = [max(len(r[j]) for r in [head, *rows]) for j in range(len(head))]
    return "\n".join("  ".join(c.rjust(w) if j else c.ljust(w) for j, (c, w) in enumerate(zip(r, widths)))
                     for r in [head, *rows])


def dataset_config(ds: xr.Dataset) -> dict:
    """The run configuration recorded in a dataset's ``config`` attribute (empty if absent or unreadable)."""
    try:
        cfg = json.loads(ds.attrs.get("config", "{}"))
    except (TypeError, ValueError):
        return {}
    return cfg if isinstance(cfg, dict) else {}


def recorded_sha(ds: xr.Dataset, digits: int | None = 16) -> str:
    """The protocol hash a dataset records (``protocol_sha256``; its first ``digits`` hex digits, all with
    None), or "?" if it records none: for a check's statistic line."""
    return str(ds.attrs.get("protocol_sha256", "?"))[:digits]


def scalar(ds: xr.Dataset, name: str):
    """The value of a 0-d variable ``name`` of ``ds``, NaN if the dataset lacks it (a design without that part)."""
    return ds[name].values.item() if name in ds.variables else float("nan")


def one_pvalue(name: str, alpha: float, reference: str = "exact"):
    """``Check.pvalues`` of a check that is one test (for ``simkit calibrate``): the 0-d p-value ``name``
    (e.g. ``"n_slope_p"``, reported as ``"slope"``) at level ``alpha``; ``reference`` "bound" marks a
    one-sided test of a bound (its p-value uniform only at the boundary)."""
    return lambda ds: {name.split("_")[1]: (float(scalar(ds, name)), alpha, reference)}


def settings_check(ds: xr.Dataset, rows, est: str, worst: int, verdict: str, text, reason: str | None = None, *,
                   empty: str = "error", cell: str = "setting") -> dict:
    """A check over the cells ``rows`` of dimension ``cell``: the estimate ``est`` (and its ``_mcse`` or
    ``_se``) of cell ``worst``, the verdicts of variable ``verdict`` combined
    (:func:`simkit.stats.analysis.combine_verdicts`) and one clause per cell, ``text(i) -> verdict
    (reason)``; no rows: verdict ``empty``."""
    from simkit.stats.analysis import combine_verdicts
    if len(rows) == 0:
        return {"estimate": float("nan"), "estimate_mcse": float("nan"), "verdict": empty,
                "detail": "no such setting here"}
    v = [str(ds[verdict].values[i]) for i in rows]
    why = [str(ds[reason].values[i]) for i in rows] if reason else None
    err = f"{est}_mcse" if f"{est}_mcse" in ds else f"{est}_se"
    return {"estimate": ds[est].values[worst], "estimate_mcse": ds[err].values[worst], "verdict": combine_verdicts(v),
            "detail": cell_detail(ds[cell].values[rows], [text(i) for i in rows], v, why)}
