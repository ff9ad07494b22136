"""The study engine: design grid, seeds, checkpoint/resume, execution, and the netCDF dataset.

A study (SimDesign's Design / Generate / Analyse / Summarise; ADEMP of Morris et al. 2019) declares
its parameters and design cells; the engine runs, for every cell, one ``prepare`` task (cell
constants: exact values, control-variate coefficients from a pilot) and ``n_blocks`` ``generate``
tasks (independent replicate blocks), then assembles the raw per-block results, calls the study's
``summarise`` and writes one netCDF file atomically.

Reproducibility. Each task's randomness comes from
``SeedSequence(entropy=seed, spawn_key=(*cell_key, stage, block))`` where ``cell_key`` is four
32-bit words of the SHA-256 of the cell's coordinates: results depend only on the seed and the
cell, never on worker count, order, chunking, engine or resumption.

Checkpoints. Every finished task is saved at once (``.npz``, written to a temporary file then
renamed) in ``<out>.<config-hash>.partial/``; an interrupted or failed run keeps every finished
task, and running the same command again resumes. A task that raises is recorded (message, seed,
cell coordinates) and the run goes on; its cell's summaries are NaN with the error in the dataset.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import hashlib
import importlib
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

__all__ = [
    "Param",
    "Study",
    "RunResult",
    "run_study",
    "resolve_config",
    "cell_key",
    "task_seed",
    "write_dataset",
    "read_dataset",
    "VOLATILE_ATTRS",
    "DependencyFailed",
    "results_identical",
    "STUDIES",
    "get_study",
]

#: attributes that describe a run rather than its results (excluded when comparing datasets)
VOLATILE_ATTRS = ("created", "wall_time_s", "engine", "n_workers", "resumed_tasks")

#: registered studies: name -> module under ``studies`` (a package beside ``simkit``)
STUDIES = {
    "rate_k": "studies.rate_k",
    "search_ce": "studies.search_ce",
    "temperature": "studies.temperature",
    "asymmetry": "studies.asymmetry",
    "continuity": "studies.continuity",
    "rademacher": "studies.rademacher",
    "generalisation": "studies.generalisation",
}


# ----------------------------------------------------------------------------------------------
# parameters and configuration

@dataclasses.dataclass(frozen=True)
class Param:
    """A study parameter that ``--set NAME=VALUE`` may override.

    ``kind`` is int, float, str or bool; ``low``/``high`` bound numbers (``low_open`` makes the
    lower bound strict); ``choices`` restricts strings; ``quick`` is the ``--quick`` value;
    ``default=None`` means "use each setting's own value" for per-setting overrides.
    """

    name: str
    kind: type
    default: Any
    doc: str
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    choices: tuple | None = None
    quick: Any = None
    power_of_two: bool = False
    multi: bool = False  # a comma-separated list of choices

    def parse(self, text: str) -> Any:
        """Parse a ``--set`` value string and validate it (a non-string goes to :meth:`validate`)."""
        if not isinstance(text, str):
            return self.validate(text)
        raw = text.strip()
        if self.kind is bool:
            low = raw.lower()
            if low in ("1", "true", "yes", "on"):
                return True
            if low in ("0", "false", "no", "off"):
                return False
            raise ValueError(f"'{self.name}' must be true or false, got {_show(text)}")
        if self.kind is int:
            try:
                value = int(raw)
            except ValueError:
                try:
                    f = float(raw)
                except ValueError:
                    raise ValueError(f"'{self.name}' must be an integer, got {_show(text)}") from None
                if not math.isfinite(f) or not f.is_integer():
                    raise ValueError(f"'{self.name}' must be an integer, got {_show(text)}") from None
                value = int(f)
            return self.validate(value)
        if self.kind is float:
            try:
                value = float(raw)
            except ValueError:
                raise ValueError(f"'{self.name}' must be a number, got {_show(text)}") from None
            return self.validate(value)
        return self.validate(raw)

    def validate(self, value: Any) -> Any:
        """Check a value against kind, bounds and choices; return it normalised."""
        if value is None and self.default is None:
            return None
        if self.kind is bool:
            if not isinstance(value, (bool, np.bool_)):
                raise ValueError(f"'{self.name}' must be true or false, got {_show(value)}")
            return bool(value)
        if self.kind in (int, float):
            if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
                raise ValueError(f"'{self.name}' must be {'a number' if self.kind is float else 'an integer'}, "
                                 f"got {_show(value)}")
            if isinstance(value, (int, np.integer)):
                value = int(value)  # exact at any size: float() overflows beyond ~1.8e308
                if self.kind is float:
                    try:
                        value = float(value)
                    except OverflowError:
                        raise ValueError(f"'{self.name}' must be finite, got {_show(value)}") from None
            else:
                if not math.isfinite(float(value)):
                    raise ValueError(f"'{self.name}' must be finite, got {value!r}")
                if self.kind is int:
                    if not float(value).is_integer():
                        raise ValueError(f"'{self.name}' must be an integer, got {value!r}")
                    value = int(value)
                else:
                    value = float(value)
            if self.low is not None:
                if self.low_open and value <= self.low:
                    raise ValueError(f"'{self.name}' must be > {self.low:g}, got {_show(value)}")
                if not self.low_open and value < self.low:
                    raise ValueError(f"'{self.name}' must be >= {self.low:g}, got {_show(value)}")
            if self.high is not None and value > self.high:
                raise ValueError(f"'{self.name}' must be <= {self.high:g}, got {_show(value)}")
            if self.power_of_two and (value < 1 or value & (value - 1)):
                raise ValueError(f"'{self.name}' must be a power of two, got {_show(value)}")
            return value
        if not isinstance(value, str):
            raise ValueError(f"'{self.name}' must be text, got {_show(value)}")
        if self.choices is not None:
            items = [v.strip() for v in value.split(",")] if self.multi else [value]
            bad = [v for v in items if v not in self.choices]
            if bad or not items or items == [""]:
                raise ValueError(f"'{self.name}' must be one or more of {', '.join(self.choices)} "
                                 f"(comma-separated), got {_show(value)}")
            dup = next((v for i, v in enumerate(items) if v in items[:i]), None)
            if dup is not None:  # a repeated cell would share its seeds and checkpoints with the first
                raise ValueError(f"'{self.name}' lists {dup!r} twice, got {_show(value)}")
            return ",".join(items)
        return value


def _show(value: Any, limit: int = 80) -> str:
    """``repr(value)`` for an error message, shortened: always one line, at most ~``limit`` chars."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 256:
        # repr() of an int of more than 4300 digits raises (sys.set_int_max_str_digits)
        return f"an integer of about {int(value.bit_length() * math.log10(2)) + 1} digits"
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit - 20]}...{text[-12:]} ({len(text)} chars)"


