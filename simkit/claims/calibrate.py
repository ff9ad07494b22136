"""Calibration of claim checks over many independent seeds: ``simkit calibrate``.

A check states a false-failure rate; calibration demonstrates it. :func:`calibrate` runs a study at
seeds ``first_seed, ..., first_seed + seeds - 1`` -- each seed a complete, independent run of the
study -- and records, per seed, every component test of every :class:`~simkit.runner.Check`
(``Check.pvalues``: a p-value that is Uniform(0, 1) when the claim holds, rejecting at ``p < alpha``;
for a one-sided bound, uniform at the claim's boundary and stochastically larger inside it)
and every check's verdict (rejecting when it is "fail"). Over the seeds it gives the empirical
rejection rate with its Clopper--Pearson 95% interval beside the nominal rate, and a
Kolmogorov--Smirnov test of each p-value column against Uniform(0, 1) (one-sided for a bound: only
an excess of small p-values refutes it).

The seeds are runner tasks of a meta-study (one cell per seed), so a calibration is checkpointed per
seed, resumes, runs on Dask with an identical dataset, and combines with calibrations of the same
design run at other seeds (:func:`combine`). The design and the rows of the ``check`` dimension are
described in docs/design.md, "simkit.claims.calibrate".

References
----------
Clopper & Pearson (1934), Biometrika 26, 404; docs/theory.md section 3 (claims C1--C7).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr
from scipy import stats

from simkit.runner import (Checkpoint, InProcessExecutor, RunLock, Study, Var, canonical, check_writable, execute_task,
                           get_study, make_executor, read_dataset, resolve_config, run_study, task_name)
from simkit.runner.memory import check_memory
from simkit.runner.provenance import git_commit
from simkit.runner.run import apply_schema
from simkit.runner.storage import write_dataset

__all__ = ["calibrate", "combine", "calibration_dataset", "Calibration", "Alternative", "ALTERNATIVES", "SCHEMA", "check_labels",
           "clopper_pearson", "calibration_path", "protocol_hashes", "target_protocols", "calibration_rates",
           "union_rejection_rate", "seed_rows", "CONFIDENCE"]

#: level of the empirical rate's interval
CONFIDENCE = 0.95
#: kinds of row; a "bound-test" is a component test of a one-sided bound (its p-value is Uniform(0, 1)
#: only at the boundary of the claim and stochastically larger inside it); appended last so that the
#: stored kind indices of the older rows keep their meaning
KINDS = ("test", "verdict", "power-test", "power-verdict", "bound-test", "power-bound-test")
#: reference distribution of each kind's statistic (``check_reference``)
REFERENCES = {"test": "Uniform(0, 1)",
              "bound-test": "at least Uniform(0, 1) stochastically: P(p < u) <= u (a bound: uniform only at the "
                            "claim's boundary)"}


def _v(dims, long_name, description, units="1"):
    return Var(dims, long_name, units, description)


SC, C, SE = ("seed", "check"), ("check",), ("seed",)

#: every variable and coordinate of a calibration dataset
SCHEMA = {
    "seed": _v(SE, "seed of the study run", "each seed is one complete, independent run of the target study "
               "(identical to 'simkit run STUDY --seed SEED' with the same design)"),
    "check": _v(C, "component test or check verdict", "<check>:<test> (a component test, Check.pvalues) or "
                "<check>:verdict; <check> is the claim, or <claim>.<n> for the n-th of several checks of one "
                "claim; 'power:' prefix: under the alternative (attribute alternative)"),
    "statistic": _v(SC, "p-value of the test, or the check's estimate (verdict rows)",
                    "test rows: p-value, Uniform(0, 1) when the claim holds (its reference distribution; at least "
                    "uniform for bound-test rows); "
                    "verdict rows: the check's estimate (units of the check's statistic)"),
    "reject": _v(SC, "rejection (0 or 1)", "test rows: p < alpha; verdict rows: verdict 'fail'; NaN where the "
                 "p-value is NaN or the verdict is 'error' (counted in n_missing)"),
    "stated_rate": _v(SC, "stated rejection rate of this seed", "alpha of the test, or the check's stated "
                      "false-failure rate on this seed's dataset (NaN for a deterministic check)"),
    "target_errors": _v(SE, "failed tasks of the study run", "number of the target run's tasks that raised"),
    "target_error_message": _v(SE, "errors of the study run's failed tasks", "one entry per failed task, "
                               "'; '-separated: the cell's index and label, the stage and block, and the exception; "
                               "'' when none failed; 'not recorded' for a seed of a part written before the "
                               "messages were kept (its count is in target_errors)"),
    "check_kind": _v(C, "kind of row", "test, verdict, bound-test (a one-sided bound's "
                     "component test), power-test, power-verdict or power-bound-test"),
    "check_claim": _v(C, "claim", "C1..C7 (docs/theory.md section 3)"),
    "check_index": _v(C, "index of the check", "position in the target study's checks (as in simkit validate)"),
    "check_reference": _v(C, "reference distribution of statistic", "Uniform(0, 1) for test rows; at least "
                          "Uniform(0, 1) stochastically for bound-test rows; none for "
                          "verdict rows (the estimate has no common reference) and power rows (not the null)"),
    "nominal_rate": _v(C, "nominal rejection rate", "alpha for test rows; the stated false-failure rate for "
                       "verdict rows (mean of stated_rate over seeds); NaN for a deterministic check"),
    "n_valid": _v(C, "seeds with a decision", "seeds where reject is 0 or 1"),
    "n_missing": _v(C, "seeds without a decision", "NaN p-value or verdict 'error'"),
    "n_reject": _v(C, "rejections", "seeds with reject = 1"),
    "empirical_rate": _v(C, "empirical rejection rate", "n_reject / n_valid: the demonstrated false-failure "
                         "rate (test and verdict rows) or the power (power rows)"),
    "empirical_rate_low": _v(C, "empirical rate, 95% lower limit", "Clopper-Pearson exact interval"),
    "empirical_rate_high": _v(C, "empirical rate, 95% upper limit", "Clopper-Pearson exact interval"),
    "binom_pvalue": _v(C, "p-value of empirical rate = nominal rate", "exact binomial test "
                       "(scipy.stats.binomtest) of n_reject out of n_valid, two-sided (one-sided, empirical > "
                       "nominal, for bound-test rows); NaN without a nominal rate"),
    "ks_pvalue": _v(C, "Kolmogorov-Smirnov p-value against Uniform(0, 1)", "scipy.stats.kstest of the test "
                    "row's p-values over seeds (exact), two-sided; for bound-test rows one-sided "
                    "(alternative='greater': H0 P(p <= u) <= u for all u); NaN for verdict and power rows"),
}


@dataclasses.dataclass(frozen=True)
class Alternative:
    """An alternative pushed through a study's real estimator: ``transform(raw)`` of the raw dataset
    (``raw_*``/``prep_*`` variables), re-summarised by the study and re-checked.

    ``ScaleBySqrtK``-type alternatives multiply the raw variable ``var`` by ``sqrt(k)`` along its
    dimension ``dim``: a per-block gap curve g_b(k) with E g_b(k) = c1/k + c2/k^2 + ... becomes
    sqrt(k) g_b(k), with mean c1/sqrt(k) + c2/k^(3/2) + ... (the 1/sqrt(k) rate C1 rules out) and
    the same relative Monte Carlo error at every k. Every other raw variable is left as it is.
    """

    name: str
    var: str
    dim: str
    description: str

    def check_study(self, study: Study) -> None:
        v = study.schema.get(self.var)
        if v is None or self.dim not in v.dims:
            raise ValueError(f"'alternative' {self.name!r} needs the raw variable {self.var!r} with dimension "
                             f"{self.dim!r}; study {study.name!r} declares none")

    def transform(self, raw: xr.Dataset) -> xr.Dataset:
        out = raw.copy()
        scale = np.sqrt(raw[self.dim].astype(float))
        out[self.var] = (raw[self.var] * scale).transpose(*raw[self.var].dims)
        out[self.var].attrs = raw[self.var].attrs
        return out


#: alternatives by name (``--alternative``)
ALTERNATIVES = {
    "sqrt-k": Alternative("sqrt-k", "raw_gap_cv", "k",
                          "per-block control-variate gap curve raw_gap_cv(setting, block, k) multiplied by sqrt(k): "
                          "mean c1/sqrt(k) + c2/k^1.5, the O(1/sqrt k) rate, through the study's own summarise and "
                          "checks; every other raw variable (dgap_cv included) unchanged"),
    "sqrt-k-search": Alternative("sqrt-k-search", "raw_d_cv", "k",
                                 "per-block control-variate curve D_k = R_k - E CE(M_k, Q_k), raw_d_cv(setting, "
                                 "block, k), multiplied by sqrt(k): mean d1/sqrt(k) + ..., the O(1/sqrt k) rate C2 "
                                 "rules out, through the study's own summarise and checks (search_ce; asymmetry's C2 "
                                 "part); every other raw variable unchanged"),
}


def check_labels(study: Study) -> list[str]:
    """One label per check of ``study``: its claim, or ``<claim>.<n>`` when the claim has several checks."""
    claims = [c.claim for c in study.checks]
    labels = []
    for j, c in enumerate(claims):
        labels.append(c if claims.count(c) == 1 else f"{c}.{claims[:j + 1].count(c)}")
    return labels


def error_text(errors: Sequence[dict], limit: int = 300) -> str:
    """One line per failed task of a run (``RunResult.errors``), '; '-joined: the cell's index and
    label, the stage and block, and the exception (whitespace collapsed, at most ``limit`` characters)."""
    return "; ".join(
        f"cell {e['cell_index']} ({canonical(e['cell'])}) {e['stage']}"
        + (f" {e['block']}" if e["stage"] != "prepare" else "") + ": "
        + " ".join(str(e["error"]).split())[:limit] for e in errors)


def seed_rows(study: Study, ds: xr.Dataset, prefix: str = "") -> list[dict]:
    """Rows of one seed: every component test (``Check.pvalues``) and every check's verdict on ``ds``."""
    rows = []
    power = prefix != ""
    for j, (check, label) in enumerate(zip(study.checks, check_labels(study))):
        pv = check.pvalues(ds) if getattr(check, "pvalues", None) is not None else {}
        for test, entry in pv.items():
            p, alpha, ref = (*entry, "exact") if len(entry) == 2 else entry
            if ref not in ("exact", "bound"):
                raise ValueError(f"Check.pvalues of {label}: the reference of {test!r} must be 'exact' or 'bound', "
                                 f"got {ref!r}")
            p, alpha = float(p), float(alpha)
            kind = KINDS[4 + power] if ref == "bound" else KINDS[2 * power]
            rows.append({"check": f"{prefix}{label}:{test}", "kind": kind, "claim": check.claim,
                         "index": j, "statistic": p, "stated": alpha,
                         "reject": float(p < alpha) if np.isfinite(p) else np.nan})
        row = check.row(ds)
        verdict = row["verdict"]
        rows.append({"check": f"{prefix}{label}:verdict", "kind": KINDS[1 + 2 * power], "claim": check.claim,
                     "index": j, "statistic": float(row["estimate"]), "stated": float(row["false_fail_rate"]),
                     "reject": 1.0 if verdict == "fail" else 0.0 if verdict == "pass" else np.nan})
    return rows


