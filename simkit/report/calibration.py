"""Pages of ``reports/calibration.pdf``: one section per calibrated study (``simkit calibrate``).

Each section has the rejection table (empirical rate with its Clopper--Pearson 95% interval beside
the nominal rate, the exact binomial test of the two, and the Kolmogorov--Smirnov p-value against
Uniform(0, 1)) and QQ plots of every component test's p-values against Uniform(0, 1), on the
-log10 scale where the rejection region (p < alpha, alpha ~ 1e-3) is visible, with a pointwise
95% band: the i-th smallest of n uniform p-values is Beta(i, n + 1 - i). Read from the datasets
alone (simkit.claims.calibrate writes them).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import xarray as xr
from scipy import stats

from simkit.report.document import COLORS, ReportDocument, _legend, _line, _marker, provenance_pages, write_report
from simkit.runner import read_dataset

__all__ = ["calibration_sections", "calibration_report", "calibration_datasets", "PANELS_PER_PAGE"]

PANELS_PER_PAGE = (3, 5)


def _rate(x: float, digits: int = 4) -> str:
    return f"{x:.{digits}f}" if np.isfinite(x) else "—"


def _p(x: float) -> str:
    return "—" if not np.isfinite(x) else (f"{x:.3f}" if x >= 1e-3 else f"{x:.1e}")


def rejection_rows(ds: xr.Dataset) -> tuple[list[list[str]], dict[tuple[int, int], str]]:
    """Table rows (check, kind, nominal, rejected, empirical [95% CI], binomial p, KS p) and cell colours:
    red where the interval lies above the nominal rate of a test or verdict row, green where it contains it."""
    rows, colors = [], {}
    for i, name in enumerate(ds["check"].values):
        nom = float(ds["nominal_rate"].values[i])
        low, high = float(ds["empirical_rate_low"].values[i]), float(ds["empirical_rate_high"].values[i])
        kind = str(ds["check_kind"].values[i])
        n, r = int(ds["n_valid"].values[i]), int(ds["n_reject"].values[i])
        miss = int(ds["n_missing"].values[i])
        rows.append([str(name), kind, f"{nom:.2e}" if np.isfinite(nom) else "none (deterministic)",
                     f"{r}/{n}" + (f" ({miss} missing)" if miss else ""),
                     f"{_rate(float(ds['empirical_rate'].values[i]))} [{_rate(low)}, {_rate(high)}]",
                     _p(float(ds["binom_pvalue"].values[i])), _p(float(ds["ks_pvalue"].values[i]))])
        if kind in ("test", "bound-test", "verdict") and np.isfinite(nom) and np.isfinite(low):
            colors[(i, 4)] = COLORS["fail"] if low > nom else COLORS["pass"] if high >= nom or kind == "bound-test" \
                else COLORS["error"]
    return rows, colors


def _qq(ax, p: np.ndarray, alpha: float, title: str) -> None:
    p = np.sort(p[np.isfinite(p)])
    n = p.size
    ax.set_title(title, fontsize=8)
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
    doc.heading(f"Calibration of {target}, {design} design ({ds.attrs.get('claim', '?')}): {n} seeds")
    doc.text(f"Command: {ds.attrs.get('command', '?')}. Seeds {ds.attrs.get('seeds', '?')}; each seed is one "
             f"complete, independent run of {target} (identical to 'simkit run {target} --seed S' with the same "
             f"design; configuration {ds.attrs.get('target_config', '?')}). Created {ds.attrs.get('created', '?')}, "
             f"git {ds.attrs.get('git_commit', '?')}, " + _wall_text(ds))
    doc.text("Rows: 'test' = a component test of a check (Check.pvalues), rejecting at p < alpha (the nominal "
             "rate); its p-value is Uniform(0, 1) when the claim holds. 'bound-test' = a component test of a "
             "one-sided bound (e.g. H0 slope <= -1/2 where the true slope may be steeper): its p-value is uniform "
             "only at the boundary and larger inside it, so only an excess of rejections or of small p-values "
             "refutes it (points below the QQ band are expected). 'verdict' = the check's verdict, rejecting when "
             "it is 'fail'; its nominal rate is the stated false-failure rate (none for a deterministic check). "
             "The empirical rate is the share of seeds that rejected, with its Clopper–Pearson 95% interval "
             "(green: contains the nominal rate, or lies below it for a bound-test; red: above it; amber: below "
             "it); 'binomial p' is the exact test of empirical = nominal (one-sided, empirical > nominal, for a "
             "bound-test), 'KS p' the Kolmogorov–Smirnov test of the p-values against Uniform(0, 1) (one-sided "
             "for a bound-test: H0 P(p <= u) <= u).")
    if str(ds.attrs.get("alternative", "")):
        doc.text(f"'power-' rows: the same checks under the alternative '{ds.attrs['alternative']}' "
                 f"({ds.attrs.get('alternative_description', '')}) on the same seeds; their empirical rate is the "
                 "power (the share of seeds that reject the alternative).")
    errs = int(np.nansum(ds["target_errors"].values)) + int(sum(bool(str(e)) for e in ds["cell_error"].values))
    if errs:
        doc.text(f"{errs} task(s) failed; see the dataset's cell_error and target_errors.", color="#a00000")
    rows, colors = rejection_rows(ds)
    doc.table(["check", "kind", "nominal rate", "rejected", "empirical rate [95% CI]", "binomial p", "KS p"],
              rows, [2.6, 1.0, 1.2, 1.0, 2.2, 0.8, 0.8], colors=colors)
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
                f"{ds['check'].values[i]}  (KS p {_p(float(ds['ks_pvalue'].values[i]))})")
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
        for ds in datasets.values():
            doc.finish_page()
            calibration_sections(doc, ds)
        for ds in datasets.values():
            doc.finish_page()
            provenance_pages(doc, ds, claim_text=f"calibration of {ds.attrs.get('target_study', '?')}")

    return write_report(path, build, footer="simkit · calibration",
                        metadata={"Title": "simkit calibration", "Subject": "false-failure rates over seeds"})