def resolve_config(study: Study, overrides: dict[str, Any] | None = None, *, quick: bool = False,
                   seed: int | None = None) -> dict[str, Any]:
    """Defaults, then ``--quick`` values, then overrides (validated); plus the seed."""
    cfg = {name: p.default for name, p in study.params.items()}
    if quick:
        for name, p in study.params.items():
            if p.quick is not None:
                cfg[name] = p.quick
    for name, value in (overrides or {}).items():
        if name not in study.params:
            known = ", ".join(sorted(study.params))
            raise ValueError(f"unknown parameter {_show(name)} for study {study.name}; known: {known}")
        p = study.params[name]
        cfg[name] = p.parse(value) if isinstance(value, str) else p.validate(value)
    if seed is None:
        seed = study.default_seed
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0 or seed >= 2**63:
        raise ValueError(f"'seed' must be an integer in [0, 2**63), got {_show(seed)}")
    cfg["seed"] = int(seed)
    cfg["quick"] = bool(quick)
    study.check_config(cfg)
    return cfg


# ----------------------------------------------------------------------------------------------
# studies

class Study:
    """Base class of a simkit study. Subclasses set the class attributes and implement the stages.

    Stages (all pure functions of their arguments; randomness only from the ``rng`` given):

    * ``cells(cfg) -> list[dict]``: the design, one dict of JSON scalars per cell; the key
      ``cell_dim`` names the cell dimension in the dataset (e.g. ``setting``);
    * ``prepare(cell, cfg, rng) -> dict[str, ndarray]``: per-cell constants;
    * ``generate(cell, cfg, prep, rng) -> dict[str, ndarray]``: one replicate block; shapes fixed
      by ``block_dims(cfg)``;
    * ``summarise(raw, cfg) -> xr.Dataset``: summaries with MCSE from the raw dataset;
    * ``report(ds, path)``: a PDF from the dataset alone.
    """

    name: str = ""
    claim: str = ""
    title: str = ""
    ademp: dict[str, str] = {}
    params: dict[str, Param] = {}
    cell_dim: str = "cell"
    default_seed: int = 20261130

    def check_config(self, cfg: dict) -> None:
        """Cross-parameter checks (raise ValueError naming the parameter)."""

    def n_blocks(self, cfg: dict) -> int:
        return int(cfg["n_blocks"])

    def cells(self, cfg: dict) -> list[dict]:
        raise NotImplementedError

    def block_dims(self, cfg: dict) -> tuple[dict[str, tuple[str, ...]], dict[str, np.ndarray]]:
        """(variable -> dims after (cell, block)), (dim -> coordinate values)."""
        raise NotImplementedError

    def prepare(self, cell: dict, cfg: dict, rng: np.random.Generator) -> dict[str, np.ndarray]:
        return {}

    def generate(self, cell: dict, cfg: dict, prep: dict, rng: np.random.Generator) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def summarise(self, raw: xr.Dataset, cfg: dict) -> xr.Dataset:
        raise NotImplementedError

    def report(self, ds: xr.Dataset, path: str | os.PathLike) -> None:
        raise NotImplementedError

    def summary_text(self, ds: xr.Dataset) -> str:
        return ""

    def report_sections(self, doc, ds: xr.Dataset) -> None:
        """Add this study's pages (all but provenance) to a :class:`simkit.report.ReportDocument`."""
        raise NotImplementedError

    def claim_rows(self, ds: xr.Dataset) -> list[dict]:
        """Checks for ``simkit validate``: dicts with keys claim, statistic, estimate, estimate_mcse,
        false_fail_rate, verdict (pass, fail or error) and detail."""
        return []


