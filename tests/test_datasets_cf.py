"""Every committed dataset in data/ is CF-1.11: the IOOS compliance-checker in strict mode passes,
and udunits (cf_units) reads every unit as dimensionless (losses in nats are "1"). Deterministic
checks, each with a negative control that fails."""

from __future__ import annotations

import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

import simkit
from simkit.runner import write_dataset

from _cf import compliance

cf_units = pytest.importorskip("cf_units")

DATA = Path(simkit.__file__).resolve().parent.parent / "data"
FILES = sorted(DATA.glob("*.nc"))

@pytest.fixture(scope="module")
def checked() -> dict[Path, subprocess.CompletedProcess]:
    """The checker on every committed file, as many processes at once as there are cores (the
    checker is single-threaded and, per file, quadratic in the number of variables)."""
    with ThreadPoolExecutor(max_workers=max(1, min(len(FILES), os.cpu_count() or 1))) as pool:
        return dict(zip(FILES, pool.map(compliance, FILES)))

def test_there_are_committed_datasets():
    assert len(FILES) >= 8, FILES

@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_compliance_checker_strict_passes(path, checked):
    proc = checked[path]
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]

@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_no_dimensional_unit(path):
    with xr.open_dataset(path, engine="h5netcdf") as ds:
        units = {n: v.attrs.get("units") for n, v in ds.variables.items()}
        assert ds.attrs.get("Conventions") == "CF-1.11"
        for key in ("title", "history", "source", "references"):
            assert str(ds.attrs.get(key, "")).strip(), key
    missing = [n for n, u in units.items() if u is None]
    assert not missing, missing
    dimensional = {n: u for n, u in units.items() if not cf_units.Unit(u).is_dimensionless()}
    assert not dimensional, dimensional

def test_negative_controls(tmp_path):
    """'nat' is a pressure to udunits, and a file without Conventions/history fails the strict check."""
    assert not cf_units.Unit("nat").is_dimensionless()
    assert cf_units.Unit("1").is_dimensionless()
    bad = tmp_path / "bad.nc"
    xr.Dataset({"gap": (("k",), np.ones(3), {"long_name": "gap", "units": "1"})},
               coords={"k": ("k", [1.0, 2.0, 4.0], {"long_name": "k", "units": "1"})}).to_netcdf(bad, engine="h5netcdf")
    assert compliance(bad).returncode != 0
    # a labelled dimension as written by simkit passes once the global attributes are there
    good = tmp_path / "good.nc"
    ds = xr.Dataset({"gap": (("setting", "k"), np.ones((2, 3)), {"long_name": "gap, in nats", "units": "1"})},
                    coords={"setting": ("setting", ["a", "b"], {"long_name": "setting", "units": "1"}),
                            "k": ("k", [1.0, 2.0, 4.0], {"long_name": "k", "units": "1"})},
                    attrs={"Conventions": "CF-1.11", "title": "t", "history": "h", "source": "s", "references": "r",
                           "study": "x", "simkit_version": "0"})
    write_dataset(ds, good)
    assert compliance(good).returncode == 0