def _resummarise(study: Study, ds: xr.Dataset, cfg: dict, alternative: Alternative) -> xr.Dataset:
    """The study's summaries of the alternative's raw dataset (the runner's merge of a summary dict)."""
    keep = [n for n in ds.data_vars if n.startswith(("raw_", "prep_")) or n in ("cell_error", "cell_key")]
    raw = alternative.transform(ds[keep])
    summary = study.summarise(raw, cfg)
    if isinstance(summary, xr.Dataset):
        return summary
    out = raw.copy()
    for name, value in summary.items():
        dims = tuple(study.cell_dim if d is None else d for d in study.schema[name].dims)
        out[name] = (dims, np.asarray(value))
    out.attrs.update(ds.attrs)
    return out


class Calibration(Study):
    """The meta-study of :func:`calibrate`: one cell per seed of ``target``, one block per cell.

    Parameters
    ----------
    target : Study
        The study calibrated.
    target_cfg : dict
        Its resolved configuration (the seed is replaced by each cell's).
    seeds : sequence of int
        The seeds (cells).
    alternative : Alternative, optional
        Also evaluate the checks under this alternative (power rows).
    names : sequence of str, optional
        Labels of the check dimension (fixed by the first seed; see the module docstring).
    scratch : path, optional
        Directory for the target runs (their checkpoints survive an interruption); a temporary
        directory per task if None (Dask workers).
    """

    cell_dim = "seed"
    schema = SCHEMA
    # the dataset is the summary over seeds, without the raw blocks; calibrations written before the error
    # messages were kept lack target_error_message
    optional_vars = frozenset({"block", "target_error_message"})
    block_text = ("target_error_message",)

    def __init__(self, target: Study, target_cfg: dict, seeds: Sequence[int], *,
                 alternative: Alternative | None = None, names: Sequence[str] | None = None,
                 scratch: str | os.PathLike | None = None, quick: bool = False):
        self.target = target
        self.target_cfg = {k: v for k, v in target_cfg.items() if k != "seed"}
        #: the seed of the calibrated dataset (its study's default when not given): the protocols its run
        #: records may depend on it (a study may record its protocol only at the protocol's own seed)
        self.target_seed = int(target_cfg.get("seed", target.default_seed))
        self.seeds = [int(s) for s in seeds]
        self.alternative = alternative
        self.names = None if names is None else tuple(names)
        self.scratch = None if scratch is None else str(scratch)
        self.quick = bool(quick)
        self._resumed = 0  # target tasks resumed by the seeds run in this process (their own checkpoints)
        self.name = f"calibrate-{target.name}"
        self.claim = target.claim
        self.title = f"Calibration of the checks of {target.name} ({target.claim}) over independent seeds"
        self.references = target.references + "; Clopper & Pearson (1934), Biometrika 26, 404"
        self.ademp = {"aim": f"demonstrate the stated false-failure rates of {target.name}'s checks",
                      "data": f"{target.name} at independent seeds, each a complete run",
                      "estimand": "rejection rate of each component test and each check verdict",
                      "methods": "p-values from Check.pvalues, verdicts from Check.evaluate",
                      "performance": "empirical rate with Clopper-Pearson 95% interval; KS against Uniform(0, 1)"}

    def config(self, first_seed: int) -> dict:
        """The meta-configuration: the target's (without its seed), the first seed, the alternative --
        never the number of seeds, so the checkpoint of a run with fewer seeds is reused."""
        return {"target": self.target.name, "target_config": self.target_cfg, "quick": self.quick,
                "alternative": None if self.alternative is None else self.alternative.name,
                "seed": int(first_seed)}

    def n_blocks(self, cfg):
        return 1

    def cells(self, cfg):
        return [{"seed": s} for s in self.seeds]

    def block_dims(self, cfg):
        if self.names is None:
            raise RuntimeError("the check dimension is fixed by the first seed before the seeds are assembled")
        dims = {n: ("check",) for n in ("statistic", "reject", "stated", "kind", "index")}
        dims["target_errors"] = ()
        return dims, {"check": np.array(self.names, dtype=str)}

    def _run_target(self, seed: int) -> tuple[xr.Dataset, list[dict]]:
        cfg = {**self.target_cfg, "seed": int(seed)}
        if self.scratch is None:
            with tempfile.TemporaryDirectory(prefix="simkit-calibrate-") as d:
                res = run_study(self.target, cfg, Path(d) / f"{self.target.name}-seed{seed}.nc", progress=False,
                                write=False, quiet=True)
        else:
            out = Path(self.scratch) / f"{self.target.name}-seed{seed}.nc"
            # checks use the returned dataset; an interruption is reported once, by calibrate's caller
            res = run_study(self.target, cfg, out, progress=False, write=False, quiet=True)
        if not res.completed:
            raise KeyboardInterrupt
        self._resumed += int(res.dataset.attrs["resumed_tasks"])
        return res.dataset, res.errors

    def nested_resumed(self) -> int:
        return self._resumed

    def peak_memory(self, cfg):
        return self.target.peak_memory({**self.target_cfg, "seed": int(cfg["seed"])})

    def generate(self, cell, cfg, prep, rng):
        seed = int(cell["seed"])
        ds, errors = self._run_target(seed)
        rows = seed_rows(self.target, ds)
        if self.alternative is not None:
            alt = _resummarise(self.target, ds, {**self.target_cfg, "seed": seed}, self.alternative)
            rows += seed_rows(self.target, alt, prefix="power:")
        names = tuple(r["check"] for r in rows)
        if self.names is not None and names != self.names:
            raise ValueError(f"seed {seed} gives other tests than the first seed: {', '.join(names)} "
                             f"(first seed: {', '.join(self.names)})")
        return {"statistic": np.array([r["statistic"] for r in rows], dtype=float),
                "reject": np.array([r["reject"] for r in rows], dtype=float),
                "stated": np.array([r["stated"] for r in rows], dtype=float),
                "kind": np.array([KINDS.index(r["kind"]) for r in rows], dtype=float),
                "index": np.array([r["index"] for r in rows], dtype=float),
                "target_errors": np.array(float(len(errors))),
                "target_error_message": np.array(error_text(errors)),
                # not assembled (block_dims): read back by calibrate() to fix the check dimension
                "names": np.array(names, dtype=str),
                "claims": np.array([r["claim"] for r in rows], dtype=str)}

    def summarise(self, raw, cfg) -> xr.Dataset:
        names = list(self.names)
        stat = raw["raw_statistic"].values[:, 0, :]
        reject = raw["raw_reject"].values[:, 0, :]
        stated = raw["raw_stated"].values[:, 0, :]
        done = np.all(np.isfinite(raw["raw_kind"].values[:, 0, :]), axis=1)  # seeds whose task finished
        if not done.any():
            raise RuntimeError("no seed of the calibration finished; see attrs['errors']")
        first = int(np.flatnonzero(done)[0])
        kind = [KINDS[int(x)] for x in raw["raw_kind"].values[first, 0, :]]
        index = raw["raw_index"].values[first, 0, :].astype(int)
        claims = [self.target.checks[j].claim for j in index]
        return calibration_dataset(names, stat, reject, stated, kind, claims, index, raw["seed"].values,
                                   raw["raw_target_errors"].values[:, 0], raw["cell_error"], raw["cell_key"], done,
                                   target_error_message=raw["raw_target_error_message"].values[:, 0])

    def target_protocols(self) -> dict[str, str]:
        """The protocol hashes the calibrated dataset records (its configuration at its own seed)."""
        return target_protocols(self.target, {**self.target_cfg, "seed": self.target_seed})

    def attrs(self, cfg):
        return {"target_study": self.target.name, "target_config": canonical(self.target_cfg),
                "target_protocols": canonical(self.target_protocols()),
                "first_seed": int(cfg["seed"]), "n_seeds": len(self.seeds),
                "seeds": _seed_text(self.seeds),
                "alternative": "" if self.alternative is None else self.alternative.name,
                "alternative_description": "" if self.alternative is None else self.alternative.description,
                "confidence": CONFIDENCE,
                "command": f"simkit calibrate {self.target.name} --seeds {len(self.seeds)} --first-seed {cfg['seed']}"
                           f"{' --quick' if self.quick else ''}"
                           f"{'' if self.alternative is None else ' --alternative ' + self.alternative.name}"}

    def report_sections(self, doc, ds):
        from simkit.report.calibration import calibration_sections
        calibration_sections(doc, ds)



