"""Pages of ``reports/calibration.pdf`` (``simkit calibrate``): per study, the rejection table (Clopper–Pearson
interval, binomial test, KS p against Uniform(0, 1)) and −log10 QQ plots of every test's p-values."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import xarray as xr
from scipy import stats

from simkit.report.document import COLORS, ReportDocument, _legend, _line, _marker, provenance_pages, write_report
from simkit.report.spec import Table, Text, panel_title, render
from simkit.runner import read_dataset

__all__ = ["calibration_sections", "calibration_report", "calibration_datasets", "PANELS_PER_PAGE"]

PANELS_PER_PAGE = (3, 5)

KINDS_TEXT = (
    "Rows: 'test' = a component test of a check (Check.pvalues), rejecting at p < alpha (the nominal rate); its "
    "p-value is Uniform(0, 1) when the claim holds. 'bound-test' = a component test of a one-sided bound: its p-value "
    "is uniform only at the boundary and larger inside it, so only an excess of rejections or of small p-values "
    "refutes it (points below the QQ band are expected). 'verdict' = the check's verdict, rejecting when it is "
    "'fail'; its nominal rate is the stated false-failure rate (none for a deterministic check). The empirical rate "
    "is the share of seeds that rejected, with its Clopper–Pearson 95% interval; 'verdict' is PASS when the interval "
    "contains the nominal rate (or lies below it, for a bound-test), FAIL when it lies above it, ERROR when below "
    "it. 'binomial p' is the exact test of empirical = nominal (one-sided for a bound-test), 'KS p' the "
    "Kolmogorov–Smirnov test of the p-values against Uniform(0, 1).")

REJECTIONS = Table((
    ("check", "{facet}"), ("kind", "{check_kind}"), ("nominal rate", "{nominal}"), ("rejected", "{rejected}"),
    ("empirical rate [95% CI]", "{empirical_rate:.4f} [{empirical_rate_low:.4f}, {empirical_rate_high:.4f}]"),
    ("binomial p", "{binom_pvalue:.2g}"), ("KS p", "{ks_pvalue:.2g}")), dim="check", verdict="calibrated",
    widths=(2.6, 1.0, 1.2, 1.0, 2.2, 0.8, 0.8, 0.6))


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


def _qq(ax, p: np.ndarray, alpha: float, title: str) -> None:
    p = np.sort(p[np.isfinite(p)])
    n = p.size
    panel_title(ax, title)
    if n == 0:
        ax.text(0.5, 0.5, "no p-values", transform=ax.transAxes, ha="center")
        return
    i = np.arange(1, n + 1)
    expected = -np.log10(i / (n + 1))
    lo, hi = stats.beta.ppf(0.975, i, n + 1 - i), stats.beta.ppf(0.025, i, n + 1 - i)
    ax.fill_between(expected, -np.log10(lo), -np.log10(hi), color=COLORS["span"], lw=0)
    # p = 0 (underflow) is drawn at the top of the axes rather than dropped
    obs = -np.log10(np.maximum(p, np.finfo(float).tiny))
    right = max(float(expected.max()), -np.log10(alpha)) * 1.15
    # observed values far beyond the uniform range (a test under an alternative) are drawn at the top
    top = max(right, min(float(obs.max()) * 1.05, 3 * right))
    ax.plot([0, right], [0, right], color=COLORS["ref"], lw=0.8)
    ax.axhline(-np.log10(alpha), color=COLORS["fit"], lw=0.8, ls="--")
    ax.plot(expected, np.minimum(obs, top), "o", ms=2.5, color=COLORS["data"])
    ax.set_xlim(0, right)
    ax.set_ylim(0, top)
    ax.set_xlabel("expected −log10 p (uniform)")
    ax.set_ylabel("observed −log10 p")


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


def calibration_sections(doc: ReportDocument, ds: xr.Dataset) -> None:
    """The section of one calibration dataset: what was run, the rejection table, QQ plots."""
    target = ds.attrs.get("target_study", "?")
    n = ds.sizes["seed"]
    design = "quick" if json.loads(str(ds.attrs.get("config", "{}"))).get("quick") else "full"
    alt = str(ds.attrs.get("alternative", ""))
    errs = int(np.nansum(ds["target_errors"].values)) + int(sum(bool(str(e)) for e in ds["cell_error"].values))
    intro = (f"Command: {ds.attrs.get('command', '?')}. Seeds {ds.attrs.get('seeds', '?')}; each seed is one complete, "
             f"independent run of {target} (as 'simkit run {target} --seed S', configuration "
             f"{ds.attrs.get('target_config', '?')}). Created {ds.attrs.get('created', '?')}, git "
             f"{ds.attrs.get('git_commit', '?')}, " + _wall_text(ds)
             + (f" 'power-' rows: the same checks under the alternative '{alt}' "
                f"({ds.attrs.get('alternative_description', '')}) on the same seeds; their empirical rate is the power."
                if alt else "") + (f" {errs} task(s) failed; see cell_error and target_errors." if errs else ""))
    render(doc, _derived(ds), (Text(intro, heading=f"Calibration of {target}, {design} design ({ds.attrs.get('claim', '?')}): "
                                            f"{n} seeds"), Text(KINDS_TEXT), REJECTIONS))
    tests = [i for i, k in enumerate(ds["check_kind"].values) if str(k) in ("test", "bound-test")]
    per = PANELS_PER_PAGE[0] * PANELS_PER_PAGE[1]
    for start in range(0, len(tests), per):
        chunk = tests[start:start + per]
        nc = min(PANELS_PER_PAGE[1], max(len(chunk), 3))
        nr = -(-len(chunk) // nc)
        fig, axes, ly = doc.figure(
            f"{target}: p-values against Uniform(0, 1), {n} seeds"
            + (f" ({start // per + 1}/{-(-len(tests) // per)})" if len(tests) > per else ""), nr, nc,
            caption="QQ plot on the −log10 scale: the i-th smallest p-value of n against the uniform quantile "
                    "i/(n+1); grey band: pointwise 95% band of a uniform sample (Beta(i, n+1−i)); dashed: the "
                    "rejection threshold alpha. Points above the band in the upper right mean too many small "
                    "p-values (a test that rejects too often).")
        for ax, i in zip(axes.ravel(), chunk):
            alpha = float(ds["nominal_rate"].values[i])
            _qq(ax, ds["statistic"].values[:, i], alpha if np.isfinite(alpha) else 0.05,
                f"{str(ds['check'].values[i]).replace(':', ': ')} (KS p {float(ds['ks_pvalue'].values[i]):.2g})")
        for ax in axes.ravel()[len(chunk):]:
            ax.set_visible(False)
        _legend(fig, ly, [_marker(COLORS["data"], label="p-values"), _line(COLORS["ref"], label="uniform"),
                          _line(COLORS["fit"], "--", label="alpha")])
        doc.save(fig)


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
        doc.text("Every claim check states a false-failure rate; here each is demonstrated by running the study at "
                 "many independent seeds. Studies: " + (", ".join(
                     f"{k} ({v.sizes['seed']} seeds)" for k, v in datasets.items()) or "none calibrated yet") + ".")
        for n, ds in enumerate(datasets.values()):
            if n:  # the first section follows the introduction on its page
                doc.finish_page()
            calibration_sections(doc, ds)
        for ds in datasets.values():
            doc.finish_page()
            provenance_pages(doc, ds, claim_text=f"calibration of {ds.attrs.get('target_study', '?')}")

    return write_report(path, build, footer="simkit · calibration",
                        metadata={"Title": "simkit calibration", "Subject": "false-failure rates over seeds"})
