"""The ``simkit`` command line.

    simkit run STUDY [--quick] [--seed N] [--out PATH.nc] [--report PATH.pdf] [--set NAME=VALUE ...]
                     [--scheduler ADDRESS] [--no-report] [--no-progress]
    simkit report DATASET [--out PATH.pdf]
    simkit list
    simkit validate [--full] [--seed N] [--out PATH.nc] [--report PATH.pdf] [--scheduler ADDRESS]
    simkit calibrate STUDY [--seeds N] [--quick] [--first-seed S] [--out PATH.nc] [--report PATH.pdf]
                     [--set NAME=VALUE ...] [--alternative NAME] [--scheduler ADDRESS] [--keep-checkpoint]
                     [--no-progress]
    simkit calibrate STUDY --combine PART.nc PART.nc ... [--out PATH.nc] [--report PATH.pdf]

Bad input (unknown study or parameter, out-of-range value, unreadable dataset) prints one line
naming the argument and exits with status 2, leaving no output file behind.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import numpy as np

__all__ = ["main"]


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2 (argparse's own convention)
        # argparse quotes some arguments raw ("unrecognized arguments: ..."): keep it one line
        message = " ".join(message.replace("\r", "\\r").replace("\n", "\\n").splitlines())
        self.exit(2, f"simkit: error: {message}\n")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="simkit", description="Monte Carlo evidence for the InfoNCE theory (THEORY.md)")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    r = sub.add_parser("run", help="run (or resume) a study; writes data/STUDY.nc and reports/STUDY.pdf")
    r.add_argument("study")
    r.add_argument("--quick", action="store_true", help="the small design used in CI")
    r.add_argument("--seed", type=str, default=None, help="study seed (non-negative integer)")
    r.add_argument("--out", type=str, default=None, help="dataset path (default data/STUDY.nc)")
    r.add_argument("--report", type=str, default=None, help="report path (default reports/STUDY.pdf)")
    r.add_argument("--set", dest="overrides", action="append", default=[], metavar="NAME=VALUE",
                   help="override a design parameter (repeatable)")
    r.add_argument("--scheduler", type=str, default=None, help="address of a Dask distributed scheduler")
    r.add_argument("--no-report", action="store_true", help="write the dataset only")
    r.add_argument("--no-progress", action="store_true", help="no progress bar")
    r.add_argument("--allow-dirty", action="store_true",
                   help="run a pre-registered (confirmatory) design from a modified work tree; its dataset "
                        "records the changed files and the diff's hash and counts as exploratory")
    rep = sub.add_parser("report", help="render the PDF report of a dataset")
    rep.add_argument("dataset")
    rep.add_argument("--out", type=str, default=None, help="report path (default reports/<dataset stem>.pdf)")
    sub.add_parser("list", help="list the studies and the claims they test")
    v = sub.add_parser("validate", help="run every study's quick design and write the table of claims C1-C7")
    v.add_argument("--full", action="store_true", help="the default (full) designs instead of the quick ones")
    v.add_argument("--seed", type=str, default=None, help="seed for every study (default: each study's own)")
    v.add_argument("--out", type=str, default=None, help="dataset path (default data/validation.nc)")
    v.add_argument("--report", type=str, default=None, help="report path (default reports/validation.pdf)")
    v.add_argument("--scheduler", type=str, default=None, help="address of a Dask distributed scheduler")
    v.add_argument("--from-data", type=str, default=None, metavar="DIR",
                   help="run nothing: the claim table of the datasets DIR/<study>.nc already there (e.g. data)")
    v.add_argument("--calibration", type=str, default=None, metavar="DIR",
                   help="calibrations DIR/<study>.nc shown beside the stated rates (default DIR/calibration of "
                        "--from-data, else data/calibration)")
    v.add_argument("--no-progress", action="store_true", help="no progress bar")
    c = sub.add_parser("calibrate", help="run a study at many seeds: empirical false-failure rate of every check "
                       "(data/calibration/STUDY.nc, reports/calibration.pdf)")
    c.add_argument("study")
    c.add_argument("--seeds", type=str, default="200", help="number of seeds (default 200)")
    c.add_argument("--quick", action="store_true", help="the study's quick design")
    c.add_argument("--first-seed", type=str, default="1", help="first seed (default 1)")
    c.add_argument("--out", type=str, default=None, help="dataset path (default data/calibration/STUDY.nc)")
    c.add_argument("--report", type=str, default=None,
                   help="report of every dataset beside --out (default reports/calibration.pdf)")
    c.add_argument("--set", dest="overrides", action="append", default=[], metavar="NAME=VALUE",
                   help="override a design parameter of the study (repeatable)")
    c.add_argument("--alternative", type=str, default=None, help="also the power under this alternative (sqrt-k: C1 gap curve; sqrt-k-search: C2 curve D_k)")
    c.add_argument("--scheduler", type=str, default=None, help="address of a Dask distributed scheduler")
    c.add_argument("--keep-checkpoint", action="store_true", help="keep the per-seed checkpoint (to add seeds later)")
    c.add_argument("--no-progress", action="store_true", help="no progress bar")
    c.add_argument("--combine", nargs="+", default=None, metavar="PART.nc",
                   help="run nothing: combine finished calibrations of the same design at other seeds into --out "
                        "(a seed in two parts must give the same decisions, numbers within 1e-9 relative)")
    __import__("importlib").import_module("simkit.diagnose.cli").add_parser(sub)  # simkit diagnose
    return p


def _parse_overrides(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        if "=" not in item:
            raise ValueError(f"'--set' expects NAME=VALUE, got {item!r}")
        name, value = item.split("=", 1)
        name = name.strip()
        if not name:
            raise ValueError(f"'--set' expects NAME=VALUE, got {item!r}")
        if name in out:
            raise ValueError(f"'--set' gives {name!r} twice")
        out[name] = value
    return out


def _parse_seed(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        seed = int(text)
    except ValueError:
        raise ValueError(f"'--seed' must be a non-negative integer, got {text!r}") from None
    if seed < 0 or seed >= 2**63:
        raise ValueError(f"'--seed' must be in [0, 2**63), got {text!r}")
    return seed


#: longest output file name: the checkpoint directory adds 22 bytes, a file system allows 255
_MAX_NAME_BYTES = 200


def _check_path(option: str, text: str | None, suffix: str) -> Path | None:
    if text is None:
        return None
    try:
        os.fsencode(text)
    except UnicodeError:
        raise ValueError(f"'{option}' is not a valid file name, got {text!r}") from None
    if "\0" in text:
        raise ValueError(f"'{option}' must not contain a NUL character, got {text!r}")
    p = Path(text)
    if p.suffix.lower() != suffix:
        raise ValueError(f"'{option}' must end in {suffix}, got {text!r}")
    if len(os.fsencode(p.name)) > _MAX_NAME_BYTES:
        raise ValueError(f"'{option}' file name is longer than {_MAX_NAME_BYTES} bytes, got {text!r}")
    try:
        if p.is_dir():
            raise ValueError(f"'{option}' is a directory: {text!r}")
        parent = next((a for a in p.parents if a.exists()), None)  # nearest existing ancestor
    except OSError as exc:  # e.g. a path component too long for the file system
        raise ValueError(f"'{option}' is not a usable path ({exc.strerror}): {text!r}") from None
    if parent is not None and not parent.is_dir():
        raise ValueError(f"'{option}' is inside {str(parent)!r}, which is not a directory")
    return p


def _connect(address: str | None):
    """The executor of a run: the Dask scheduler at ``address``, built once (None: in-process);
    ValueError if unusable."""
    if address is None:
        return None
    from simkit.runner.dask import DaskExecutor
    try:
        return DaskExecutor(address)
    except ValueError as exc:
        raise ValueError(str(exc).replace("'scheduler'", "'--scheduler'", 1)) from None


def _check_clean_tree(study, cfg: dict, allow_dirty: bool) -> None:
    """A confirmatory design runs from an unmodified work tree, so that its commit says what ran."""
    from simkit.claims.protocol import confirmatory_protocols
    from simkit.runner.provenance import changed_files
    protocols = confirmatory_protocols(study, cfg)
    changed = changed_files() if protocols and not allow_dirty else None
    if changed:
        shown = ", ".join(changed[:5]) + (f" and {len(changed) - 5} more" if len(changed) > 5 else "")
        raise ValueError(f"this design applies the pre-registered rule of {protocols[0]} and needs an unmodified "
                         f"work tree (changed: {shown}); commit first, or pass --allow-dirty for an exploratory run")


def _guarded(work, executor, *, interrupted: str | None = None, failed: tuple = ()):
    """``work()``, with the runner's failures as one line on stderr and an exit status.

    Returns ``(value, None)``, or ``(None, status)``: 2 when the output is busy, its checkpoint belongs to
    another run or memory is short (nothing run); 1 when a write, the executor, the summary or one of
    ``failed`` failed (finished tasks kept); 130 on Ctrl-C where ``interrupted`` says what is kept.
    The executor is closed either way.
    """
    from simkit.runner import (CheckpointMismatch, ExecutorLost, InsufficientMemory, OutputBusy, SummaryFailed,
                               WriteFailed)
    try:
        return work(), None
    except KeyboardInterrupt:
        if interrupted is None:
            raise
        print(f"simkit: {interrupted}", file=sys.stderr)
        return None, 130
    except (OutputBusy, CheckpointMismatch, InsufficientMemory) as exc:
        print(f"simkit: error: {exc}", file=sys.stderr)
        return None, 2
    except (WriteFailed, ExecutorLost, SummaryFailed, *failed) as exc:
        print(f"simkit: error: {' '.join(str(exc).splitlines())}", file=sys.stderr)
        return None, 1
    finally:
        if executor is not None:
            executor.close()


def _run(args) -> int:
    from simkit.runner import WriteFailed, check_writable, get_study, resolve_config, run_study
    try:  # every argument is validated before anything runs or is written
        study = get_study(args.study)
        cfg = resolve_config(study, _parse_overrides(args.overrides), quick=args.quick, seed=_parse_seed(args.seed))
        out = _check_path("--out", args.out, ".nc") or Path("data") / f"{study.name}.nc"
        report = _check_path("--report", args.report, ".pdf") or Path("reports") / f"{out.stem}.pdf"
        check_writable("--out", out)  # the dataset and the checkpoint directory beside it
        if not args.no_report:
            check_writable("--report", report)
        _check_clean_tree(study, cfg, args.allow_dirty)
        executor = _connect(args.scheduler)  # last: it is the only check that contacts anything
    except ValueError as exc:
        print(f"simkit: error: {exc}", file=sys.stderr)
        return 2
    result, code = _guarded(lambda: run_study(study, cfg, out, executor=executor, progress=not args.no_progress),
                            executor)
    if code is not None:
        return code
    if not result.completed:
        return 130
    print(f"simkit: wrote {result.path} ({result.n_done}/{result.n_tasks} tasks, {result.wall_time_s:.1f} s)")
    if result.errors:
        print(f"simkit: {len(result.errors)} task(s) failed; see the dataset's cell_error and attrs['errors']",
              file=sys.stderr)
    if not args.no_report:
        try:
            study.report(result.dataset, report)
        except WriteFailed as exc:
            print(f"simkit: error: {exc}; the dataset is written: 'simkit report {result.path}' retries",
                  file=sys.stderr)
            return 1
        print(f"simkit: wrote {report}")
    text = study.summary_text(result.dataset)
    if text:
        print(text)
    return 0 if not result.errors else 1


def _report(args) -> int:
    from simkit.runner import WriteFailed, check_dataset, check_writable, get_study, read_dataset
    try:
        ds = read_dataset(args.dataset)
        calibration = str(ds.attrs["study"]).startswith("calibrate-") and "target_study" in ds.attrs
        if calibration:  # drawn from the calibration's own variables: its target need not be installed
            from simkit.claims.calibrate import Calibration
            study = None
            schema = SimpleNamespace(name=ds.attrs["study"], schema=Calibration.schema, cell_dim=Calibration.cell_dim,
                                     optional_vars=Calibration.optional_vars)
        else:
            try:
                study = schema = get_study(ds.attrs["study"])
            except ValueError:
                raise ValueError(f"'{args.dataset}' names an unknown study {ds.attrs['study']!r}") from None
        check_dataset(schema, ds, f"'{args.dataset}'")  # before drawing: the study's declared schema
        out = _check_path("--out", args.out, ".pdf") or Path("reports") / f"{Path(args.dataset).stem}.pdf"
        check_writable("--out", out)
    except ValueError as exc:
        print(f"simkit: error: {exc}", file=sys.stderr)
        return 2
    try:
        if calibration:  # a dataset of simkit calibrate: its section of the calibration report
            from simkit.report.calibration import calibration_report
            calibration_report({str(ds.attrs["target_study"]): ds}, out)
        else:
            study.report(ds, out)
    except WriteFailed as exc:
        print(f"simkit: error: {exc}", file=sys.stderr)
        return 1
    print(f"simkit: wrote {out}")
    return 0


def _validate(args) -> int:
    from simkit.runner import check_writable
    from simkit.claims.validate import run_validation
    try:
        seed = _parse_seed(args.seed)
        out = _check_path("--out", args.out, ".nc") or Path("data") / "validation.nc"
        report = _check_path("--report", args.report, ".pdf") or Path("reports") / "validation.pdf"
        check_writable("--out", out)
        check_writable("--report", report)
        if args.from_data is not None:
            from simkit.runner import study_names
            from simkit.claims.validate import check_from_data
            check_from_data(args.from_data, study_names())
        if args.calibration is not None and not Path(args.calibration).is_dir():
            raise ValueError(f"'--calibration' must be a directory, got {args.calibration!r}")
        executor = _connect(args.scheduler)
    except ValueError as exc:
        print(f"simkit: error: {exc}", file=sys.stderr)
        return 2
    ds, code = _guarded(lambda: run_validation(full=args.full, seed=seed, out=out, report=report, scheduler=executor,
                                               progress=not args.no_progress, from_data=args.from_data,
                                               calibration=args.calibration),
                        executor, interrupted="validation interrupted; finished tasks are kept, run again to resume")
    if code is not None:
        return code
    used = json.loads(str(ds.attrs.get("calibration_datasets", "{}")))
    print(f"simkit: wrote {out} and {report}" + ("" if used else " (no calibration of these studies found: "
                                                 "empirical rates not shown)"))
    from simkit.claims.validate import empirical_text
    print(f"{'claim':<19}{'verdict':<17}{'estimate ± MCSE':<26}{'false-fail':<12}{'empirical (95% CI)':<22}statistic")
    for i, c in enumerate(ds["claim"].values):
        e, m = float(ds["estimate"].values[i]), float(ds["estimate_mcse"].values[i])
        f = float(ds["false_fail_rate"].values[i])
        est = f"{e:.5g} ± {m:.2g}" if np.isfinite(e) else "-"
        an = str(ds["analysis"].values[i])
        print(f"{c:<19}{ds['verdict'].values[i]:<17}{est:<26}{(f'{f:.1e}' if np.isfinite(f) else '-'):<12}"
              f"{empirical_text(ds, i):<22}{ds['statistic'].values[i]}"
              + (f" [{an}]" if an.startswith("confirmatory") else ""))
    for i in np.flatnonzero(np.isfinite(ds["check_empirical_false_fail"].values)):  # calibrated checks
        f = float(ds["check_false_fail_rate"].values[i])
        print(f"calibrated: {ds['check_study'].values[i]} {ds['check_claim'].values[i]} check {i}: stated "
              f"{(f'{f:.1e}' if np.isfinite(f) else 'none (deterministic)')}, empirical "
              f"{empirical_text(ds, int(i), 'check_')}")
    verdicts = set(str(v) for v in ds["verdict"].values)
    return 1 if ("fail" in verdicts or "error" in verdicts) else 0


def _parse_count(option: str, text: str, low: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"'{option}' must be an integer >= {low}, got {text!r}") from None
    if value < low or value >= 2**63:
        raise ValueError(f"'{option}' must be an integer in [{low}, 2**63), got {text!r}")
    return value


def _combine(args) -> int:
    from simkit.claims.calibrate import combine
    from simkit.runner import WriteFailed, check_writable, get_study
    try:
        given = [opt for opt, used in (("--seeds", args.seeds != "200"), ("--first-seed", args.first_seed != "1"),
                                       ("--quick", args.quick), ("--set", bool(args.overrides)),
                                       ("--alternative", args.alternative is not None),
                                       ("--scheduler", args.scheduler is not None)) if used]
        if given:
            raise ValueError(f"'--combine' runs nothing and takes only --out and --report, got {', '.join(given)} "
                             "(the design is that of the parts)")
        study = get_study(args.study)
        out = _check_path("--out", args.out, ".nc") or Path("data") / "calibration" / f"{study.name}.nc"
        report = _check_path("--report", args.report, ".pdf") or Path("reports") / "calibration.pdf"
        check_writable("--out", out)
        check_writable("--report", report)
        ds = combine(study, args.combine, out=out)
    except ValueError as exc:
        print(f"simkit: error: {' '.join(str(exc).splitlines())}", file=sys.stderr)
        return 2
    except WriteFailed as exc:
        print(f"simkit: error: {exc}", file=sys.stderr)
        return 1
    print(f"simkit: wrote {out} ({ds.sizes['seed']} seeds from {len(args.combine)} calibrations)")
    return _after_calibration(ds, out, report)


def _calibrate(args) -> int:
    from simkit.claims.calibrate import ALTERNATIVES, calibrate
    from simkit.runner import check_writable, get_study, resolve_config
    if args.combine is not None:
        return _combine(args)
    try:  # every argument is validated before anything runs or is written
        study = get_study(args.study)
        seeds = _parse_count("--seeds", args.seeds, 1)
        first = _parse_count("--first-seed", args.first_seed, 0)
        if first + seeds > 2**63:
            raise ValueError(f"'--first-seed' + '--seeds' must be <= 2**63, got {first} + {seeds}")
        overrides = _parse_overrides(args.overrides)
        resolve_config(study, overrides, quick=args.quick, seed=first)
        if args.alternative is not None:
            if args.alternative not in ALTERNATIVES:
                raise ValueError(f"'--alternative' must be one of {', '.join(ALTERNATIVES)}, got {args.alternative!r}")
            ALTERNATIVES[args.alternative].check_study(study)
        out = _check_path("--out", args.out, ".nc") or Path("data") / "calibration" / f"{study.name}.nc"
        report = _check_path("--report", args.report, ".pdf") or Path("reports") / "calibration.pdf"
        check_writable("--out", out)
        check_writable("--report", report)
        executor = _connect(args.scheduler)  # last: it is the only check that contacts anything
    except ValueError as exc:
        print(f"simkit: error: {exc}", file=sys.stderr)
        return 2
    ds, code = _guarded(lambda: calibrate(study, seeds=seeds, first_seed=first, quick=args.quick, overrides=overrides,
                                          out=out, executor=executor, progress=not args.no_progress,
                                          alternative=args.alternative, keep_checkpoint=args.keep_checkpoint),
                        executor, failed=(RuntimeError,),
                        interrupted="calibration interrupted; finished seeds are kept, run the same command to resume")
    if code is not None:
        return code
    print(f"simkit: wrote {out} ({ds.sizes['seed']} seeds, {float(ds.attrs['wall_time_s']):.1f} s)")
    return _after_calibration(ds, out, report)


def _after_calibration(ds, out: Path, report: Path) -> int:
    """The calibration report of every dataset beside ``out``, and the rejection table on stdout."""
    from simkit.runner import WriteFailed
    try:
        from simkit.report.calibration import calibration_report
        calibration_report(out.parent, report)
    except WriteFailed as exc:
        print(f"simkit: error: {exc}; the dataset is written", file=sys.stderr)
        return 1
    print(f"simkit: wrote {report}")
    print(f"{'check':<34}{'kind':<15}{'nominal':>9}{'rejected':>12}  empirical (95% CI)   KS p")
    for i, name in enumerate(ds["check"].values):
        nom, ks = float(ds["nominal_rate"].values[i]), float(ds["ks_pvalue"].values[i])
        rate = (f"{float(ds['empirical_rate'].values[i]):.4f} [{float(ds['empirical_rate_low'].values[i]):.4f}, "
                f"{float(ds['empirical_rate_high'].values[i]):.4f}]")
        print(f"{name:<34}{ds['check_kind'].values[i]:<15}{(f'{nom:.2e}' if np.isfinite(nom) else '-'):>9}"
              f"{int(ds['n_reject'].values[i]):>6}/{int(ds['n_valid'].values[i]):<5}  {rate}  "
              f"{(f'{ks:.3f}' if np.isfinite(ks) else '-')}")
    return 0 if not int(ds.attrs.get("n_errors", 0)) else 1


def _list(args) -> int:
    from simkit.runner import get_study, study_names
    for name in study_names():
        s = get_study(name)
        print(f"{name:<16}{s.claim:<10}{s.title}")
    return 0


class _Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C's KeyboardInterrupt would be, so that it is handled the same way."""