def _rates(stat: np.ndarray, reject: np.ndarray, stated: np.ndarray, kind: Sequence[str]) -> tuple[dict, np.ndarray,
                                                                                                     np.ndarray]:
    """Per-check summaries over the finished seeds (rows of the arrays): nominal and empirical rates,
    Clopper--Pearson limits, binomial and KS p-values; and the numbers of decided and rejecting seeds."""
    n = len(kind)
    out = {k: np.full(n, np.nan) for k in ("nominal_rate", "empirical_rate", "empirical_rate_low",
                                           "empirical_rate_high", "binom_pvalue", "ks_pvalue")}
    n_valid, n_reject = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    for i in range(n):
        s = stated[:, i]
        if s.size and np.all(np.isfinite(s)):  # the common value, or the mean where it varies by seed
            out["nominal_rate"][i] = float(s[0]) if np.all(s == s[0]) else float(np.mean(s))
        r = reject[:, i]
        r = r[np.isfinite(r)]
        n_valid[i], n_reject[i] = r.size, int(r.sum())
        if r.size:
            out["empirical_rate"][i] = n_reject[i] / n_valid[i]
            out["empirical_rate_low"][i], out["empirical_rate_high"][i] = clopper_pearson(n_reject[i], n_valid[i])
            if np.isfinite(out["nominal_rate"][i]):
                out["binom_pvalue"][i] = stats.binomtest(
                    int(n_reject[i]), int(n_valid[i]), out["nominal_rate"][i],
                    alternative="greater" if kind[i] == "bound-test" else "two-sided").pvalue
        p = stat[:, i]
        p = p[np.isfinite(p)]
        if kind[i] in REFERENCES and p.size:  # one-sided for a bound: only too many small p-values refute it
            out["ks_pvalue"][i] = stats.kstest(p, "uniform", alternative="greater" if kind[i] == "bound-test"
                                               else "two-sided", method="exact" if p.size <= 10000 else "asymp").pvalue
    return out, n_valid, n_reject


