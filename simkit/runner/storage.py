"""Files: atomic writes, the checkpoint store of finished tasks, and CF-1.11 netCDF datasets.

Every file is written to a temporary file in its directory and renamed, so a reader sees the old
file or the new one, never a part. A run's checkpoint directory ``.<out>.<config-hash>.partial/``
holds one ``.npz`` per finished task; an interrupted or failed run keeps every finished task, and
the same command resumes from them.

netCDF and CF. CF-1.11 wants coordinate variables numeric and strictly monotonic; a design
dimension labelled by names (``setting``) is therefore stored as a dimension without a coordinate
variable plus an auxiliary coordinate ``<dim>_label`` (listed in the ``simkit_labelled_dims``
attribute), and :func:`read_dataset` restores the labels as the dimension's index. Coordinates
carry no ``_FillValue``.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import socket
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import xarray as xr

from simkit.runner.seeds import canonical

__all__ = ["atomic_write", "Checkpoint", "write_dataset", "read_dataset", "results_identical", "VOLATILE_ATTRS",
           "OutputBusy", "WriteFailed", "RunLock", "check_writable", "CheckpointMismatch"]

#: attributes that describe a run rather than its results (excluded when comparing datasets)
VOLATILE_ATTRS = ("created", "wall_time_s", "engine", "n_workers", "resumed_tasks", "history")

#: global attribute naming the dimensions whose labels are stored as ``<dim>_label``
LABELLED_DIMS = "simkit_labelled_dims"

#: xarray engine for every dataset simkit writes and reads (see :func:`write_dataset`)
ENGINE = "netcdf4"


class OutputBusy(ValueError):
    """Another running simkit process holds the lock of this output."""


class WriteFailed(OSError):
    """A file could not be written (no space left, I/O error, permissions); no partial file is left."""


def _describe(exc: OSError) -> str:
    return (exc.strerror or (errno.errorcode.get(exc.errno, "") if exc.errno else "") or str(exc)
            or type(exc).__name__)


def check_writable(option: str, path: str | os.PathLike) -> None:
    """ValueError (naming ``option``) unless a file can be created in ``path``'s directory.

    Probes the nearest existing ancestor with a temporary file that is removed at once, so that
    nothing is left behind (missing directories are created only later, by the run).
    """
    p = Path(path)
    parent = next((a for a in p.parents if a.exists()), Path("."))
    if not parent.is_dir():
        raise ValueError(f"'{option}' is inside {str(parent)!r}, which is not a directory")
    try:
        fd, tmp = tempfile.mkstemp(prefix=".simkit-probe-", dir=parent)
    except OSError as exc:
        raise ValueError(f"'{option}' {str(p)!r} is not writable: cannot create a file in {str(parent)!r} "
                         f"({_describe(exc)})") from None
    os.close(fd)
    os.remove(tmp)


class RunLock:
    """An exclusive lock on one output path, held by the process that runs it.

    A file ``.<out>.lock`` beside the output, locked with ``flock`` and holding the owner's pid,
    host and start time. The kernel releases the lock when its process ends, however it ends, so a
    lock whose process is gone is simply taken over.
    """

    def __init__(self, out: str | os.PathLike):
        self.out = Path(out)
        self.path = self.out.parent / f".{self.out.name}.lock"
        self._fd: int | None = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            try:
                owner = json.loads(os.pread(fd, 4096, 0).decode() or "{}")
            except (OSError, ValueError):
                owner = {}
            os.close(fd)
            raise OutputBusy(f"'--out' {str(self.out)!r} is being written by a running "
                             f"simkit (pid {owner.get('pid', '?')} on {owner.get('host', '?')}, started "
                             f"{owner.get('started', '?')}); wait for it to finish or choose another --out") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                  "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}).encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is None:
            return
        try:
            os.unlink(self.path)  # still ours: we hold the lock
        except FileNotFoundError:
            pass
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)
        self._fd = None

    def __enter__(self) -> RunLock:
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def _write_error(exc: BaseException) -> str | None:
    """The reason of a failed write, or None if ``exc`` is not one: an OSError (no space left, I/O
    error, permissions), or the RuntimeError netCDF-C raises when the HDF5 layer below it cannot
    write (``NetCDF: HDF error`` on a full disk)."""
    if isinstance(exc, OSError):
        return _describe(exc)
    if isinstance(exc, RuntimeError) and str(exc).startswith("NetCDF:"):
        return str(exc)
    return None


def _fsync_dir(directory: Path) -> None:
    """Make a rename in ``directory`` durable; a file system that cannot sync a directory is let be."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
            raise
    finally:
        os.close(fd)