def get_study(name: str) -> Study:
    """The registered study called ``name`` (ValueError listing the known ones otherwise)."""
    if not isinstance(name, str) or name not in STUDIES:
        raise ValueError(f"unknown study {name!r}; known studies: {', '.join(sorted(STUDIES))}")
    module = importlib.import_module(STUDIES[name])
    return module.STUDY


# ----------------------------------------------------------------------------------------------
# seeds and tasks

def _canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=float)


def cell_key(cell: dict) -> tuple[int, int, int, int]:
    """Four 32-bit words of SHA-256 of the cell's canonical JSON: the cell's part of every seed."""
    digest = hashlib.sha256(_canonical(cell).encode()).digest()
    return tuple(int.from_bytes(digest[4 * i:4 * i + 4], "little") for i in range(4))


def task_seed(seed: int, cell: dict, stage: int, block: int) -> np.random.SeedSequence:
    """``SeedSequence(seed, spawn_key=(*cell_key(cell), stage, block))``; stage 0 = prepare, 1 = block."""
    return np.random.SeedSequence(entropy=int(seed), spawn_key=(*cell_key(cell), int(stage), int(block)))


def _task_name(cell: dict, stage: int, block: int) -> str:
    h = hashlib.sha256(_canonical(cell).encode()).hexdigest()[:16]
    return f"{h}-prep" if stage == 0 else f"{h}-b{block:05d}"


def execute_task(study_name: str, cfg: dict, cell: dict, stage: int, block: int, prep: dict | None) -> dict:
    """Run one task (picklable entry point, also used by the Dask backend)."""
    study = get_study(study_name)
    rng = np.random.default_rng(task_seed(cfg["seed"], cell, stage, block))
    if stage == 0:
        return study.prepare(cell, cfg, rng)
    return study.generate(cell, cfg, prep or {}, rng)


# ----------------------------------------------------------------------------------------------
# checkpoint store

def _atomic_write_bytes(path: Path, writer: Callable[[str], None], suffix: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix, dir=path.parent)
    os.close(fd)
    try:
        writer(tmp)
        umask = os.umask(0o022)  # mkstemp creates 0600; give the file the usual permissions
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


