"""Pages of ``reports/calibration.pdf`` (``simkit calibrate``): per study, the rejection table (Clopper–Pearson
interval, binomial test, KS p against Uniform(0, 1)) and −log10 QQ plots of every test's p-values, declared;
prose in ``pages/calibration.md``."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import xarray as xr

from simkit.report.document import ReportDocument, provenance_pages, write_report
from simkit.report.spec import FigurePage, Panel, Table, Text, prose, render
from simkit.runner import read_dataset

__all__ = ["calibration_sections", "calibration_report", "calibration_datasets", "PANELS_PER_PAGE"]

PANELS_PER_PAGE = (3, 5)

P = prose("calibration")
REJECTIONS = Table((("check", "facet"), ("kind", "check_kind"), ("nominal rate", "nominal"),
    ("rejected", "rejected"),
    ("empirical rate [95% CI]", "{empirical_rate:.4f} [{empirical_rate_low:.4f}, {empirical_rate_high:.4f}]"),
    ("binomial p", "binom_pvalue:.2g"), ("KS p", "ks_pvalue:.2g")), dim="check", verdict="calibrated")


def _derived(ds: xr.Dataset) -> xr.Dataset:
    """Display fields: the nominal rate, the rejection count, and whether the interval fits the nominal rate."""
    nom, low, high = (ds[v].values.astype(float) for v in ("nominal_rate", "empirical_rate_low", "empirical_rate_high"))
    kind = [str(k) for k in ds["check_kind"].values]
    calibrated = ["n/a" if k not in ("test", "bound-test", "verdict") or not (np.isfinite(n) and np.isfinite(lo))
                  else "fail" if lo > n else "pass" if hi >= n or k == "bound-test" else "error"
                  for k, n, lo, hi in zip(kind, nom, low, high)]
    miss = ds["n_missing"].values.astype(int)
    return ds.assign(
        nominal=("check", [f"{n:.2e}" if np.isfinite(n) else "none (deterministic)" for n in nom]),
        rejected=("check", [f"{int(r)}/{int(v)}" + (f" ({m} missing)" if m else "") for r, v, m in
                            zip(ds["n_reject"].values, ds["n_valid"].values, miss)]),
        calibrated=("check", calibrated))


def _wall_text(ds: xr.Dataset) -> str:
    parts = json.loads(str(ds.attrs.get("combined_from", "[]")))
    if parts:  # simkit calibrate --combine
        each = "; ".join(f"{p['file']}: seeds {p['seeds']}, git {p['git_commit'][:12]}{'-dirty' if p['git_commit'].endswith('-dirty') else ''}, {p['wall_time_s']:.0f} s"
                         for p in parts)
        overlap = str(ds.attrs.get("overlap_seeds", ""))
        return (f"combined from {len(parts)} calibrations of the same design ({each}; wall time of the invocations "
                f"that wrote them)" + (f"; seeds {overlap} ran in more than one, with the same decisions and numbers "
                                       f"agreeing to {float(ds.attrs.get('overlap_max_relative_difference', np.nan)):.1e} "
                                       "relative" if overlap else "") + ".")
    return (f"wall time {float(ds.attrs.get('wall_time_s', np.nan)):.0f} s (of the invocation that wrote the dataset; "
            f"{ds.attrs.get('resumed_tasks', '?')} of its tasks were resumed from an earlier invocation's checkpoint).")


def _error_lines(ds: xr.Dataset, limit: int = 5) -> str:
    """The recorded errors of the seeds whose study run had failed tasks (the first ``limit`` seeds)."""
    if "target_error_message" not in ds:
        return ""
    failed = [(int(s), str(m).replace("$", r"\$")) for s, m in zip(ds["seed"].values, ds["target_error_message"].values)
              if str(m)]  # a "$" would start mathtext
    more = f" ({len(failed) - limit} more seeds in target_error_message)" if len(failed) > limit else ""
    return "".join(f" Seed {s}: {m}." for s, m in failed[:limit]) + more


def calibration_sections(doc: ReportDocument, ds: xr.Dataset) -> None:
    """The section of one calibration dataset: what was run, the rejection table, QQ plots."""
    target, alt = ds.attrs.get("target_study", "?"), str(ds.attrs.get("alternative", ""))
    design = "quick" if json.loads(str(ds.attrs.get("config", "{}"))).get("quick") else "full"
    errs = int(np.nansum(ds["target_errors"].values)) + int(sum(bool(str(e)) for e in ds["cell_error"].values))
    d = _derived(ds).assign_attrs(target_study=target, wall_text=_wall_text(ds), error_text=(
        f" {errs} task(s) failed; see cell_error and target_errors." + _error_lines(ds) if errs else ""),
        alternative_text=(
        f"'power-' rows: the same checks under the alternative '{alt}' ({ds.attrs.get('alternative_description', '')}) "
        "on the same seeds; their empirical rate is the power." if alt else ""))
    heading = f"Calibration of {target}, {design} design ({ds.attrs.get('claim', '?')}): {ds.sizes['seed']} seeds"
    tests = [i for i, k in enumerate(ds["check_kind"].values) if str(k) in ("test", "bound-test")]
    qq = d.isel(check=tests).assign(check_label=("check", [str(c).replace(":", ": ") for c in d["check"].values[tests]]))
    render(doc, d, (Text(P["run"], heading=heading), Text(P["kinds"]), REJECTIONS))
    render(doc, qq, (FigurePage(f"{target}: p-values against Uniform(0, 1), {ds.sizes['seed']} seeds", (
        Panel("statistic", kind="qq", level="nominal_rate", title="{check_label} (KS p {ks_pvalue:.2g})"),),
        caption=P["qq_caption"], facet="check", per_page=PANELS_PER_PAGE),) if tests else ())


def calibration_datasets(directory: str | os.PathLike) -> dict[str, xr.Dataset]:
    """Every calibration dataset (``study`` attribute ``calibrate-*``) in ``directory``, by file stem
    (``rate_k`` for the quick design, ``rate_k_full`` for the full one)."""
    out = {}
    for path in sorted(Path(directory).glob("*.nc")):
        try:
            ds = read_dataset(path)
        except ValueError:
            continue
        if str(ds.attrs.get("study", "")).startswith("calibrate-"):
            out[path.stem] = ds
    return out


def calibration_report(source: str | os.PathLike | dict[str, xr.Dataset], path: str | os.PathLike) -> int:
    """``reports/calibration.pdf``: one section per calibration dataset of ``source`` (a directory or a
    dict of datasets), then the provenance of each. Returns the page count."""
    datasets = calibration_datasets(source) if not isinstance(source, dict) else source

    def build(doc: ReportDocument) -> None:
        doc.heading("simkit calibration: demonstrated false-failure rates", size=16.0)
        studies = ", ".join(f"{k} ({v.sizes['seed']} seeds)" for k, v in datasets.items()) or "none calibrated yet"
        render(doc, xr.Dataset(attrs={"studies": studies}), (Text(P["intro"]),))
        for n, ds in enumerate(datasets.values()):
            if n:  # the first section follows the introduction on its page
                doc.finish_page()
            calibration_sections(doc, ds)
        for ds in datasets.values():
            doc.finish_page()
            provenance_pages(doc, ds, claim_text=f"calibration of {ds.attrs.get('target_study', '?')}")

    return write_report(path, build, footer="simkit · calibration",
                        metadata={"Title": "simkit calibration", "Subject": "false-failure rates over seeds"})
