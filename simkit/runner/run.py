"""Running a study: tasks, checkpoints, assembly of the raw dataset, the schema, and the file.

For every cell the runner runs one ``prepare`` task (cell constants: exact values,
control-variate coefficients from a pilot) — or, for a study that splits it
(``prepare_parts(cell, cfg) > 0``), that many ``prepare_part`` tasks and one task that combines
them — and ``n_blocks`` ``generate`` tasks (independent replicate blocks), saving each as it finishes; then it assembles the raw per-block results,
calls the study's ``summarise``, applies the declared schema (CF attributes; undeclared variables
are refused) and writes one CF-1.11 netCDF file atomically.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from simkit.runner._compiling import CompileNote
from simkit.runner.executors import DependencyFailed, Executor, ExecutorLost, InProcessExecutor, SummaryFailed
from simkit.runner.memory import check_memory
from simkit.runner.params import resolve_config
from simkit.runner.provenance import changed_files, diff_sha256, git_commit, platform_text, versions
from simkit.runner.seeds import SEED_SCHEME, canonical, cell_key, task_name, task_seed
from simkit.runner.storage import Checkpoint, RunLock, WriteFailed, check_writable, write_dataset
from simkit.runner.study import Study, UndeclaredVariable, Var, get_study

__all__ = ["RunResult", "run_study", "execute_task", "make_executor", "summarise_dataset", "apply_schema", "ENGINE_SCHEMA",
           "dataset_attrs", "check_dataset"]

#: variables every study's dataset has, declared by the runner
ENGINE_SCHEMA = {
    "block": Var(("block",), "replicate block", "1", "independent replicate block (its own negatives and anchors)"),
    "cell_error": Var((None,), "error raised by a task of this cell (empty if none)", "1",
                      "stage, block and exception; the seed and spawn key are in attrs['errors']"),
    "cell_key": Var((None, "key_word"), "cell part of the seed spawn key", "1",
                    "SeedSequence(seed, spawn_key=(*cell_key, stage, block)); SHA-256 of study name and cell"),
}


@dataclasses.dataclass
class RunResult:
    """What :func:`run_study` returns."""

    dataset: xr.Dataset | None
    path: Path
    completed: bool
    n_tasks: int
    n_done: int
    errors: list[dict]
    wall_time_s: float


def make_executor(executor=None) -> Executor:
    """An executor from ``None`` (in-process), an executor, a Dask scheduler address or a
    ``distributed.Client``. A bad address raises ValueError before anything is written."""
    if executor is None:
        return InProcessExecutor()
    if hasattr(executor, "run") and hasattr(executor, "close") and hasattr(executor, "n_workers"):
        return executor
    from simkit.runner.dask import DaskExecutor
    return DaskExecutor(executor)


#: stage of a part of a split preparation (its seed's stage word; ``block`` is the part index)
PART_STAGE = 2
#: the task that combines a cell's preparation parts (no seed of its own)
COMBINE_STAGE = 3


def execute_task(study: Study | str, cfg: dict, cell: dict, stage: int, block: int, prep) -> dict:
    """Run one task of ``study`` (a Study, pickled to Dask workers, or an installed study's name):
    stage 0 prepare, 1 block ``block`` (``prep`` the cell's preparation), 2 preparation part ``block``,
    3 the combination of a cell's parts (``prep`` the list of their results)."""
    if isinstance(study, str):
        study = get_study(study)
    if stage == COMBINE_STAGE:  # no randomness: a function of the parts (``prep``, in part order)
        return study.combine_parts(cell, cfg, list(prep))
    rng = np.random.default_rng(task_seed(cfg["seed"], study.name, cell, stage, block))
    if stage == 0:
        return study.prepare(cell, cfg, rng)
    if stage == PART_STAGE:
        return study.prepare_part(cell, cfg, block, rng)
    return study.generate(cell, cfg, prep or {}, rng)


def apply_schema(ds: xr.Dataset, schema: dict[str, Var], cell_dim: str) -> xr.Dataset:
    """Give every variable and coordinate its declared attributes; UndeclaredVariable otherwise.

    A declared dimension ``None`` stands for the study's cell dimension.
    """
    full = {**{k: v.like(tuple(cell_dim if d is None else d for d in v.dims)) for k, v in ENGINE_SCHEMA.items()},
            **{k: v.like(tuple(cell_dim if d is None else d for d in v.dims)) for k, v in schema.items()}}
    names = list(ds.data_vars) + list(ds.coords)
    missing = [n for n in names if n not in full]
    if missing:
        raise UndeclaredVariable(f"variables not declared in the study's schema: {', '.join(sorted(missing))}")
    wrong = [f"{n} {ds[n].dims} (declared {full[n].dims})" for n in names if tuple(ds[n].dims) != full[n].dims]
    if wrong:
        raise UndeclaredVariable(f"variables with other dimensions than declared: {'; '.join(wrong)}")
    for n in names:
        ds[n].attrs = full[n].attrs
    return ds


def _names(names, limit: int = 8) -> str:
    names = sorted(names)
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return ", ".join(repr(n) for n in names[:limit]) + more


def check_dataset(study: Study, ds: xr.Dataset, source: str = "the dataset") -> None:
    """ValueError, one line naming ``source``, unless ``ds`` is a dataset of ``study`` (a Study, or any
    object with its ``name``, ``schema``, ``cell_dim`` and ``optional_vars``) as its schema declares
    one: its ``study`` attribute names the study, every variable and coordinate is declared (by the
    study or the runner) with the declared dimensions, and every declared summary is there but those
    in the study's ``optional_vars``. The raw ``raw_*`` and ``prep_*`` variables are not
    required: they are what the tasks returned, which may differ between a design's cells (e.g. a
    constant only a trained encoder has). ``simkit report`` checks this before drawing."""
    named = ds.attrs.get("study")
    if named != study.name:
        raise ValueError(f"{source} is not a {study.name} dataset: its 'study' attribute is {named!r}")
    full = {**{k: v.like(tuple(study.cell_dim if d is None else d for d in v.dims)) for k, v in ENGINE_SCHEMA.items()},
            **{k: v.like(tuple(study.cell_dim if d is None else d for d in v.dims)) for k, v in study.schema.items()}}
    present = set(ds.variables)
    undeclared = present - set(full)
    optional = set(getattr(study, "optional_vars", ()) or ())
    missing = {n for n in full if not n.startswith(("raw_", "prep_"))} - present - optional
    if undeclared or missing:
        what = "; ".join(part for part in (
            f"it lacks {_names(missing)}" if missing else "",
            f"it has {_names(undeclared)}, which the schema does not declare" if undeclared else "") if part)
        raise ValueError(f"{source} does not match the schema of study {study.name!r} (its 'study' attribute): {what}")
    wrong = [f"{n!r} {tuple(ds[n].dims)} (declared {full[n].dims})" for n in sorted(present)
             if tuple(ds[n].dims) != full[n].dims]
    if wrong:
        raise ValueError(f"{source} does not match the schema of study {study.name!r}: other dimensions than declared: "
                         f"{'; '.join(wrong[:4])}{f' and {len(wrong) - 4} more' if len(wrong) > 4 else ''}")


def _merge(raw: xr.Dataset, summary, schema: dict[str, Var], cell_dim: str) -> xr.Dataset:
    if isinstance(summary, xr.Dataset):
        return summary
    ds = raw.copy()
    for name, value in summary.items():
        if name not in schema:
            raise UndeclaredVariable(f"summarise returned {name!r}, which the study's schema does not declare")
        dims = tuple(cell_dim if d is None else d for d in schema[name].dims)
        ds[name] = (dims, np.asarray(value))
    return ds


def summarise_dataset(study: Study, raw: xr.Dataset, cfg: dict) -> xr.Dataset:
    """The study's summaries of a raw dataset, merged into it with the schema applied (no file, no
    global attributes but the study's own): what a run writes, from saved raw blocks."""
    ds = apply_schema(_merge(raw, study.summarise(raw, cfg), study.schema, study.cell_dim), study.schema,
                      study.cell_dim)
    ds.attrs.update(study.attrs(cfg))
    return ds


def dataset_attrs(study: Study, cfg: dict, *, wall_time_s: float, executor, resumed: int, errors: list[dict]) -> dict:
    """Global attributes: CF-1.11 (Conventions, title, history, source, references) and provenance."""
    created = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    vers = versions()
    commit = git_commit()
    return {
        "Conventions": "CF-1.11",
        "title": study.title,
        "history": f"{created} simkit run {study.name} (simkit {vers['simkit']}, git {commit}, seed {cfg['seed']}"
                   f"{', quick design' if cfg.get('quick') else ''})",
        "source": f"simkit {vers['simkit']} Monte Carlo study '{study.name}'",
        "references": study.references,
        "institution": "simkit",
        "study": study.name,
        "claim": study.claim,
        "simkit_version": vers["simkit"],
        "git_commit": commit,
        "seed": int(cfg["seed"]),
        "seed_scheme": SEED_SCHEME,
        "config": canonical(cfg),
        "package_versions": canonical(vers),
        "platform": platform_text(),
        "created": created,
        "wall_time_s": round(wall_time_s, 3),
        "engine": executor.name,
        "n_workers": executor.n_workers,
        "resumed_tasks": resumed,
        "n_errors": len(errors),
        "errors": canonical([{k: v for k, v in e.items() if k != "traceback"} for e in errors]),
        "ademp": canonical(study.ademp),
        **_dirty_attrs(commit),
    }


def _dirty_attrs(commit: str) -> dict[str, str]:
    """For a run from a modified work tree: which tracked files differ, and the diff's SHA-256."""
    if not commit.endswith("-dirty"):
        return {}
    return {"git_changed_files": canonical(changed_files() or []), "git_diff_sha256": diff_sha256() or "unknown"}


def run_study(study: Study | str, cfg: dict | None = None, out: str | os.PathLike | None = None, *,
              executor=None, scheduler=None, progress: bool = True, keep_checkpoint: bool = False,
              stop_after: int | None = None, write: bool = True, prior: tuple[float, int] = (0.0, 0),
              quiet: bool = False) -> RunResult:
    """Run (or resume) a study and write its dataset.

    Parameters
    ----------
    study : Study or str
        The study or its registered name.
    cfg : dict, optional
        From :func:`resolve_config` (defaults if omitted).
    out : path, optional
        Output netCDF path (default ``data/<name>.nc``).
    executor : executor, str or distributed.Client, optional
        Where tasks run: None (in-process), an executor (:mod:`simkit.runner.executors`), the address
        of a Dask distributed scheduler, or a client of one (left open). An unusable address raises
        ValueError before anything is written. ``scheduler`` is an alias. In-process, a design whose
        largest task the study estimates (:meth:`Study.peak_memory`) to need more memory than the
        process may use raises :class:`~simkit.runner.memory.InsufficientMemory` before any task.
    progress : bool
        Show a progress bar on stderr.
    keep_checkpoint : bool
        Keep the checkpoint directory after writing the dataset.
    stop_after : int, optional
        Stop (as if interrupted) after this many newly finished tasks; for tests and demos.
    write : bool
        Write the dataset to ``out`` (default). ``False`` returns it without writing (``out`` still
        names the lock and the checkpoint): for callers that only evaluate it, e.g. ``simkit calibrate``.
    prior : (seconds, tasks)
        Work the caller did in this invocation through the same checkpoint before this call (``simkit
        calibrate`` runs its first seed first): the seconds are added to ``wall_time_s`` and the tasks are
        not counted as resumed from an earlier invocation.
    quiet : bool
        No line on stderr when interrupted: for a caller that reports it (``simkit calibrate`` runs a
        seed's study inside a task).
    """
    if isinstance(study, str):
        study = get_study(study)
    if cfg is None:
        cfg = resolve_config(study)
    if executor is None:
        executor = scheduler
    out = Path(out) if out is not None else Path("data") / f"{study.name}.nc"
    check_writable("--out", out)  # before anything runs or is written
    if executor is None or isinstance(executor, InProcessExecutor):  # a cluster's workers have their own memory
        check_memory(study, cfg)  # InsufficientMemory (a ValueError) before any task
    lock = RunLock(out)
    lock.acquire()  # OutputBusy while another process runs the same output
    try:
        return _run_locked(study, cfg, out, executor, progress, keep_checkpoint, stop_after, write, prior, quiet)
    finally:
        lock.release()


def _run_locked(study, cfg, out, executor, progress, keep_checkpoint, stop_after, write=True,
                prior=(0.0, 0), quiet=False) -> RunResult:
    t0 = time.perf_counter() - float(prior[0])
    owned = executor is None or not hasattr(executor, "run")
    cells = study.cells(cfg)
    n_parts = [_n_parts(study, cell, cfg) for cell in cells]  # a bad count fails before anything is written
    executor = make_executor(executor)  # a bad scheduler fails here, before anything is written
    ckpt = Checkpoint(out, study.name, cfg)
    try:
        note = ckpt.open()  # a damaged manifest is rebuilt from the task files
    except BaseException:
        if owned:
            executor.close()
        raise
    if note:
        print(f"simkit: {note}", file=sys.stderr)
    n_blocks = study.n_blocks(cfg)
    preps: dict[int, dict] = {}
    parts: dict[tuple[int, int], dict | None] = {}  # None: done, not loaded (its cell is prepared)
    blocks: dict[tuple[int, int], dict] = {}
    errors: list[dict] = []
    resumed = 0
    for ci, cell in enumerate(cells):
        p = ckpt.load(task_name(study.name, cell, 0, 0))
        if p is not None:
            preps[ci] = p
            resumed += 1
        for j in range(n_parts[ci]):
            r = None if ci in preps else ckpt.load(task_name(study.name, cell, PART_STAGE, j))
            if ci in preps or r is not None:
                parts[(ci, j)] = r
                resumed += 1
        for b in range(n_blocks):
            r = ckpt.load(task_name(study.name, cell, 1, b))
            if r is not None:
                blocks[(ci, b)] = r
                resumed += 1
    n_tasks = len(cells) * (1 + n_blocks) + sum(n_parts)
    bar = None
    if progress:
        from tqdm.auto import tqdm
        bar = tqdm(total=n_tasks, initial=resumed, desc=f"simkit {study.name}", unit="task", file=sys.stderr,
                   dynamic_ncols=True)
    compiling = CompileNote(bar)  # "compiling, once: ..." while Numba compiles (a first run)
    new_done = 0

    def record(kind, ci, b, exc):
        cell = cells[ci]
        seq = task_seed(cfg["seed"], study.name, cell, _STAGES[kind], b)
        errors.append({"cell_index": ci, "cell": cell, "stage": kind, "block": b,
                       "seed": int(cfg["seed"]), "spawn_key": list(seq.spawn_key),
                       "error": f"{type(exc).__name__}: {exc}",
                       "traceback": "".join(traceback.format_exception(exc))[-4000:]})

    try:
        # one task list: every cell's preparation (its parts, then their combination, for a study
        # that splits it) first, as the likely critical path, then the blocks, which depend on their
        # cell's preparation (an executor may start a cell's blocks as soon as that cell is prepared:
        # no barrier across cells)
        todo = []
        for ci, cell in enumerate(cells):
            if ci in preps:
                continue
            if not n_parts[ci]:
                todo.append((("prepare", ci, 0), (study, cfg, cell, 0, 0, None), None))
                continue
            for j in range(n_parts[ci]):
                if (ci, j) not in parts:
                    todo.append((("part", ci, j), (study, cfg, cell, PART_STAGE, j, None), None))
            todo.append((("prepare", ci, 0),
                         (study, cfg, cell, COMBINE_STAGE, 0, [parts.get((ci, j)) for j in range(n_parts[ci])]),
                         [None if (ci, j) in parts else ("part", ci, j) for j in range(n_parts[ci])]))
        for ci, cell in enumerate(cells):
            pkey = ("prepare", ci, 0)
            for b in range(n_blocks):
                if (ci, b) not in blocks:
                    ready = ci in preps
                    todo.append((("block", ci, b), (study, cfg, cell, 1, b, preps[ci] if ready else None),
                                 None if ready else pkey))
        for (kind, ci, b), result, exc in executor.run(todo, execute_task):
            if isinstance(exc, DependencyFailed):
                continue  # the cell's preparation failed and is recorded; its blocks cannot run
            if exc is not None:
                record(kind, ci, b, exc)
            else:
                ckpt.save(task_name(study.name, cells[ci], _STAGES[kind], b), result)
                if kind == "prepare":
                    preps[ci] = result
                elif kind == "part":
                    parts[(ci, b)] = result
                else:
                    blocks[(ci, b)] = result
                new_done += 1
            if bar is not None:
                bar.update(1)
            if stop_after is not None and new_done >= stop_after:
                raise KeyboardInterrupt
    except KeyboardInterrupt:
        if bar is not None:
            bar.close()
            bar = None
        if owned:
            executor.close()
        # the files on disk: a signal landing between a task file's rename (and the sync of its
        # directory) and its bookkeeping here keeps one file more than the dicts count
        done = max(len(preps) + len(parts) + len(blocks), ckpt.count())
        if not quiet:
            print(f"simkit: interrupted; {done}/{n_tasks} tasks are kept in {ckpt.dir}; "
                  f"run the same command again to resume", file=sys.stderr)
        return RunResult(None, out, False, n_tasks, done, errors, time.perf_counter() - t0)
    except (WriteFailed, ExecutorLost) as exc:  # keep every finished task; the same command resumes
        if bar is not None:
            bar.close()
            bar = None
        if owned:
            executor.close()
        done = len(preps) + len(parts) + len(blocks)
        raise type(exc)(f"{exc}; {done}/{n_tasks} finished tasks are kept in {ckpt.dir}; run the same command "
                        "again to resume") from None
    finally:
        compiling.close()
        if bar is not None:
            bar.close()
    if owned:
        executor.close()

    raw = _assemble(study, cfg, cells, preps, blocks, n_blocks, errors)
    try:
        ds = summarise_dataset(study, raw, cfg)
    except Exception as exc:  # noqa: BLE001 - with failed tasks, a summary may lack what it needs
        if not errors:
            raise  # a bug in the study's summary: its traceback is what to read
        first = errors[0]
        done = len(preps) + len(parts) + len(blocks)
        what = " ".join(f"{type(exc).__name__}: {exc}".split())[:160]
        raise SummaryFailed(
            f"the summary of {study.name} failed ({what}) after {len(errors)} failed task(s), the first a "
            f"{first['stage']} of cell {first['cell_index']} ({' '.join(first['error'].split())[:160]}); "
            f"{done}/{n_tasks} finished tasks are kept in {ckpt.dir}; run the same command again to retry "
            "the failed ones") from None
    ds.attrs.update(dataset_attrs(study, cfg, wall_time_s=time.perf_counter() - t0, executor=executor,
                                  resumed=max(resumed - int(prior[1]), 0) + int(study.nested_resumed()),
                                  errors=errors))
    try:
        if write:
            write_dataset(ds, out)
    except WriteFailed as exc:
        raise WriteFailed(f"{exc}; all {n_tasks} tasks are kept in {ckpt.dir}; run the same command again to "
                          "write it") from None
    if not errors and not keep_checkpoint:
        ckpt.remove()
    return RunResult(ds, out, True, n_tasks, len(preps) + len(parts) + len(blocks), errors,
                     float(ds.attrs["wall_time_s"]))


#: checkpoint stage of each task kind (the combination of parts is saved as the cell's preparation)
_STAGES = {"prepare": 0, "block": 1, "part": PART_STAGE}


def _n_parts(study: Study, cell: dict, cfg: dict) -> int:
    n = study.prepare_parts(cell, cfg)
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise ValueError(f"{study.name}.prepare_parts must return an int >= 0, got {n!r}")
    return int(n)


def _assemble(study: Study, cfg: dict, cells: list[dict], preps: dict, blocks: dict, n_blocks: int,
              errors: list[dict]) -> xr.Dataset:
    """Raw dataset: per-block variables ``raw_<name>`` (cell, block, ...) and ``prep_<name>`` (cell, ...)."""
    var_dims, coords = study.block_dims(cfg)
    cdim = study.cell_dim
    n_cells = len(cells)
    data_vars: dict[str, Any] = {}
    for name, dims in var_dims.items():
        shape = tuple(len(coords[d]) for d in dims)
        arr = np.full((n_cells, n_blocks, *shape), np.nan)
        for (ci, b), res in blocks.items():
            arr[ci, b] = np.asarray(res[name], dtype=float).reshape(shape)
        data_vars[f"raw_{name}"] = ((cdim, "block", *dims), arr)
    for name in study.block_text:
        text = np.full((n_cells, n_blocks), "", dtype=object)
        for (ci, b), res in blocks.items():
            text[ci, b] = str(np.asarray(res.get(name, "")))
        data_vars[f"raw_{name}"] = ((cdim, "block"), text.astype(str))
    # per-cell prepared constants: union of keys, NaN where a cell has none
    prep_keys = sorted({k for p in preps.values() for k in p})
    for key in prep_keys:
        sample = next(np.asarray(p[key]) for p in preps.values() if key in p)
        arr = np.full((n_cells, *sample.shape), np.nan)
        for ci, p in preps.items():
            if key in p:
                arr[ci] = np.asarray(p[key], dtype=float)
        dims = (cdim, *[f"{key}_dim{i}" for i in range(sample.ndim)])
        data_vars[f"prep_{key}"] = (dims, arr)
    err = np.array([""] * n_cells, dtype=object)
    for e in errors:
        msg = f"{e['stage']} block {e['block']}: {e['error']}"
        err[e["cell_index"]] = (err[e["cell_index"]] + "; " if err[e["cell_index"]] else "") + msg
    data_vars["cell_error"] = ((cdim,), err.astype(str))
    data_vars["cell_key"] = ((cdim, "key_word"), np.array([cell_key(study.name, c) for c in cells], dtype=np.uint32))
    cell_coords = {key: ((cdim,), np.array([c[key] for c in cells])) for key in cells[0]}
    if cdim not in cells[0]:
        cell_coords[cdim] = np.arange(n_cells)
    return xr.Dataset(data_vars, coords={**cell_coords, "block": np.arange(n_blocks), **coords})