#: exit status after SIGTERM (128 + the signal's number, as if the signal had ended the process)
TERMINATED = 128 + signal.SIGTERM
_sigterms: list[int] = []  # SIGTERMs received during this call of main()


def _on_sigterm(signum, frame):
    _sigterms.append(signum)
    raise _Terminated()


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``simkit`` console script; returns the exit status.

    SIGTERM (a batch scheduler's or ``kill``'s stop) is handled as Ctrl-C is: finished tasks are kept
    and reported in one line, the output's lock is released, and the same command resumes; the status
    is then 143 where Ctrl-C gives 130.
    """
    args = _parser().parse_args(argv)
    installed = threading.current_thread() is threading.main_thread()  # handlers can only be set there
    if installed:
        _sigterms.clear()
        previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        code = _dispatch(args)
    except _Terminated:  # a command with no Ctrl-C handling of its own: one line, no traceback either
        print("simkit: terminated (SIGTERM)", file=sys.stderr)
        code = TERMINATED
    finally:
        if installed:
            signal.signal(signal.SIGTERM, previous)
    return TERMINATED if code == 130 and _sigterms else code


def _dispatch(args) -> int:
    if args.command in ("run", "validate", "calibrate"):  # commands that run tasks in this process
        from simkit.runner import tune_malloc
        tune_malloc()  # glibc's thresholds as on Dask workers: fewer mmap/munmap calls, the same numbers
    if args.command == "run":
        return _run(args)
    if args.command == "report":
        return _report(args)
    if args.command == "validate":
        return _validate(args)
    if args.command == "calibrate":
        return _calibrate(args)
    if args.command == "diagnose":
        return __import__("importlib").import_module("simkit.diagnose.cli").run(args)
    return _list(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
