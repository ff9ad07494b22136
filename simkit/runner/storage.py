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

import hashlib
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import xarray as xr

from simkit.runner.seeds import canonical

__all__ = ["atomic_write", "Checkpoint", "write_dataset", "read_dataset", "results_identical", "VOLATILE_ATTRS"]

#: attributes that describe a run rather than its results (excluded when comparing datasets)
VOLATILE_ATTRS = ("created", "wall_time_s", "engine", "n_workers", "resumed_tasks", "history")

#: global attribute naming the dimensions whose labels are stored as ``<dim>_label``
LABELLED_DIMS = "simkit_labelled_dims"


def atomic_write(path: str | os.PathLike, writer: Callable[[str], None], suffix: str = "") -> None:
    """Call ``writer(tmp)`` on a temporary file beside ``path``, then rename it to ``path``.

    On any error the temporary file is removed and ``path`` is untouched.
    """
    path = Path(path)
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
    """One ``.npz`` file per finished task in a directory keyed by the study and configuration."""

    def __init__(self, out: Path, study_name: str, cfg: dict):
        h = hashlib.sha256(canonical({"study": study_name, "cfg": cfg}).encode()).hexdigest()[:12]
        self.dir = Path(out).parent / f".{Path(out).name}.{h}.partial"
        self.manifest = {"study": study_name, "config": cfg}

    def open(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        mpath = self.dir / "manifest.json"
        if mpath.exists():
            try:
                old = json.loads(mpath.read_text())
            except (OSError, json.JSONDecodeError):
                old = None
            if old != json.loads(canonical(self.manifest)):
                raise RuntimeError(f"checkpoint directory {self.dir} belongs to another configuration; remove it")
        else:
            atomic_write(mpath, lambda p: Path(p).write_text(canonical(self.manifest)), ".json")

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


def _from_cf(ds: xr.Dataset) -> xr.Dataset:
    labelled = str(ds.attrs.get(LABELLED_DIMS, "")).split()
    for d in labelled:
        attrs = dict(ds[f"{d}_label"].attrs)
        ds = ds.assign_coords({d: ((d,), ds[f"{d}_label"].values.astype(str), attrs)}).drop_vars(f"{d}_label")
    ds.attrs.pop(LABELLED_DIMS, None)
    return ds


def write_dataset(ds: xr.Dataset, path: str | os.PathLike) -> None:
    """Write CF-1.11 netCDF (h5netcdf) atomically: a temporary file in the same directory, then rename."""
    cf = _to_cf(ds)
    encoding = {name: {"_FillValue": None} for name in cf.coords if cf[name].dtype.kind == "f"}
    atomic_write(Path(path), lambda p: cf.to_netcdf(p, engine="h5netcdf", encoding=encoding), ".nc")


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
    return _from_cf(ds)


def results_identical(a: xr.Dataset, b: xr.Dataset) -> bool:
    """True when two datasets agree in every variable, coordinate and non-volatile attribute."""
    a2, b2 = a.copy(), b.copy()
    for d in (a2, b2):
        for key in VOLATILE_ATTRS:
            d.attrs.pop(key, None)
    return a2.identical(b2)