def calibration_dataset(names, stat, reject, stated, kind, claims, index, seeds, target_errors, cell_error,
                        cell_key, done, *, target_error_message) -> xr.Dataset:
    """The calibration dataset's variables (no global attributes) from the per-seed rows (``seed`` x
    ``check``): ``done`` marks the seeds whose task finished, over which the rates are computed."""
    done = np.asarray(done, dtype=bool)
    stat, reject, stated = (np.asarray(a, dtype=float) for a in (stat, reject, stated))
    out, n_valid, n_reject = _rates(stat[done], reject[done], stated[done], kind)
    ref = [REFERENCES.get(k, "none") for k in kind]
    ds = xr.Dataset(
        {"statistic": (SC, stat), "reject": (SC, reject), "stated_rate": (SC, stated),
         "target_errors": (SE, np.asarray(target_errors)),
         "target_error_message": (SE, np.asarray(target_error_message, dtype=str)),
         "check_kind": (C, np.array(kind, dtype=str)), "check_claim": (C, np.array(claims, dtype=str)),
         "check_index": (C, index.astype(np.int64)), "check_reference": (C, np.array(ref, dtype=str)),
         "n_valid": (C, n_valid), "n_missing": (C, int(done.sum()) - n_valid), "n_reject": (C, n_reject),
         **{k: (C, v) for k, v in out.items()},
         "cell_error": cell_error, "cell_key": cell_key},
        coords={"seed": seeds, "check": np.array(names, dtype=str)})
    return ds


