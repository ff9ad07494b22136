"""``simkit validate``: every study's quick (or full) design, and one table of claims C1--C7.

Each registered study contributes *checks* through ``Study.claim_rows(ds)``: the claim it tests,
the statistic, its estimate and Monte Carlo standard error, the check's false-failure rate and a
verdict. A check whose false-failure rate at the design that ran exceeds 0.2 (stated, or shown by
its calibration there) is "not assessed" at that design, with the reason. The validation dataset
has rows per claim (dimension ``claim``: exploratory, confirmatory and diagnostic rows apart), each
combining its assessed checks -- "pass" only if every one passes, "fail" if any fails, "error" if a
task failed, "not assessed" if none is assessed, "not yet studied" where no study exists -- with
its statistic in one line, and every check in full (dimension ``check``).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
from pathlib import Path

import numpy as np
import xarray as xr

from simkit.stats.analysis import combine_verdicts
from simkit.runner import canonical, get_study, resolve_config, run_study, study_names, write_dataset
from simkit.runner.provenance import git_commit, platform_text, versions
from simkit.claims.protocol import label_protocol

__all__ = ["CLAIMS", "NOT_STUDIED", "NOT_ASSESSED", "MAX_ASSESSED_RATE", "run_validation", "combine_checks", "assess",
           "check_role", "check_label", "one_line", "validation_report", "empirical_text"]

#: the claims of docs/theory.md section 3, in words
CLAIMS = {
    "C1": "finite-k bias R_k - log k - CE = O(1/k), with constant c1",
    "C2": "R_k - E CE(M_k, Q_k) = O(1/k): InfoNCE learns empirical similarity search",
    "C3": "generalisation gap O(n^-1/2); complexity term stabilises as k grows",
    "C4": "loss differences controlled by averages over negatives, not the max",
    "C5": "higher tau keeps Q close to pi (KL <= 2/tau); small tau inflates the bias constant and the gap",
    "C6": "no explicit dependence on the embedding dimension d",
    "C7": "C1-C3 hold for non-reversible, asymmetric positive kernels",
    "M1": "beyond the paper (theory §17): the R_k minimiser's excess CE is O(1/k^2) with constant g'H^-1 g/2; no shift "
          "when the class is well specified",
    "in-batch": "NT-Xent and CLIP batches: E l - log k = L + c1/k with the scheme's own c1 and limit L (theory §16)",
}
NOT_STUDIED = "not yet studied"
NOT_ASSESSED = "not assessed"
#: a check whose false-failure rate at the design that ran exceeds this is not assessed there
MAX_ASSESSED_RATE = 0.2
#: a check is a diagnostic (a control of the machinery, not a test of the claim) when its statistic's
#: first clause names a control, or when its row says ``role="diagnostic"``
_CONTROL = re.compile(r"\b(positive|negative|null|pre-registered)\s+control\b", re.IGNORECASE)


def check_role(row: dict) -> str:
    """``"diagnostic"`` for a control (positive, negative or null control of a rule), else ``"claim"``."""
    if row.get("role") == "diagnostic":
        return "diagnostic"
    first = re.split(r";", str(row.get("statistic", "")), maxsplit=1)[0]
    return "diagnostic" if _CONTROL.search(first) else "claim"


def assess(row: dict) -> tuple[str, str]:
    """``(verdict, reason)`` of one check at the design that ran.

    "not assessed" (with the reason) where the check's stated false-failure rate at that design
    exceeds :data:`MAX_ASSESSED_RATE`, or where its calibration at that design shows it (lower
    Clopper--Pearson 95% limit of the empirical rate above it): a failure there says nothing about
    the claim, and a pass is not counted either. Otherwise (and always for "error") the rule's own
    verdict, with an empty reason.
    """
    v = str(row["verdict"])
    if v == "error":
        return v, ""
    if v == NOT_ASSESSED:  # the check's own rule found no power at this design
        detail = " ".join(str(row.get("detail", "")).split())
        return v, "by its own rule" + (f": {detail[:200]}{'…' if len(detail) > 200 else ''}" if detail else "")
    stated = float(row.get("false_fail_rate", np.nan))
    if np.isfinite(stated) and stated > MAX_ASSESSED_RATE:
        return NOT_ASSESSED, (f"stated false-failure rate {stated:.2g} > {MAX_ASSESSED_RATE:g} at this design "
                              f"(its rule said {v})")
    low = float(row.get("empirical_false_fail_low", np.nan))
    if np.isfinite(low) and low > MAX_ASSESSED_RATE and not row.get("calibration_other_design"):
        rate, high = (float(row.get(f"empirical_false_fail{k}", np.nan)) for k in ("", "_high"))
        return NOT_ASSESSED, (f"calibrated false-failure rate {rate:.3f} [{low:.3f}, {high:.3f}] > "
                              f"{MAX_ASSESSED_RATE:g} at this design (its rule said {v})")
    return v, ""


def check_label(row: dict) -> str:
    """A short name of the check: its ``label``, else the first clause of its statistic without
    parentheses, cut at the first comma; for a "pre-registered ..." clause the first phrase after
    its colon too (at most 60 characters)."""
    if row.get("label"):
        return str(row["label"])
    text = str(row.get("statistic", "")).split(";")[0]
    while True:
        shorter = re.sub(r"\s*\([^()]*\)", "", text)
        if shorter == text:
            break
        text = shorter
    head, _, rest = text.partition(":")
    text = head.split(",")[0].strip()
    if text.lower().startswith("pre-registered") and rest.strip():
        text += ": " + rest.split(",")[0].split(":")[0].strip()
    return text if len(text) <= 60 else text[:59].rstrip() + "…"


def plus_minus(e: float, m: float) -> str:
    """``e ± m`` to the MCSE's second significant digit; ``e`` alone (4 digits) when the MCSE is 0
    (an exact or deterministic value); "—" when ``e`` is not finite."""
    if not np.isfinite(e):
        return "—"
    if not np.isfinite(m) or m <= 0:
        return f"{e:.4g}"
    d = max(0, 1 - int(np.floor(np.log10(m))))
    return f"{e:.{d}f} ± {m:.{d}f}"


def one_line(rows: list[dict]) -> str:
    """The statistic of a claim row in one line: per check its study, short name, estimate ± MCSE and
    verdict, or why it is not assessed."""
    parts = []
    for r in rows:
        v, why = assess(r)
        head = f"{r['study']} {check_label(r)}"
        if v == NOT_ASSESSED and why.startswith("by its own rule"):
            _, sep, own = str(r.get("detail", "")).rpartition("-> not assessed (")  # the rule's own reason, if given
            own = own.rstrip(")") if sep else ""
            parts.append(f"{head}: not assessed by its own rule ({own if own else 'no power at this design'})")
        elif v == NOT_ASSESSED:
            rate = float(r.get("false_fail_rate", np.nan))
            parts.append(f"{head}: not assessed (false-fail rate "
                         f"{rate if 'stated' in why else float(r.get('empirical_false_fail', np.nan)):.2g} here)")
        else:
            parts.append(f"{head} {plus_minus(float(r['estimate']), float(r['estimate_mcse']))} {v}")
    return "; ".join(parts)


def _row_groups(checks: list[dict]) -> list[tuple[str, str, list[dict]]]:
    """``(label, analysis, rows)`` per claim: the exploratory row (label ``C6``; also for a claim
    without checks), apart from it a confirmatory row per protocol (label ``C6 confirmatory``), and
    the diagnostic row (label ``C6 diagnostic``: the controls, whatever their analysis)."""
    groups = []
    for c in CLAIMS:
        rows = [r for r in checks if r["claim"] == c]
        diag = [r for r in rows if check_role(r) == "diagnostic"]
        rows = [r for r in rows if check_role(r) != "diagnostic"]
        is_conf = [str(r.get("analysis", "exploratory")).startswith("confirmatory") for r in rows]
        expl = [r for r, c_ in zip(rows, is_conf) if not c_]
        conf: dict[str, list[dict]] = {}
        for r, c_ in zip(rows, is_conf):
            if c_:
                conf.setdefault(str(r["analysis"]), []).append(r)
        if expl or not (conf or diag):
            groups.append((c, "exploratory", expl))
        for n, (analysis, rs) in enumerate(conf.items()):
            groups.append((f"{c} confirmatory" + (f" {n + 1}" if n else ""), analysis, rs))
        if diag:
            groups.append((f"{c} diagnostic", "diagnostic (controls of the rules: they test the machinery, "
                           "not the claim)", diag))
    return groups


def combine_checks(checks: list[dict]) -> xr.Dataset:
    """The per-claim table (dimension ``claim``: confirmatory, exploratory and diagnostic rows apart)
    and every check (dimension ``check``). A check is first assessed (:func:`assess`): one whose
    false-failure rate at the design that ran exceeds :data:`MAX_ASSESSED_RATE` is "not assessed"
    there, and a row is "not assessed" only when none of its checks is."""
    groups = _row_groups(checks)
    claims = [g[0] for g in groups]
    analysis = [g[1] for g in groups]
    assessed = [assess(r) for r in checks]
    by_id = {id(r): a_ for r, a_ in zip(checks, assessed)}
    verdict, statistic, est, mcse, ffr, studies, detail, n_na = [], [], [], [], [], [], [], []
    emp = {k: [] for k in ("", "_low", "_high")}
    for _, _, rows in groups:
        live = [r for r in rows if by_id[id(r)][0] != NOT_ASSESSED]
        # demonstrated rate of the row: seeds of one study's calibration on which any of the row's assessed
        # rated checks failed, only where every such check was calibrated on the design that ran
        rated = [r for r in live if np.isfinite(float(r["false_fail_rate"]))]
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
        n_na.append(len(rows) - len(live))
        if not rows:
            verdict.append(NOT_STUDIED)
            statistic.append("")
            est.append(np.nan)
            mcse.append(np.nan)
            ffr.append(np.nan)
            studies.append("")
            detail.append("no study of this claim exists yet")
            continue
        verdict.append(combine_verdicts([by_id[id(r)][0] for r in rows]))
        statistic.append(one_line(rows))
        first = (live or rows)[0]
        est.append(float(first["estimate"]))
        mcse.append(float(first["estimate_mcse"]))
        rates = [float(r["false_fail_rate"]) for r in live if np.isfinite(float(r["false_fail_rate"]))]
        # deterministic checks (no rate) add nothing; NaN only when every assessed check is deterministic
        # 1 - prod(1 - f) in log space: a rate of 1e-56 must not round to 0
        ffr.append(float(-np.expm1(np.sum(np.log1p(-np.asarray(rates))))) if rates else np.nan)
        studies.append(", ".join(sorted({r["study"] for r in rows})))
        detail.append("; ".join([f"{r['study']} {check_label(r)}: {NOT_ASSESSED}: {by_id[id(r)][1]}"
                                 for r in rows if by_id[id(r)][0] == NOT_ASSESSED]
                                + [r.get("detail", "") for r in rows if r.get("detail")]))

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
            "n_not_assessed": (("claim",), np.array(n_na, dtype=np.int64)),
            "check_verdict": (("check",), np.array([a_[0] for a_ in assessed], dtype=str)),
            "check_rule_verdict": (("check",), np.array([r["verdict"] for r in checks], dtype=str)),
            "check_not_assessed_reason": (("check",), np.array([a_[1] for a_ in assessed], dtype=str)),
            "check_role": (("check",), np.array([check_role(r) for r in checks], dtype=str)),
            "check_label": (("check",), np.array([check_label(r) for r in checks], dtype=str)),
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
        "verdict": a("verdict", "1", f"pass, fail, error (a task failed), '{NOT_ASSESSED}' (no check of the row is "
                     f"assessed at this design: each one's false-failure rate there exceeds {MAX_ASSESSED_RATE:g}) "
                     f"or '{NOT_STUDIED}'; the assessed checks decide (error > fail > pass)"),
        "statistic": a("statistic tested, in one line", "1", "per check: study, short name, estimate ± MCSE and "
                       "verdict, or why it is not assessed; the full statistics are check_statistic"),
        "n_not_assessed": a("checks of the row not assessed at this design", "1", "see check_not_assessed_reason"),
        "estimate": a("estimate of the first check's statistic", "1", "see check_estimate for every check"),
        "estimate_mcse": a("Monte Carlo standard error of estimate", "1", "jackknife or sd/sqrt(n) over blocks"),
        "false_fail_rate": a("false-failure rate", "1", "probability that the row's assessed checks fail when the "
                             "claim holds: 1 - prod(1 - rate of each assessed check)"),
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
        "check_verdict": a("verdict of the check at this design", "1", f"pass, fail, error or '{NOT_ASSESSED}' "
                           f"(false-failure rate at this design, stated or calibrated, above {MAX_ASSESSED_RATE:g})"),
        "check_rule_verdict": a("verdict of the check's rule", "1", "pass, fail or error, before the assessment"),
        "check_not_assessed_reason": a("why the check is not assessed", "1", "empty when it is assessed"),
        "check_role": a("role of the check", "1", "'claim' (tests the claim) or 'diagnostic' (a control of a rule)"),
        "check_label": a("short name of the check", "1", "simkit.claims.validate.check_label"),
        "check_detail": a("detail of the check", "1", ""),
        "check_calibration_other_design": a("design of the calibration, where another", "1",
                                            "'quick' where the run is a full design calibrated only on its quick "
                                            "design (then the empirical rate is that design's, beside its own "
                                            "stated rate check_calibration_stated_rate); empty otherwise"),
        "check_calibration_stated_rate": a("stated false-failure rate at the calibrated design", "1",
                                           "nominal rate of the check's verdict row in the calibration dataset; "
                                           "NaN for a deterministic or uncalibrated check"),
        "claim": a("claim", "1", "docs/theory.md section 3; 'C6 confirmatory' and 'C6 diagnostic' (controls) rows "
                   "are kept apart from the exploratory rows of the same claim"),
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


def full_design_label(calibrated: dict, ran: dict, calibrated_protocols: dict | None = None,
                      ran_protocols: dict | None = None) -> str:
    """``"full"`` when a full-design calibration ran the configuration of the dataset (all but the seed) under
    the same protocols (their SHA-256), else ``"full (calibrated with name=value, ...)"`` naming what differs:
    its rates are then another design's or another rule's."""
    keys = sorted((set(calibrated) | set(ran)) - {"seed"})
    diff = [f"{k}={calibrated.get(k)}" for k in keys if calibrated.get(k) != ran.get(k)]
    cp, rp = calibrated_protocols or {}, ran_protocols or {}
    diff += [f"{k}={str(cp.get(k, 'none'))[:12]}" for k in sorted(rp) if cp.get(k) != rp[k]]
    return "full" if not diff else "full (calibrated with " + ", ".join(diff) + ")"


def check_from_data(from_data: str | os.PathLike, names: list[str]) -> None:
    """ValueError naming ``--from-data`` unless ``<from_data>/<study>.nc`` exists for every study of ``names``."""
    missing = [str(Path(from_data) / f"{n}.nc") for n in names if not (Path(from_data) / f"{n}.nc").is_file()]
    if missing:
        raise ValueError(f"'--from-data' must hold a dataset of every study (<study>.nc); missing: "
                         f"{', '.join(missing)}")


def run_validation(*, full: bool = False, seed: int | None = None, out: str | os.PathLike = "data/validation.nc",
                   report: str | os.PathLike | None = "reports/validation.pdf", scheduler=None,
                   progress: bool = True, studies: list[str] | None = None,
                   calibration: str | os.PathLike | None = None,
                   from_data: str | os.PathLike | None = None) -> xr.Dataset:
    """Run every registered study (quick designs unless ``full``) and write the validation dataset/report.

    Each study's dataset goes to ``<out stem>/<study>.nc`` beside ``out`` (resumable like any run).
    With ``from_data`` (a directory), nothing runs: the claim rows are computed from the datasets
    ``<from_data>/<study>.nc`` already there (e.g. the committed default runs in ``data/``, whose
    pre-registered rows are confirmatory); a missing file raises ValueError naming it.
    Where ``<calibration>/<study>.nc`` exists (``simkit calibrate``), each check's empirical
    false-failure rate is shown beside its stated one; ``calibration`` defaults to
    ``<from_data>/calibration`` with ``from_data``, else ``data/calibration``.
    """
    from simkit.claims.calibrate import calibration_rates, protocol_hashes
    from simkit.runner import read_dataset
    out = Path(out)
    if calibration is None:
        calibration = Path(from_data) / "calibration" if from_data is not None else Path("data") / "calibration"
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
        if cal and cal["design"] == "full" and ran_full:
            cal["design"] = full_design_label(cal["target_config"], configs[name][1], cal["target_protocols"],
                                              protocol_hashes(res_ds.attrs))
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
            protocol = label_protocol(str(ds["analysis"].values[i])) if "analysis" in ds else None
            cell = [str(c)] + ([protocol[0].removeprefix("protocols/"), protocol[1]] if protocol else [])
            rows.append(["\n".join(cell),  # one line each: claim row, protocol file, hash
                         str(ds["claim_text"].values[i]), str(ds["statistic"].values[i]) or "—",
                         format_pm(e, m) if np.isfinite(e) else "—", f"{f:.1e}" if np.isfinite(f) else "—",
                         empirical_text(ds, i), str(ds["verdict"].values[i])])
        doc.table(["claim", "statement", "statistic tested", "estimate ± MCSE", "false-fail rate",
                   "empirical false-fail (95% CI)", "verdict"], rows, [1.35, 2.1, 2.8, 1.25, 0.75, 1.1, 0.65])
        if "check_rule_verdict" in ds:
            doc.heading("Checks at this design")
            doc.text(f"A check whose false-failure rate at the design that ran exceeds {MAX_ASSESSED_RATE:g} (stated, "
                     "or shown by its calibration there) is not assessed: its rule's verdict is kept beside.")
            doc.table(["claim", "study", "check", "role", "rule's verdict", "verdict here", "why not assessed"],
                      [[str(ds[f"check_{n}"].values[i]) for n in ("claim", "study", "label", "role", "rule_verdict",
                                                                   "verdict", "not_assessed_reason")]
                       for i in range(ds.sizes["check"])], [0.5, 1.1, 2.6, 0.8, 0.8, 0.9, 3.0])
        details = [[str(c), str(d)] for c, d in zip(ds["claim"].values, ds["detail"].values) if str(d)]
        if details:
            doc.heading("Details")
            doc.table(["claim", "what the checks found"], details, [1.15, 8.55])
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
