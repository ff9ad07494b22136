"""Compare two datasets of the same design variable by variable: bit for bit, else the largest relative
difference (to the variable's largest finite magnitude). Attributes that record the run are not compared.

    python benchmarks/same_numbers.py before.nc after.nc [--rtol 1e-12]

Exit 0 when every variable and coordinate agrees within ``--rtol`` (0: bit for bit, NaN = NaN), 1 otherwise;
one line per variable that is not bit-identical.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
import xarray as xr


def compare(a: xr.Dataset, b: xr.Dataset) -> tuple[int, dict[str, float]]:
    """(number of variables compared, {name: largest relative difference} for those not bit-identical;
    inf for a missing variable, other dims or other strings)."""
    out, names = {}, sorted(set(a.variables) | set(b.variables))
    for name in names:
        if name not in a.variables or name not in b.variables or a[name].dims != b[name].dims \
                or a[name].shape != b[name].shape:
            out[name] = np.inf
            continue
        va, vb = a[name].values, b[name].values
        if va.dtype.kind not in "fc":
            if not np.array_equal(va, vb):
                out[name] = np.inf
            continue
        if np.array_equal(va, vb, equal_nan=True):
            continue
        if not np.array_equal(np.isnan(va), np.isnan(vb)):
            out[name] = np.inf
            continue
        finite = np.abs(vb[np.isfinite(vb)])
        scale = float(finite.max()) if finite.size else 1.0
        out[name] = float(np.nanmax(np.abs(va - vb))) / (scale or 1.0)
    return len(names), out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--rtol", type=float, default=0.0)
    args = ap.parse_args(argv)
    with xr.open_dataset(args.a) as a, xr.open_dataset(args.b) as b:
        n, diff = compare(a.load(), b.load())
    for name, d in sorted(diff.items()):
        print(f"{name}: relative difference {d:.3g}")
    bad = [k for k, d in diff.items() if d > args.rtol]
    print(f"{n} variables and coordinates: {n - len(diff)} bit-identical, {len(diff) - len(bad)} within "
          f"{args.rtol:g}, {len(bad)} beyond")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
