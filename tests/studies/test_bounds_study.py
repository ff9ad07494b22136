"""Tests of the ``bounds`` study (studies/bounds.py, protocols/bounds.md): a quick run, its schema, and
positive controls of the checks (a bound made to grow, a bound pushed below the gap, a violated Prop. 4 bound).

The bounds are deterministic; the quick run's realised gaps are 10^3 or more times below them (the
above-gap check's margin is far outside the Monte Carlo error), so its checks cannot fail by chance.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import xarray as xr

from simkit.exact.bounds import bound_averaging, bound_max
from simkit.runner import read_dataset, resolve_config, run_study
from studies.bounds import CHECKS, CLASS, GROWTH_MAX_MIN, SCHEMA, STUDY


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    cfg = resolve_config(STUDY, quick=True, seed=3)
    res = run_study(STUDY, cfg, tmp_path_factory.mktemp("bounds") / "bounds.nc", progress=False)
    return cfg, read_dataset(res.path)


def _row(ds, label):
    return next(c.row(ds) for c in CHECKS if c.label == label)


@pytest.mark.deterministic(reason="checks of proven inequalities and deterministic bounds; the realised gaps "
                                  "are >= 1000 x below the bounds, ~100 MCSEs")
def test_quick_run_schema_and_checks(run):
    cfg, ds = run
    for name, var in SCHEMA.items():
        assert name in ds.variables, name
        assert tuple(ds[name].dims) == tuple(var.dims), name
        assert ds[name].attrs["long_name"] and "units" in ds[name].attrs
    assert ds.sizes["n"] == 2 and ds.sizes["k"] == int(math.log2(cfg["k_max"])) + 1
    # the dataset's bounds are simkit.exact.bounds at the design's points (and bound_averaging has no k)
    tau, n = float(ds["tau"].values[0]), int(ds["n"].values[-1])
    assert ds["bound_max"].values[0, -1, -1] == pytest.approx(bound_max(n, cfg["k_max"], tau, **CLASS), rel=1e-12)
    assert np.all(ds["bound_averaging"].values[0, -1] == bound_averaging(n, tau, **CLASS))
    assert np.all(np.isfinite(ds["gap"].values)) and np.all(ds["gap_mcse"].values > 0)
    for label in ("bounds in k", "bounds above gap", "Prop. 4 bounds hold"):
        assert _row(ds, label)["verdict"] == "pass", _row(ds, label)
    assert np.all(ds["c4_tightness_avg"].values <= 1.0) and np.all(ds["c4_ratio_max_avg"].values >= 1.0)


def _summarise_with(ds, **bounds):
    """The study's summary of ``ds``'s raw blocks with some of studies.bounds.BOUNDS replaced."""
    from studies import bounds as mod
    raw = ds[[v for v in ds.data_vars if v.startswith("raw_")] + ["cell_error"]]
    saved = dict(mod.BOUNDS)
    try:
        mod.BOUNDS.update(bounds)
        out = STUDY.summarise(raw, resolve_config(STUDY, quick=True, seed=3))
    finally:
        mod.BOUNDS.clear()
        mod.BOUNDS.update(saved)
    ds2 = ds.copy(deep=True)
    for name in ("growth_verdict", "above_verdict", "growth_max", "growth_averaging"):
        ds2[name] = (ds[name].dims, np.asarray(out[name]))
    return ds2


@pytest.mark.deterministic(reason="the controls replace deterministic bound functions")
def test_positive_control_a_bound_made_to_grow_is_caught(run):
    _, ds = run
    same = _summarise_with(ds)
    assert _row(same, "bounds in k")["verdict"] == "pass"
    assert np.all(same["growth_averaging"].values == 0.0) and np.all(same["growth_max"].values > GROWTH_MAX_MIN)
    # the averaging bound given a sqrt(k) constant: growth sqrt(2) - 1 per doubling, must fail
    grown = _summarise_with(ds, averaging=lambda n, k, tau: bound_averaging(n, tau, **CLASS) * math.sqrt(k))
    assert np.allclose(grown["growth_averaging"].values, math.sqrt(2) - 1, atol=1e-9)
    assert _row(grown, "bounds in k")["verdict"] == "fail"
    # a slowly growing averaging bound (+2% per doubling) is also caught; +0.5% is not (margin 1%)
    slow = _summarise_with(ds, averaging=lambda n, k, tau: bound_averaging(n, tau, **CLASS) * 1.02 ** math.log2(k))
    assert _row(slow, "bounds in k")["verdict"] == "fail"
    ok = _summarise_with(ds, averaging=lambda n, k, tau: bound_averaging(n, tau, **CLASS) * 1.005 ** math.log2(k))
    assert _row(ok, "bounds in k")["verdict"] == "pass"
    # an earlier bound that does not grow (a log k factor only, +1/log2(k) per doubling at most ~6% here) fails
    flat = _summarise_with(ds, max=lambda n, k, tau: bound_averaging(n, tau, **CLASS) * math.log(2 + k))
    assert _row(flat, "bounds in k")["verdict"] == "fail"


@pytest.mark.deterministic(reason="the control edits deterministic values")
def test_positive_control_bound_below_gap_and_violated_prop4(run):
    _, ds = run
    ds2 = _summarise_with(ds, max=lambda n, k, tau: 1e-9)  # a "bound" below the realised gap
    assert all(v == "fail" for v in np.ravel(ds2["above_verdict"].values))
    assert _row(ds2, "bounds above gap")["verdict"] == "fail"
    ds3 = ds.copy(deep=True)
    ds3["c4_violations_avg"] = ds3["c4_violations_avg"] + 1
    assert _row(ds3, "Prop. 4 bounds hold")["verdict"] == "fail"


def test_bad_design_is_refused():
    with pytest.raises(ValueError, match="k_train"):
        resolve_config(STUDY, {"k_train": 1024, "k_max": 512})