def clopper_pearson(k: int, n: int, level: float = CONFIDENCE) -> tuple[float, float]:
    """Exact (Clopper--Pearson) interval for a binomial proportion: Beta quantiles, 0 and 1 at the edges."""
    if n <= 0:
        return np.nan, np.nan
    a = (1.0 - level) / 2
    low = 0.0 if k == 0 else float(stats.beta.ppf(a, k, n - k + 1))
    high = 1.0 if k == n else float(stats.beta.isf(a, k + 1, n - k))
    return low, high


def _default_out(study: Study) -> Path:
    return Path("data") / "calibration" / f"{study.name}.nc"


def _first_names(meta: Calibration, cfg: dict, out: Path, executor) -> tuple[tuple[str, ...], float, int]:
    """The check dimension, from the first seed's result: read from the checkpoint, or run it first
    (as a task of ``meta`` through ``executor``, saved to the same checkpoint). Also the seconds and
    the number of tasks (0 or 1) this took when it ran here, for the run's wall time."""
    t0 = time.perf_counter()
    ran = 0
    cell = {"seed": meta.seeds[0]}
    name = task_name(meta.name, cell, 1, 0)
    ckpt = Checkpoint(out, meta.name, cfg)
    result = ckpt.load(name)
    if result is None:
        with RunLock(out):  # OutputBusy while another process runs this output
            note = ckpt.open()  # a damaged manifest is rebuilt from the task files
            if note:
                print(f"simkit: {note}", file=sys.stderr)
            result = ckpt.load(name)
            if result is None:
                for _, result, exc in executor.run([(("block", 0, 0), (meta, cfg, cell, 1, 0, {}), None)],
                                                   execute_task):
                    if exc is not None:
                        raise RuntimeError(f"the first seed ({cell['seed']}) of {meta.name} failed, so its "
                                           f"tests are unknown: {type(exc).__name__}: {exc}") from exc
                ckpt.save(name, result)
                ran = 1
    return tuple(str(s) for s in np.asarray(result["names"])), (time.perf_counter() - t0) if ran else 0.0, ran