def atomic_write(path: str | os.PathLike, writer: Callable[[str], None], suffix: str = "") -> None:
    """Call ``writer(tmp)`` on a temporary file beside ``path``, then rename it to ``path``.

    The file is synced before the rename and the directory after it, so that after a power cut
    ``path`` is the old file or the whole new one. On any error the temporary file is removed and
    ``path`` is untouched; a failed write (:func:`_write_error`) raises :class:`WriteFailed`.
    """
    path = Path(path)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix, dir=path.parent)
        os.close(fd)
        writer(tmp)
        umask = os.umask(0o022)  # mkstemp creates 0600; give the file the usual permissions
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        tmp = None
        _fsync_dir(path.parent)
    except BaseException as exc:
        if tmp is not None and os.path.exists(tmp):
            os.remove(tmp)
        reason = None if isinstance(exc, WriteFailed) else _write_error(exc)
        if reason is not None:
            raise WriteFailed(f"could not write {str(path)!r} ({reason}); nothing partial was left") from None
        raise


class CheckpointMismatch(ValueError):
    """A checkpoint directory holds the (readable) manifest of another study or configuration."""


def _config_hash(study_name: str, cfg) -> str:
    return hashlib.sha256(canonical({"study": study_name, "cfg": cfg}).encode()).hexdigest()[:12]


class Checkpoint:
    """One ``.npz`` file per finished task in a directory keyed by the study and configuration.

    ``manifest.json`` records the study and configuration the directory's name is the hash of.
    Each task file is a zip archive whose members carry their CRC-32, checked when a task is
    loaded, so a damaged manifest (empty or garbled after a crash) is rebuilt by :meth:`open`
    from the task files that pass their checksums.
    """

    def __init__(self, out: Path, study_name: str, cfg: dict):
        self.hash = _config_hash(study_name, cfg)
        self.dir = Path(out).parent / f".{Path(out).name}.{self.hash}.partial"
        self.manifest = {"study": study_name, "config": cfg}

    def open(self) -> str | None:
        """Create the directory and its manifest, or check an existing one. Returns None, or one line
        saying that a damaged manifest was rebuilt (the caller shows it); :class:`CheckpointMismatch`
        when the manifest is readable and that of another configuration."""
        self.dir.mkdir(parents=True, exist_ok=True)
        mpath = self.dir / "manifest.json"
        want = json.loads(canonical(self.manifest))
        if not mpath.exists():
            self._write_manifest()
            return None
        try:
            old = json.loads(mpath.read_bytes().decode())
        except (OSError, ValueError):  # empty, truncated, garbled (UnicodeDecodeError is a ValueError)
            old = None
        if old == want:
            return None
        if (isinstance(old, dict) and set(old) == {"study", "config"}
                and _config_hash(old["study"], old["config"]) == self.hash):
            raise CheckpointMismatch(f"checkpoint directory {str(self.dir)!r} holds the manifest of another "
                                     f"configuration of study {old['study']!r} with the same hash; move it away "
                                     "or choose another --out")
        # not a manifest whose hash is this directory's name: the file is damaged, the tasks are not
        kept, removed = self.verify()
        self._write_manifest()
        return (f"the checkpoint manifest {str(mpath)!r} was unreadable or damaged; rebuilt it: {kept} task "
                f"file(s) passed their checksums and are kept" + (f", {removed} damaged one(s) removed" if removed
                                                                    else ""))

    def _write_manifest(self) -> None:
        atomic_write(self.dir / "manifest.json", lambda p: Path(p).write_text(canonical(self.manifest)), ".json")

    def verify(self) -> tuple[int, int]:
        """Read every task file in full (checking each member's CRC-32); remove those that fail.
        Returns (kept, removed)."""
        kept = removed = 0
        for path in sorted(self.dir.glob("*.npz")):
            if path.name.startswith("."):
                continue  # a temporary file of a write that never finished
            if self.load(path.stem) is None:
                path.unlink(missing_ok=True)
                removed += 1
            else:
                kept += 1
        return kept, removed

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

    def count(self) -> int:
        """Task files in the directory (temporary files of unfinished writes excluded)."""
        return sum(1 for p in self.dir.glob("*.npz") if not p.name.startswith("."))

    def save(self, name: str, data: dict) -> None:
        arrays = {k: np.asarray(v) for k, v in data.items()}
        atomic_write(self.dir / f"{name}.npz", lambda p: np.savez(p, **arrays), ".npz")

    def remove(self) -> None:
        """Delete the directory; tolerant of a concurrent run removing the same files."""
        for f in self.dir.glob("*"):
            f.unlink(missing_ok=True)
        try:
            self.dir.rmdir()
        except FileNotFoundError:
            pass