class Checkpoint:
    """One ``.npz`` file per finished task in a directory keyed by the configuration hash."""

    def __init__(self, out: Path, study: Study, cfg: dict):
        h = hashlib.sha256(_canonical({"study": study.name, "cfg": cfg}).encode()).hexdigest()[:12]
        self.dir = out.parent / f".{out.name}.{h}.partial"
        self.manifest = {"study": study.name, "config": cfg}

    def open(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        mpath = self.dir / "manifest.json"
        if mpath.exists():
            try:
                old = json.loads(mpath.read_text())
            except (OSError, json.JSONDecodeError):
                old = None
            if old != json.loads(_canonical(self.manifest)):
                raise RuntimeError(f"checkpoint directory {self.dir} belongs to another configuration; remove it")
        else:
            _atomic_write_bytes(mpath, lambda p: Path(p).write_text(_canonical(self.manifest)), ".json")

    def load(self, name: str) -> dict | None:
        path = self.dir / f"{name}.npz"
        if not path.exists():
            return None
        try:
            with np.load(path, allow_pickle=False) as z:
                return {k: z[k] for k in z.files}
        except Exception:
            # a corrupt file cannot come from an atomic write; treat the task as not done
            return None

    def save(self, name: str, data: dict) -> None:
        arrays = {k: np.asarray(v) for k, v in data.items()}
        _atomic_write_bytes(self.dir / f"{name}.npz", lambda p: np.savez(p, **arrays), ".npz")

    def remove(self) -> None:
        for f in self.dir.glob("*"):
            f.unlink()
        self.dir.rmdir()


# ----------------------------------------------------------------------------------------------
# provenance

#: repository directories holding outputs, not source (ignored by the "-dirty" mark of git_commit)
OUTPUT_DIRS = ("data", "reports", "benchmarks/results")


def _git_commit() -> str:
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        if out.returncode != 0:
            return "unknown"
        commit = out.stdout.strip()
        # "-dirty" when tracked source differs from the commit; the outputs (datasets, reports,
        # benchmark results) do not count: a study run rewrites them
        dirty = subprocess.run(["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no", "--",
                                ":(top)", *(f":(top,exclude){p}" for p in OUTPUT_DIRS)],
                               capture_output=True, text=True, timeout=10)
        return commit + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _versions() -> dict[str, str]:
    import importlib.metadata as md
    out = {"python": platform.python_version()}
    for pkg in ("simkit", "numpy", "scipy", "numba", "statsmodels", "xarray", "h5netcdf", "matplotlib"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            out[pkg] = "not installed"
    return out


# ----------------------------------------------------------------------------------------------
# datasets

def write_dataset(ds: xr.Dataset, path: str | os.PathLike) -> None:
    """Write netCDF (h5netcdf) atomically: a temporary file in the same directory, then rename."""
    path = Path(path)
    _atomic_write_bytes(path, lambda p: ds.to_netcdf(p, engine="h5netcdf"), ".nc")


def read_dataset(path: str | os.PathLike) -> xr.Dataset:
    """Open a simkit dataset fully into memory; ValueError (naming the file) if it is not one."""
    p = Path(path)
    if not p.exists():
        raise ValueError(f"dataset file '{p}' does not exist")
    try:
        with xr.open_dataset(p, engine="h5netcdf") as ds:
            ds = ds.load()
    except Exception as exc:  # truncated, not HDF5, not netCDF
        raise ValueError(f"'{p}' is not a readable netCDF dataset ({type(exc).__name__})") from None
    if "study" not in ds.attrs or "simkit_version" not in ds.attrs:
        raise ValueError(f"'{p}' is not a simkit dataset (no 'study' attribute)")
    return ds


def results_identical(a: xr.Dataset, b: xr.Dataset) -> bool:
    """True when two datasets agree in every variable, coordinate and non-volatile attribute."""
    a2, b2 = a.copy(), b.copy()
    for d in (a2, b2):
        for key in VOLATILE_ATTRS:
            d.attrs.pop(key, None)
    return a2.identical(b2)


# ----------------------------------------------------------------------------------------------
# running

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


class DependencyFailed(Exception):
    """A task was not run because the task it depends on (its cell's preparation) failed."""


class _Executor:
    """In-process executor: runs tasks one after another (each task uses all cores via Numba).

    ``run(tasks, fn)`` takes ``(key, args, dep)`` triples: when ``dep`` is the key of an earlier
    task, that task's result replaces the last argument. It yields ``(key, result, exception)``.
    """

    name = "in-process"
    n_workers = 1

    def run(self, tasks: list[tuple], fn: Callable) -> Iterable[tuple[Any, Any, BaseException | None]]:
        results: dict = {}
        failed: set = set()
        needed = {t[2] for t in tasks if t[2] is not None}
        for key, args, dep in tasks:
            if dep is not None:
                if dep in failed or dep not in results:
                    failed.add(key)
                    yield key, None, DependencyFailed(str(dep))
                    continue
                args = (*args[:-1], results[dep])
            try:
                result = fn(*args)
            except (KeyboardInterrupt, SystemExit):
                raise
            except Exception as exc:  # recorded, the run goes on
                failed.add(key)
                yield key, None, exc
            else:
                if key in needed:
                    results[key] = result
                yield key, result, None

    def close(self):
        pass


def _make_executor(scheduler: str | None):
    if scheduler is None:
        return _Executor()
    from simkit._dask import DaskExecutor
    return DaskExecutor(scheduler)


def run_study(study: Study | str, cfg: dict | None = None, out: str | os.PathLike | None = None, *,
              scheduler: str | None = None, progress: bool = True, keep_checkpoint: bool = False,
              stop_after: int | None = None) -> RunResult:
    """Run (or resume) a study and write its dataset.

    Parameters
    ----------
    study : Study or str
        The study or its registered name.
    cfg : dict, optional
        From :func:`resolve_config` (defaults if omitted).
    out : path, optional
        Output netCDF path (default ``data/<name>.nc``).
    scheduler : str or distributed.Client, optional
        Address of a Dask distributed scheduler (or a client of one, left open); None runs
        in-process. An unusable address raises ValueError before anything is written.
    progress : bool
        Show a progress bar on stderr.
    keep_checkpoint : bool
        Keep the checkpoint directory after writing the dataset.
    stop_after : int, optional
        Stop (as if interrupted) after this many newly finished tasks; for tests and demos.
    """
    if isinstance(study, str):
        study = get_study(study)
    if cfg is None:
        cfg = resolve_config(study)
    out = Path(out) if out is not None else Path("data") / f"{study.name}.nc"
    t0 = time.perf_counter()
    executor = _make_executor(scheduler)  # a bad scheduler fails here, before anything is written
    ckpt = Checkpoint(out, study, cfg)
    try:
        ckpt.open()
    except BaseException:
        executor.close()
        raise
    cells = study.cells(cfg)
    n_blocks = study.n_blocks(cfg)
    preps: dict[int, dict] = {}
    blocks: dict[tuple[int, int], dict] = {}
    errors: list[dict] = []
    resumed = 0
    for ci, cell in enumerate(cells):
        p = ckpt.load(_task_name(cell, 0, 0))
        if p is not None:
            preps[ci] = p
            resumed += 1
        for b in range(n_blocks):
            r = ckpt.load(_task_name(cell, 1, b))
            if r is not None:
                blocks[(ci, b)] = r
                resumed += 1
    n_tasks = len(cells) * (1 + n_blocks)
    bar = None
    if progress:
        from tqdm.auto import tqdm
        bar = tqdm(total=n_tasks, initial=resumed, desc=f"simkit {study.name}", unit="task", file=sys.stderr,
                   dynamic_ncols=True)
    new_done = 0

    def record(kind, ci, b, exc):
        cell = cells[ci]
        seq = task_seed(cfg["seed"], cell, 0 if kind == "prepare" else 1, b)
        errors.append({"cell_index": ci, "cell": cell, "stage": kind, "block": b,
                       "seed": int(cfg["seed"]), "spawn_key": list(seq.spawn_key),
                       "error": f"{type(exc).__name__}: {exc}",
                       "traceback": "".join(traceback.format_exception(exc))[-4000:]})

    try:
        # one task list: each cell's preparation, then its blocks, which depend on it (an executor
        # may start a cell's blocks as soon as that cell is prepared: no barrier across cells)
        todo = []
        for ci, cell in enumerate(cells):
            pkey = ("prepare", ci, 0)
            if ci not in preps:
                todo.append((pkey, (study.name, cfg, cell, 0, 0, None), None))
            for b in range(n_blocks):
                if (ci, b) not in blocks:
                    ready = ci in preps
                    todo.append((("block", ci, b), (study.name, cfg, cell, 1, b, preps[ci] if ready else None),
                                 None if ready else pkey))
        for (kind, ci, b), result, exc in executor.run(todo, execute_task):
            if isinstance(exc, DependencyFailed):
                continue  # the cell's preparation failed and is recorded; its blocks cannot run
            if exc is not None:
                record(kind, ci, b, exc)
            else:
                if kind == "prepare":
                    ckpt.save(_task_name(cells[ci], 0, 0), result)
                    preps[ci] = result
                else:
                    ckpt.save(_task_name(cells[ci], 1, b), result)
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
        executor.close()
        done = len(preps) + len(blocks)
        print(f"simkit: interrupted; {done}/{n_tasks} tasks are kept in {ckpt.dir}; "
              f"run the same command again to resume", file=sys.stderr)
        return RunResult(None, out, False, n_tasks, done, errors, time.perf_counter() - t0)
    finally:
        if bar is not None:
            bar.close()
    executor.close()

    raw = _assemble(study, cfg, cells, preps, blocks, n_blocks, errors)
    ds = study.summarise(raw, cfg)
    wall = time.perf_counter() - t0
    ds.attrs.update({
        "title": study.title,
        "study": study.name,
        "claim": study.claim,
        "simkit_version": _versions()["simkit"],
        "git_commit": _git_commit(),
        "seed": int(cfg["seed"]),
        "seed_scheme": "SeedSequence(seed, spawn_key=(*cell_key, stage, block)); cell_key = 4 x uint32 "
                       "of SHA-256 of the cell's canonical JSON (variable cell_key)",
        "config": _canonical(cfg),
        "package_versions": _canonical(_versions()),
        "platform": f"{platform.platform()}; {os.cpu_count()} CPUs",
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "wall_time_s": round(wall, 3),
        "engine": executor.name,
        "n_workers": executor.n_workers,
        "resumed_tasks": resumed,
        "n_errors": len(errors),
        "errors": _canonical([{k: v for k, v in e.items() if k != "traceback"} for e in errors]),
        "ademp": _canonical(study.ademp),
    })
    write_dataset(ds, out)
    if not errors and not keep_checkpoint:
        ckpt.remove()
    return RunResult(ds, out, True, n_tasks, len(preps) + len(blocks), errors, wall)


def _assemble(study: Study, cfg: dict, cells: list[dict], preps: dict, blocks: dict, n_blocks: int,
              errors: list[dict]) -> xr.Dataset:
    """Raw dataset: per-block variables ``raw_<name>`` (cell, block, ...) and ``prep_<name>`` (cell, ...)."""
    var_dims, coords = study.block_dims(cfg)
    cdim = study.cell_dim
    n_cells = len(cells)
    data_vars = {}
    for name, dims in var_dims.items():
        shape = tuple(len(coords[d]) for d in dims)
        arr = np.full((n_cells, n_blocks, *shape), np.nan)
        for (ci, b), res in blocks.items():
            arr[ci, b] = np.asarray(res[name], dtype=float).reshape(shape)
        data_vars[f"raw_{name}"] = ((cdim, "block", *dims), arr)
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
    data_vars["cell_key"] = ((cdim, "key_word"), np.array([cell_key(c) for c in cells], dtype=np.uint32))
    cell_coords = {}
    for key in cells[0]:
        values = [c[key] for c in cells]
        cell_coords[key] = ((cdim,), np.array(values))
    if cdim not in cells[0]:
        cell_coords[cdim] = np.arange(n_cells)
    ds = xr.Dataset(data_vars, coords={**cell_coords, "block": np.arange(n_blocks), **coords})
    ds["block"].attrs = {"long_name": "replicate block", "units": "1",
                          "description": "independent replicate block (its own negatives and anchors)"}
    if not ds[cdim].attrs:
        ds[cdim].attrs = {"long_name": f"design {cdim}", "units": "1", "description": "one cell of the design grid"}
    ds["cell_error"].attrs = {"long_name": "error raised by a task of this cell (empty if none)", "units": "1",
                              "description": "stage, block and exception; the seed and spawn key are in attrs['errors']"}
    ds["cell_key"].attrs = {"long_name": "cell part of the seed spawn key", "units": "1",
                            "description": "SeedSequence(seed, spawn_key=(*cell_key, stage, block))"}
    return ds