def calibrate(study: Study | str, *, seeds: int, first_seed: int = 1, quick: bool = True,
              overrides: dict[str, Any] | None = None, out: str | os.PathLike | None = None, executor=None,
              progress: bool = True, alternative: str | Alternative | None = None,
              keep_checkpoint: bool = False, stop_after: int | None = None) -> xr.Dataset:
    """Run ``study`` at ``seeds`` independent seeds and write the calibration dataset.

    Parameters
    ----------
    study : Study or str
        The study (or its registered name).
    seeds : int
        Number of seeds, >= 1: ``first_seed, ..., first_seed + seeds - 1``.
    first_seed : int
        The first seed (>= 0).
    quick : bool
        The study's quick design (default) or its full one.
    overrides : dict, optional
        Design parameters (``--set``), validated by :func:`simkit.runner.resolve_config`.
    out : path, optional
        Dataset path, default ``data/calibration/<study>.nc``.
    executor : None, executor, scheduler address or ``distributed.Client``
        Where the seeds run (one task per seed).
    progress : bool
        Progress bar over the seeds' tasks.
    alternative : str or Alternative, optional
        Also evaluate every check under this alternative (:data:`ALTERNATIVES`), giving power rows.
    keep_checkpoint : bool
        Keep the per-seed checkpoint after writing (to extend the run with more seeds later).
    stop_after : int, optional
        Stop as if interrupted after this many new tasks (two per seed: an empty preparation and the
        seed); for tests.

    Returns
    -------
    xr.Dataset
        Dimensions ``seed`` and ``check`` (see :data:`SCHEMA` and the module docstring).

    Raises
    ------
    ValueError
        Bad arguments (named), before anything runs.
    KeyboardInterrupt
        Interrupted (or ``stop_after``): every finished seed is kept; the same call resumes.
    """
    target = get_study(study) if isinstance(study, str) else study
    if not isinstance(target, Study):
        raise ValueError(f"'study' must be a Study or a study name, got {study!r}")
    for name, value, low in (("seeds", seeds, 1), ("first_seed", first_seed, 0)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
            raise ValueError(f"'{name}' must be an integer >= {low}, got {value!r}")
    if int(first_seed) + int(seeds) > 2**63:
        raise ValueError(f"'first_seed' + 'seeds' must be <= 2**63, got {first_seed} + {seeds}")
    if isinstance(alternative, str):
        if alternative not in ALTERNATIVES:
            raise ValueError(f"'alternative' must be one of {', '.join(ALTERNATIVES)}, got {alternative!r}")
        alternative = ALTERNATIVES[alternative]
    if alternative is not None:
        alternative.check_study(target)
    tcfg = resolve_config(target, overrides, quick=quick, seed=int(first_seed))
    out = Path(out) if out is not None else _default_out(target)
    check_writable("--out", out)
    owned = executor is None or not hasattr(executor, "run")
    ex = make_executor(executor)
    try:
        scratch = out.parent / f".{out.name}.seeds" if isinstance(ex, InProcessExecutor) else None
        meta = Calibration(target, tcfg, range(int(first_seed), int(first_seed) + int(seeds)),
                           alternative=alternative, scratch=scratch, quick=quick)
        cfg = meta.config(first_seed)
        if isinstance(ex, InProcessExecutor):
            check_memory(meta, cfg)  # before the first seed runs: the target's largest task must fit
        meta.names, first_s, first_n = _first_names(meta, cfg, out, ex)
        res = run_study(meta, cfg, out, executor=ex, progress=progress, keep_checkpoint=keep_checkpoint,
                        stop_after=stop_after, prior=(first_s, first_n), quiet=True)  # the caller says it
    finally:
        if owned:
            ex.close()
    if not res.completed:
        raise KeyboardInterrupt
    if scratch is not None and scratch.is_dir() and not any(scratch.iterdir()):
        shutil.rmtree(scratch, ignore_errors=True)
    return res.dataset


#: per-seed variables of a calibration dataset (combined by :func:`combine`)
_SEED_VARS = ("statistic", "reject", "stated_rate", "target_errors", "cell_error", "cell_key")
#: per-check variables that must agree between the parts of a combined calibration
_CHECK_VARS = ("check_kind", "check_claim", "check_index")


#: largest relative difference allowed between the rows of a seed present in two parts of a
#: combination: a seed reruns bit-identically on one machine, but another CPU's libm and SIMD paths
#: change the last bits of a floating-point result (seen: 1e-12 relative between two machines);
#: the decisions (reject), errors and task seeds must be identical
OVERLAP_RTOL = 1e-9


def _seed_difference(a: xr.Dataset, b: xr.Dataset) -> float | None:
    """Largest relative difference between two rows of one seed; None when they differ in a decision,
    a NaN position, an error or a task seed (which no rounding explains)."""
    for v in ("reject", "target_errors", "cell_error", "cell_key"):
        if not np.array_equal(a[v].values, b[v].values, equal_nan=a[v].dtype.kind == "f"):
            return None
    worst = 0.0
    for v in ("statistic", "stated_rate"):
        x, y = a[v].values, b[v].values
        if not np.array_equal(np.isnan(x), np.isnan(y)):
            return None
        ok = ~np.isnan(x)
        x, y = x[ok], y[ok]
        fin = np.isfinite(x) & np.isfinite(y)
        if not np.array_equal(x[~fin], y[~fin]):
            return None
        den = np.maximum(np.abs(x[fin]), np.abs(y[fin]))  # infinities must match exactly (above)
        rel = np.abs(x[fin] - y[fin]) / np.where(den > 0, den, 1.0)
        worst = max(worst, float(rel.max()) if rel.size else 0.0)
    return worst


def _error_message(row: xr.Dataset) -> str:
    """A seed's target_error_message; 'not recorded' where its part predates the variable and a task failed."""
    if "target_error_message" in row:
        return str(row["target_error_message"].values)
    return "not recorded" if float(row["target_errors"].values) > 0 else ""


def _seed_text(seeds) -> str:
    seeds = np.asarray(seeds, dtype=np.int64)
    if seeds.size and np.array_equal(seeds, np.arange(seeds[0], seeds[0] + seeds.size)):
        return f"{seeds[0]}..{seeds[-1]}"
    return " ".join(str(s) for s in seeds)


def _meta_config(ds: xr.Dataset) -> dict:
    cfg = json.loads(str(ds.attrs.get("config", "{}")))
    return {k: v for k, v in cfg.items() if k != "seed"}


def combine(study: Study | str, parts: Sequence[str | os.PathLike], *, out: str | os.PathLike | None = None,
            write: bool = True) -> xr.Dataset:
    """Combine finished calibrations of one design at different seeds into one dataset.

    A calibration started at a later first seed (``--first-seed``) is another meta-run with its own
    checkpoint; its seeds are still exactly ``simkit run STUDY --seed S``. ``combine`` takes the union
    of the parts' seeds and recomputes every per-check summary (rates, intervals, binomial and KS
    p-values) over it with the same code as :func:`calibrate`. The parts must have the same target
    study, target configuration, design and alternative, and the same check rows; a seed present in
    several parts must have the same rows in each (so overlapping seeds are a reproducibility
    check across the parts' code versions and machines: the decisions must be identical and the numbers
    agree to :data:`OVERLAP_RTOL`; the first part's rows are kept). Provenance: ``combined_from`` lists every part (file,
    seeds, git commit, created, wall time); ``wall_time_s`` and ``resumed_tasks`` are their sums.

    Raises
    ------
    ValueError
        Fewer than two parts, a part that is not a calibration of ``study``, parts of different designs
        or checks, or an overlapping seed whose rows differ (the message names the files and the seed).
    """
    target = get_study(study) if isinstance(study, str) else study
    if len(parts) < 2:
        raise ValueError(f"'combine' needs at least two calibration datasets, got {len(parts)}")
    dss = []
    for p in parts:
        ds = read_dataset(p)
        if ds.attrs.get("study") != f"calibrate-{target.name}":
            raise ValueError(f"'combine': '{p}' is not a calibration of {target.name} "
                             f"(study {ds.attrs.get('study')!r})")
        dss.append((Path(p), ds))
    (p0, d0) = dss[0]
    for p, ds in dss[1:]:
        if _meta_config(ds) != _meta_config(d0):
            raise ValueError(f"'combine': '{p}' and '{p0}' are calibrations of different designs "
                             f"(configuration without the seed differs)")
        if ds.attrs.get("target_protocols") != d0.attrs.get("target_protocols"):
            raise ValueError(f"'combine': '{p}' and '{p0}' are calibrations under different protocols "
                             f"(target_protocols differ)")
        if not np.array_equal(ds["check"].values, d0["check"].values) or not all(
                np.array_equal(ds[v].values, d0[v].values) for v in _CHECK_VARS):
            raise ValueError(f"'combine': '{p}' and '{p0}' have different check rows")
    rows: dict[int, tuple[Path, xr.Dataset]] = {}
    overlap, worst = [], 0.0
    for p, ds in dss:
        for s in ds["seed"].values.tolist():
            if s not in rows:
                rows[s] = (p, ds)
                continue
            q, other = rows[s]
            diff = _seed_difference(other.sel(seed=s), ds.sel(seed=s))
            if diff is None or diff > OVERLAP_RTOL:
                raise ValueError(f"'combine': seed {s} differs between '{q}' and '{p}' (not reproduced: "
                                 + ("another decision, error or task seed" if diff is None else
                                    f"relative difference {diff:.3g} > {OVERLAP_RTOL:g}") + ")")
            overlap.append(int(s))
            worst = max(worst, diff)
    seeds = np.array(sorted(rows), dtype=np.int64)
    per = {v: np.stack([rows[s][1][v].sel(seed=s).values for s in seeds]) for v in _SEED_VARS}
    per["target_error_message"] = np.array([_error_message(rows[s][1].sel(seed=s)) for s in seeds], dtype=str)
    done = per["cell_error"] == ""
    kind = [str(x) for x in d0["check_kind"].values]
    res = calibration_dataset(d0["check"].values.astype(str), per["statistic"], per["reject"], per["stated_rate"],
                              kind, d0["check_claim"].values.astype(str), d0["check_index"].values, seeds,
                              per["target_errors"], (("seed",), per["cell_error"]),
                              (tuple(d0["cell_key"].dims), per["cell_key"]), done,
                              target_error_message=per["target_error_message"])
    meta = Calibration(target, json.loads(str(d0.attrs["target_config"])), seeds.tolist(), quick=_meta_config(d0)["quick"])
    res = apply_schema(res, meta.schema, meta.cell_dim)
    first = min(dss, key=lambda x: int(x[1]["seed"].values.min()))[1]
    attrs = dict(first.attrs)
    commits = sorted({str(ds.attrs.get("git_commit", "?")) for _, ds in dss})
    names = " ".join(p.name for p, _ in dss)
    attrs.update({
        "n_seeds": int(seeds.size), "first_seed": int(seeds[0]),
        "seeds": _seed_text(seeds),
        "command": f"simkit calibrate {target.name} --combine {names}",
        "git_commit": commits[0] if len(commits) == 1 else " ".join(commits),
        "history": "\n".join(str(ds.attrs.get("history", "")) for _, ds in dss)
        + f"\n{_dt.datetime.now(_dt.timezone.utc).isoformat(timespec='seconds')} simkit calibrate {target.name} "
          f"--combine {names} (git {git_commit()})",
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "wall_time_s": round(sum(float(ds.attrs.get("wall_time_s", 0.0)) for _, ds in dss), 3),
        "resumed_tasks": int(sum(int(ds.attrs.get("resumed_tasks", 0)) for _, ds in dss)),
        "n_errors": int(sum(int(ds.attrs.get("n_errors", 0)) for _, ds in dss)),
        "errors": canonical([e for _, ds in dss for e in json.loads(str(ds.attrs.get("errors", "[]")))]),
        "config": canonical({**json.loads(str(first.attrs["config"])), "seed": int(seeds[0])}),
        # the parts agree on it; where they recorded none (a study that records its protocol only at the
        # dataset's own seed, computed at no seed), the protocols of the calibrated dataset's configuration
        "target_protocols": canonical(json.loads(str(d0.attrs.get("target_protocols", "{}")))
                                      or meta.target_protocols()),
        "overlap_seeds": _seed_text(overlap) if overlap else "",
        "overlap_max_relative_difference": float(worst),
        "combined_from": canonical([{"file": p.name, "seeds": _seed_text(ds["seed"].values),
                                     "git_commit": str(ds.attrs.get("git_commit", "")),
                                     "created": str(ds.attrs.get("created", "")),
                                     "wall_time_s": float(ds.attrs.get("wall_time_s", np.nan))} for p, ds in dss]),
    })
    res.attrs = attrs
    if write:
        dest = Path(out) if out is not None else _default_out(target)
        check_writable("--out", dest)
        write_dataset(res, dest)
    return res


def protocol_hashes(attrs: dict) -> dict[str, str]:
    """The SHA-256 of each protocol named in a study's or dataset's attributes (its ``*_sha256`` ones)."""
    return {k: str(v) for k, v in attrs.items() if k.endswith("_sha256")}


def target_protocols(study: Study, cfg: dict) -> dict[str, str]:
    """The protocol hashes of the study's rules (:func:`protocol_hashes`): a calibration counts for a dataset
    only where they agree, since a protocol fixes the rule the rates belong to."""
    return protocol_hashes(study.attrs(cfg))


def calibration_path(study_name: str, directory: str | os.PathLike = Path("data") / "calibration", *,
                     full: bool = False) -> Path | None:
    """The calibration dataset of a design: ``<study>_full.nc`` (full design) or ``<study>.nc`` (quick);
    for the full design, the quick one when no full calibration exists. None when there is neither."""
    names = [f"{study_name}_full.nc", f"{study_name}.nc"] if full else [f"{study_name}.nc"]
    for name in names:
        if (Path(directory) / name).exists():
            return Path(directory) / name
    return None


def calibration_rates(study_name: str, directory: str | os.PathLike = Path("data") / "calibration", *,
                      full: bool = False) -> dict:
    """Empirical false-failure rates of a study's checks from its calibration dataset
    (:func:`calibration_path`: ``<directory>/<study>.nc``, or ``<study>_full.nc`` for ``full``).

    Returns ``{check index: {...}, claim: {...}}`` with ``rate``, ``low``, ``high`` (Clopper--Pearson
    95%) and ``n`` (seeds): per check from its verdict row, per claim from the seeds on which any of
    the claim's check verdicts failed (the claim's combined verdict); and ``"source"``, the file name
    (so a full-design row calibrated only on the quick design says so), ``"design"`` (``quick`` or
    ``full``: the calibrated design), ``"target_config"`` and ``"target_protocols"`` (the calibrated
    configuration and protocol hashes) and per check ``stated``, the stated rate *at the calibrated
    design* (it can differ from the full design's: a power-based rate depends on the design's
    standard errors) and ``rejects``, its per-seed rejections (1, 0, NaN: for the union over a set of
    checks). Empty without a dataset.
    """
    path = calibration_path(study_name, directory, full=full)
    if path is None:
        return {}
    ds = read_dataset(path)
    quick = bool(json.loads(str(ds.attrs.get("config", "{}"))).get("quick", False))
    out: dict = {"source": path.name, "design": "quick" if quick else "full",
                 "target_config": json.loads(str(ds.attrs.get("target_config", "{}"))),
                 "target_protocols": json.loads(str(ds.attrs.get("target_protocols", "{}")))}
    rows = [i for i in range(ds.sizes["check"]) if str(ds["check_kind"].values[i]) == "verdict"]
    for i in rows:
        out[int(ds["check_index"].values[i])] = {
            "rate": float(ds["empirical_rate"].values[i]), "low": float(ds["empirical_rate_low"].values[i]),
            "high": float(ds["empirical_rate_high"].values[i]), "n": int(ds["n_valid"].values[i]),
            "stated": float(ds["nominal_rate"].values[i]), "rejects": ds["reject"].values[:, i].copy()}
    for claim in sorted({str(ds["check_claim"].values[i]) for i in rows}):
        rate, low, high, n = union_rejection_rate(
            ds["reject"].values[:, [i for i in rows if str(ds["check_claim"].values[i]) == claim]])
        out[claim] = {"rate": rate, "low": low, "high": high, "n": n}
    return out


def union_rejection_rate(rejects: np.ndarray) -> tuple[float, float, float, int]:
    """Rate at which any of a set of checks rejected: ``rejects`` is (seed, check) of 1, 0 or NaN (no
    decision); over the seeds on which every check decided. Returns ``(rate, low, high, n)``, the
    Clopper--Pearson 95% limits, and NaN rate when no seed qualifies."""
    m = np.asarray(rejects, dtype=float).reshape(len(rejects), -1)
    ok = np.all(np.isfinite(m), axis=1)
    k, n = int(np.sum(np.any(m[ok] == 1.0, axis=1))), int(ok.sum())
    low, high = clopper_pearson(k, n)
    return (k / n if n else np.nan), low, high, n