def _to_cf(ds: xr.Dataset) -> xr.Dataset:
    """Labelled (string) dimension coordinates become auxiliary ``<dim>_label`` variables."""
    labelled = [d for d in ds.dims if d in ds.coords and ds[d].dtype.kind in "USO"]
    out = ds.copy()
    for d in labelled:
        attrs = dict(ds[d].attrs)
        labels = ds[d].values.astype(str)
        out = out.drop_indexes(d).rename_vars({d: f"{d}_label"})
        out[f"{d}_label"] = ((d,), labels, attrs)
        out = out.set_coords(f"{d}_label")
    if labelled:
        out.attrs[LABELLED_DIMS] = " ".join(labelled)
    return out


def _from_cf(ds: xr.Dataset, source: str = "the dataset") -> xr.Dataset:
    labelled = str(ds.attrs.get(LABELLED_DIMS, "")).split()
    lost = [f"{d}_label" for d in labelled if f"{d}_label" not in ds.variables or ds[f"{d}_label"].dims != (d,)]
    if lost:
        raise ValueError(f"{source} lacks {', '.join(map(repr, lost))}, the labels of its dimension(s) "
                         f"{', '.join(map(repr, [n[:-6] for n in lost]))} (attribute {LABELLED_DIMS})")
    for d in labelled:
        attrs = dict(ds[f"{d}_label"].attrs)
        ds = ds.assign_coords({d: ((d,), ds[f"{d}_label"].values.astype(str), attrs)}).drop_vars(f"{d}_label")
    ds.attrs.pop(LABELLED_DIMS, None)
    return ds


def write_dataset(ds: xr.Dataset, path: str | os.PathLike) -> None:
    """Write CF-1.11 netCDF-4 atomically: a temporary file in the same directory, then rename.

    The engine is netCDF4-python (the netCDF-C library): several times faster than h5netcdf on a study
    dataset (docs/performance.md), and it reads every file h5netcdf wrote identically (both write
    netCDF-4/HDF5)."""
    cf = _to_cf(ds)
    encoding = {name: {"_FillValue": None} for name in cf.coords if cf[name].dtype.kind == "f"}

    def write(p):
        with _local_write_lock():
            cf.to_netcdf(p, engine=ENGINE, encoding=encoding)

    atomic_write(Path(path), write, ".nc")


def _local_write_lock():
    """A context in which xarray locks netCDF writes in this process only. While a ``distributed``
    Client is the default scheduler (a Dask run's driver), xarray takes a ``distributed.Lock`` on the
    scheduler for every write: a round trip, and a dataset that cannot be written once the scheduler
    is gone (CI saw "ConnectionPool closing" when the scheduler died after the last task). The arrays
    written here are NumPy arrays in this process, so a local lock is the right one."""
    try:
        import dask
    except ImportError:  # no dask, no distributed lock
        return contextlib.nullcontext()
    return dask.config.set(scheduler="synchronous")


def read_dataset(path: str | os.PathLike) -> xr.Dataset:
    """Open a simkit dataset fully into memory; ValueError (naming the file) if it is not one."""
    p = Path(path)
    if not p.exists():
        raise ValueError(f"dataset file '{p}' does not exist")
    try:
        with xr.open_dataset(p, engine=ENGINE) as ds:
            ds = ds.load()
    except Exception as exc:  # truncated, not HDF5, not netCDF
        raise ValueError(f"'{p}' is not a readable netCDF dataset ({type(exc).__name__})") from None
    if "study" not in ds.attrs or "simkit_version" not in ds.attrs:
        raise ValueError(f"'{p}' is not a simkit dataset (no 'study' attribute)")
    return _from_cf(ds, f"'{p}'")


def results_identical(a: xr.Dataset, b: xr.Dataset) -> bool:
    """True when two datasets agree in every variable, coordinate and non-volatile attribute."""
    a2, b2 = a.copy(), b.copy()
    for d in (a2, b2):
        for key in VOLATILE_ATTRS:
            d.attrs.pop(key, None)
    return a2.identical(b2)
