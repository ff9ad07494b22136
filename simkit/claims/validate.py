"""``simkit validate``: every study's quick (or full) design, and one table of claims C1--C7.

Each registered study contributes *checks* through ``Study.claim_rows(ds)``: the claim it tests,
the statistic, its estimate and Monte Carlo standard error, the check's false-failure rate and a
verdict. The validation dataset has one row per claim (dimension ``claim``, C1..C7) combining its
checks -- "pass" only if every check passes, "fail" if any fails, "error" if a task failed, and
"not yet studied" where no study exists -- and every check in full (dimension ``check``).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
from pathlib import Path

import numpy as np
import xarray as xr

from simkit.stats.analysis import combine_verdicts
from simkit.runner import canonical, get_study, resolve_config, run_study, study_names, write_dataset
from simkit.runner.provenance import git_commit, platform_text, versions

__all__ = ["CLAIMS", "NOT_STUDIED", "run_validation", "combine_checks", "validation_report", "empirical_text"]

#: the claims of docs/theory.md section 3, in words
CLAIMS = {
    "C1": "finite-k bias R_k - log k - CE = O(1/k), with constant c1",
    "C2": "R_k - E CE(M_k, Q_k) = O(1/k): InfoNCE learns empirical similarity search",
    "C3": "generalisation gap O(n^-1/2); complexity term stabilises as k grows",
    "C4": "loss differences controlled by averages over negatives, not the max",
    "C5": "higher tau keeps Q close to pi (KL <= 2/tau); small tau inflates the bias constant and the gap",
    "C6": "no explicit dependence on the embedding dimension d",
    "C7": "C1-C3 hold for non-reversible, asymmetric positive kernels",
}
NOT_STUDIED = "not yet studied"


def _row_groups(checks: list[dict]) -> list[tuple[str, str, list[dict]]]:
    """``(label, analysis, rows)`` per claim: the exploratory row (label ``C6``; also for a claim
    without checks) and, apart from it, a confirmatory row per protocol (label ``C6 confirmatory``)."""
    groups = []
    for c in CLAIMS:
        rows = [r for r in checks if r["claim"] == c]
        is_conf = [str(r.get("analysis", "exploratory")).startswith("confirmatory") for r in rows]
        expl = [r for r, c_ in zip(rows, is_conf) if not c_]
        conf: dict[str, list[dict]] = {}
        for r, c_ in zip(rows, is_conf):
            if c_:
                conf.setdefault(str(r["analysis"]), []).append(r)
        if expl or not conf:
            groups.append((c, "exploratory", expl))
        for n, (analysis, rs) in enumerate(conf.items()):
            groups.append((f"{c} confirmatory" + (f" {n + 1}" if n else ""), analysis, rs))
    return groups


def combine_checks(checks: list[dict]) -> xr.Dataset:
    """The per-claim table (dimension ``claim``: confirmatory rows apart from exploratory ones) and
    every check (dimension ``check``)."""
    groups = _row_groups(checks)
    claims = [g[0] for g in groups]
    analysis = [g[1] for g in groups]
    verdict, statistic, est, mcse, ffr, studies, detail = [], [], [], [], [], [], []
    emp = {k: [] for k in ("", "_low", "_high")}
    for _, _, rows in groups:
        # demonstrated rate of the row: seeds of one study's calibration on which any of the row's rated checks
        # failed, only where every rated check was calibrated on the design that ran
        rated = [r for r in rows if np.isfinite(float(r["false_fail_rate"]))]
        rej = [r.get("calibration_rejects") for r in rated]
        rate = (np.nan, np.nan, np.nan)
        if (rated and len({r["study"] for r in rated}) == 1 and all(x is not None for x in rej)
                and not any(r.get("calibration_other_design") for r in rated)):
            from simkit.claims.calibrate import union_rejection_rate
            r_, low, high, n = union_rejection_rate(np.stack(rej, axis=1))
            if n:
                rate = (r_, low, high)
        for key, v in zip(emp, rate):
            emp[key].append(float(v))
        if not rows:
            verdict.append(NOT_STUDIED)
            statistic.append("")
            est.append(np.nan)
            mcse.append(np.nan)
            ffr.append(np.nan)
            studies.append("")
            detail.append("no study of this claim exists yet")
            continue
        verdict.append(combine_verdicts([r["verdict"] for r in rows]))
        statistic.append("; ".join(r["statistic"] for r in rows))
        est.append(float(rows[0]["estimate"]))
        mcse.append(float(rows[0]["estimate_mcse"]))
        rates = [float(r["false_fail_rate"]) for r in rows if np.isfinite(float(r["false_fail_rate"]))]
        # deterministic checks (no rate) add nothing; NaN only when every check is deterministic
        ffr.append(float(1.0 - np.prod([1.0 - f for f in rates])) if rates else np.nan)
        studies.append(", ".join(sorted({r["study"] for r in rows})))
        detail.append("; ".join(r.get("detail", "") for r in rows if r.get("detail")))

    def a(long_name, units, description):
        return {"long_name": long_name, "units": units, "description": description}

    ds = xr.Dataset(
        {
            "verdict": (("claim",), np.array(verdict, dtype=str)),
            "statistic": (("claim",), np.array(statistic, dtype=str)),
            "estimate": (("claim",), np.array(est, dtype=float)),
            "estimate_mcse": (("claim",), np.array(mcse, dtype=float)),
            "false_fail_rate": (("claim",), np.array(ffr, dtype=float)),
            "studies": (("claim",), np.array(studies, dtype=str)),
            "detail": (("claim",), np.array(detail, dtype=str)),
            "claim_text": (("claim",), np.array([CLAIMS[c.split()[0]] for c in claims], dtype=str)),
            "analysis": (("claim",), np.array(analysis, dtype=str)),
            "check_analysis": (("check",), np.array([str(r.get("analysis", "exploratory")) for r in checks],
                                                    dtype=str)),
            "check_claim": (("check",), np.array([r["claim"] for r in checks], dtype=str)),
            "check_study": (("check",), np.array([r["study"] for r in checks], dtype=str)),
            "check_statistic": (("check",), np.array([r["statistic"] for r in checks], dtype=str)),
            "check_estimate": (("check",), np.array([float(r["estimate"]) for r in checks], dtype=float)),
            "check_estimate_mcse": (("check",), np.array([float(r["estimate_mcse"]) for r in checks], dtype=float)),
            "check_false_fail_rate": (("check",), np.array([float(r["false_fail_rate"]) for r in checks], dtype=float)),
            "check_verdict": (("check",), np.array([r["verdict"] for r in checks], dtype=str)),
            "check_detail": (("check",), np.array([r.get("detail", "") for r in checks], dtype=str)),
            "check_calibration_other_design": (("check",), np.array(
                [str(r.get("calibration_other_design", "")) for r in checks], dtype=str)),
            "check_calibration_stated_rate": (("check",), np.array(
                [float(r.get("calibration_stated", np.nan)) for r in checks], dtype=float)),
            **{f"empirical_false_fail{k}": (("claim",), np.array(v, dtype=float)) for k, v in emp.items()},
            **{f"check_empirical_false_fail{k}": (("check",), np.array(
                [float(r.get(f"empirical_false_fail{k}", np.nan)) for r in checks], dtype=float)) for k in emp},
        },
        coords={"claim": np.array(claims, dtype=str), "check": np.arange(len(checks))},
    )
    attrs = {
        "verdict": a("verdict", "1", f"pass, fail, error (a task failed) or '{NOT_STUDIED}'"),
        "statistic": a("statistic tested", "1", "the checks' statistics, joined"),
        "estimate": a("estimate of the first check's statistic", "1", "see check_estimate for every check"),
        "estimate_mcse": a("Monte Carlo standard error of estimate", "1", "jackknife or sd/sqrt(n) over blocks"),
        "false_fail_rate": a("false-failure rate", "1", "probability that the claim's checks fail when it holds: "
                             "1 - prod(1 - rate of each check)"),
        "studies": a("studies", "1", "studies contributing checks"),
        "detail": a("detail", "1", "what each check found"),
        "claim_text": a("claim", "1", "docs/theory.md section 3"),
        "analysis": a("analysis of the row", "1", "'confirmatory (<protocol>, sha256 <prefix>)': the checks apply "
                      "a rule pre-registered in protocols/ to a full-design run of it; 'exploratory' otherwise "
                      "(simkit.claims.protocol)"),
        "check_analysis": a("analysis of the check", "1", "as analysis"),
        "check_claim": a("claim of the check", "1", "C1..C7"),
        "check_study": a("study of the check", "1", "registered study name"),
        "check_statistic": a("statistic of the check", "1", ""),
        "check_estimate": a("estimate", "1", "units depend on the statistic"),
        "check_estimate_mcse": a("MCSE of the estimate", "1", ""),
        "check_false_fail_rate": a("false-failure rate of the check", "1", ""),
        "check_verdict": a("verdict of the check", "1", "pass, fail or error"),
        "check_detail": a("detail of the check", "1", ""),
        "check_calibration_other_design": a("design of the calibration, where another", "1",
                                            "'quick' where the run is a full design calibrated only on its quick "
                                            "design (then the empirical rate is that design's, beside its own "
                                            "stated rate check_calibration_stated_rate); empty otherwise"),
        "check_calibration_stated_rate": a("stated false-failure rate at the calibrated design", "1",
                                           "nominal rate of the check's verdict row in the calibration dataset; "
                                           "NaN for a deterministic or uncalibrated check"),
        "claim": a("claim", "1", "docs/theory.md section 3; 'C6 confirmatory' rows are kept apart from the "
                   "exploratory rows of the same claim"),
        "check": a("check index", "1", "one row per study check"),
        **{f"{pre}empirical_false_fail{k}": a(f"empirical false-failure rate{lim}", "1", f"share of seeds of "
                                               f"'simkit calibrate' (data/calibration/<study>.nc) on which the {what} "
                                               f"failed{'' if not k else ', Clopper-Pearson 95%'}; NaN where not "
                                               f"calibrated{note}")
           for pre, what, note in (("", "row's rated checks (any of them)", ", where the row's rated checks span "
                                    "several studies, or where a rated check was calibrated only on another design"),
                                   ("check_", "check", ""))
           for k, lim in (("", ""), ("_low", ", 95% lower limit"), ("_high", ", 95% upper limit"))},
    }
    for name, at in attrs.items():
        ds[name].attrs = at
    return ds


def check_from_data(from_data: str | os.PathLike, names: list[str]) -> None:
    """ValueError naming ``--from-data`` unless ``<from_data>/<study>.nc`` exists for every study of ``names``."""
    missing = [str(Path(from_data) / f"{n}.nc") for n in names if not (Path(from_data) / f"{n}.nc").is_file()]
    if missing:
        raise ValueError(f"'--from-data' must hold a dataset of every study (<study>.nc); missing: "
                         f"{', '.join(missing)}")


def run_validation(*, full: bool = False, seed: int | None = None, out: str | os.PathLike = "data/validation.nc",
                   report: str | os.PathLike | None = "reports/validation.pdf", scheduler=None,
                   progress: bool = True, studies: list[str] | None = None,
                   calibration: str | os.PathLike = "data/calibration",
                   from_data: str | os.PathLike | None = None) -> xr.Dataset:
    """Run every registered study (quick designs unless ``full``) and write the validation dataset/report.

    Each study's dataset goes to ``<out stem>/<study>.nc`` beside ``out`` (resumable like any run).
    With ``from_data`` (a directory), nothing runs: the claim rows are computed from the datasets
    ``<from_data>/<study>.nc`` already there (e.g. the committed default runs in ``data/``, whose
    pre-registered rows are confirmatory); a missing file raises ValueError naming it.
    Where ``<calibration>/<study>.nc`` exists (``simkit calibrate``), each check's empirical
    false-failure rate is shown beside its stated one.
    """
    from simkit.claims.calibrate import calibration_rates
    from simkit.runner import read_dataset
    out = Path(out)
    names = study_names() if studies is None else studies
    configs = {}
    for name in names:  # validate every configuration before running anything
        study = get_study(name)
        configs[name] = (study, resolve_config(study, quick=not full, seed=seed))
    if from_data is not None:
        check_from_data(from_data, names)
    work = out.parent / out.stem
    checks: list[dict] = []
    sources: dict[str, str] = {}
    datasets: dict[str, xr.Dataset] = {}
    t0 = _dt.datetime.now(_dt.timezone.utc)
    for name, (study, cfg) in configs.items():
        if from_data is not None:
            datasets[name] = read_dataset(Path(from_data) / f"{name}.nc")
            configs[name] = (study, json.loads(str(datasets[name].attrs.get("config", "{}"))))
        else:
            res = run_study(study, cfg, work / f"{name}.nc", executor=scheduler, progress=progress)
            if not res.completed:
                raise KeyboardInterrupt
            datasets[name] = res.dataset
        res_ds = datasets[name]
        # the calibration of the design that ran: full for --full and for default runs (--from-data), else
        # quick; a full design with only a quick calibration shows that one, and the dataset's attribute
        # calibration_datasets names the file each study's rates came from
        ran_full = not bool(configs[name][1].get("quick", not full))
        cal = calibration_rates(name, calibration, full=ran_full)
        sources[name] = cal.get("source", "")
        for j, row in enumerate(study.claim_rows(res_ds)):
            c = cal.get(j, {})
            checks.append({"study": name, **row,
                           **{f"empirical_false_fail{k}": c.get(v, np.nan)
                              for k, v in (("", "rate"), ("_low", "low"), ("_high", "high"))},
                           # the calibrated design and its stated rate, where it is not the design that ran
                           "calibration_other_design": cal.get("design", "") if c and cal.get("design") != (
                               "full" if ran_full else "quick") else "",
                           "calibration_stated": c.get("stated", np.nan),
                           "calibration_rejects": c.get("rejects")})
    ds = combine_checks(checks)
    created = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    vers, commit = versions(), git_commit()
    ds.attrs.update({
        "Conventions": "CF-1.11",
        "title": "simkit validation: claims C1-C7",
        "history": f"{created} simkit validate{' --full' if full else ''}"
                   f"{f' --from-data {from_data}' if from_data is not None else ''} (simkit {vers['simkit']}, git {commit})",
        "source": f"simkit {vers['simkit']} claim checks of the studies {', '.join(names)}",
        "references": "N. Whiteley (2026), Similarity search generalisation in contrastive learning with InfoNCE "
                      "loss; simkit docs/theory.md",
        "study": "validation",
        "claim": "C1-C7",
        "design": (f"the datasets in {from_data}" if from_data is not None else "full" if full else "quick"),
        "studies_run": ", ".join(names),
        "study_datasets": canonical({n: str((Path(from_data) if from_data is not None else work) / f"{n}.nc")
                                     for n in names}),
        "calibration_datasets": canonical({n: v for n, v in sources.items() if v}),
        "simkit_version": vers["simkit"],
        "git_commit": commit,
        "seed": -1 if seed is None else int(seed),
        "package_versions": canonical(vers),
        "platform": platform_text(),
        "created": created,
        "wall_time_s": round((_dt.datetime.now(_dt.timezone.utc) - t0).total_seconds(), 3),
        "config": canonical({n: c for n, (_, c) in configs.items()}),
    })
    write_dataset(ds, out)
    if report is not None:
        validation_report(ds, datasets, report)
    return ds


def validation_report(ds: xr.Dataset, datasets: dict[str, xr.Dataset], path: str | os.PathLike) -> int:
    """First page: the claim table; then one section per study (its own report pages)."""
    from simkit.report import ReportDocument, format_pm, provenance_pages, write_report

    def build(doc: ReportDocument) -> None:
        doc.heading("simkit validation: claims C1–C7 of Whiteley (2026)")
        doc.text(f"Design: {ds.attrs.get('design', '?')}; studies run: {ds.attrs.get('studies_run', '')}; "
                 f"created {ds.attrs.get('created', '?')}; git {ds.attrs.get('git_commit', '?')}.")
        doc.text("Each claim's verdict combines its studies' checks: pass only if every check passes. The "
                 "false-failure rate is the probability that the checks fail although the claim holds. "
                 f"'{NOT_STUDIED}' marks claims without a study; it is never a pass.")
        rows = []
        for i, c in enumerate(ds["claim"].values):
            e, m = float(ds["estimate"].values[i]), float(ds["estimate_mcse"].values[i])
            f = float(ds["false_fail_rate"].values[i])
            an = str(ds["analysis"].values[i]) if "analysis" in ds else "exploratory"
            rows.append([str(c) + ("\n" + an.split(" (")[1].rstrip(")") if an.startswith("confirmatory") else ""),
                         str(ds["claim_text"].values[i]), str(ds["statistic"].values[i]) or "—",
                         format_pm(e, m) if np.isfinite(e) else "—", f"{f:.1e}" if np.isfinite(f) else "—",
                         empirical_text(ds, i), str(ds["verdict"].values[i])])
        doc.table(["claim", "statement", "statistic tested", "estimate ± MCSE", "false-fail rate",
                   "empirical false-fail (95% CI)", "verdict"], rows, [0.5, 2.4, 2.9, 1.4, 0.8, 1.1, 0.9])
        details = [[str(c), str(d)] for c, d in zip(ds["claim"].values, ds["detail"].values) if str(d)]
        if details:
            doc.heading("Details")
            doc.table(["claim", "what the checks found"], details, [0.5, 9.2])
        for name, sds in datasets.items():
            doc.finish_page()  # the study's own pages start on a fresh page
            study = get_study(name)
            study.report_sections(doc, sds)
        doc.finish_page()
        provenance_pages(doc, ds, claim_text="claims C1-C7")

    return write_report(path, build, footer=f"simkit · validation · {ds.attrs.get('created', '?')}",
                        metadata={"Title": "simkit validation", "Subject": "claims C1-C7"})


def empirical_text(ds: xr.Dataset, i: int, prefix: str = "") -> str:
    """'rate [low, high]' of row ``i`` (claim, or check with ``prefix='check_'``), '—' if not calibrated;
    for a check calibrated on another design than the one that ran: that design and its stated rate."""
    r, lo, hi = (float(ds[f"{prefix}empirical_false_fail{k}"].values[i]) for k in ("", "_low", "_high"))
    if not np.isfinite(r):
        return "—"
    text = f"{r:.3f} [{lo:.3f}, {hi:.3f}]"
    if prefix == "check_" and "check_calibration_other_design" in ds:
        other = str(ds["check_calibration_other_design"].values[i])
        if other:
            st = float(ds["check_calibration_stated_rate"].values[i])
            text += f" ({other} design; stated there {f'{st:.2g}' if np.isfinite(st) else 'none'})"
    return text


def _claims_json(ds: xr.Dataset) -> str:  # pragma: no cover - debugging aid
    return json.dumps({str(c): str(v) for c, v in zip(ds["claim"].values, ds["verdict"].values)})
