"""Where a first run's time goes: Numba compile time per jitted function.

Run from the repository root, with an empty cache to see a cold start::

    NUMBA_CACHE_DIR=$(mktemp -d) python benchmarks/profile_compile.py rate_k
    NUMBA_CACHE_DIR=$(mktemp -d) python benchmarks/profile_compile.py diagnose   # 10k rows x 64, labels

Runs the command in this process under Numba's ``numba:compile`` event recorder and prints, per
dispatcher and signature, the compile time exclusive of the compiles nested in it (a caller's
compile includes its non-inlined callees'), and inclusive; then the total compile time, the
number of signatures compiled, and the wall times of the import and of the command. ``--json FILE`` writes the table.
With a warm cache the events are loads from disk (short). The machine's load average is printed,
as compile times scale with it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def diagnose_file(path: Path, n: int = 10_000, d: int = 64, n_classes: int = 100, seed: int = 20261205) -> Path:
    """An .npz of ``n`` labelled embeddings (class means plus isotropic noise), tau = 0.1."""
    import numpy as np
    rng = np.random.default_rng(seed)
    means = rng.normal(size=(n_classes, d))
    means /= np.linalg.norm(means, axis=1, keepdims=True)
    labels = rng.integers(0, n_classes, size=n)
    x = means[labels] + rng.normal(scale=2.0 / np.sqrt(d), size=(n, d))
    np.savez(path, embeddings=x, labels=labels, tau=np.float64(0.1))
    return path


def command(which: str, tmp: Path) -> list[str]:
    if which == "rate_k":
        return ["run", "rate_k", "--quick", "--no-report", "--out", str(tmp / "rate_k.nc")]
    return ["diagnose", str(diagnose_file(tmp / "emb.npz"))]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("which", choices=["rate_k", "diagnose"])
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--top", type=int, default=40)
    args = ap.parse_args(argv)

    from numba.core import event as ev

    with tempfile.TemporaryDirectory() as td, ev.install_recorder("numba:compile") as rec:
        t0 = time.perf_counter()
        from simkit.cli import main as simkit_main  # an eager (signature-given) compile runs at import
        t_import = time.perf_counter() - t0
        cmd = command(args.which, Path(td))
        t1 = time.perf_counter()
        rc = simkit_main(cmd)
        wall = time.perf_counter() - t1

    # pair START/END events (nested: a stack), exclusive time = inclusive minus direct children
    stack, rows = [], []
    for ts, e in rec.buffer:
        if e.is_start:
            stack.append([ts, e.data, 0.0])
        else:
            t_start, data, child = stack.pop()
            incl = ts - t_start
            disp = data["dispatcher"]
            name = f"{disp.py_func.__module__}.{disp.py_func.__qualname__}"
            rows.append({"function": name, "signature": str(data["args"]), "inclusive_s": incl,
                         "exclusive_s": incl - child, "depth": len(stack)})
            if stack:
                stack[-1][2] += incl
    top_level = sum(r["inclusive_s"] for r in rows if r["depth"] == 0)
    rows.sort(key=lambda r: -r["exclusive_s"])
    print(f"simkit {' '.join(cmd[:2])}: exit {rc}, import {t_import:.1f} s, run {wall:.1f} s, compile {top_level:.1f} s "
          f"({len(rows)} signatures), load average {os.getloadavg()[0]:.1f}, "
          f"NUMBA_CACHE_DIR={os.environ.get('NUMBA_CACHE_DIR', '(default)')}")
    print(f"{'exclusive s':>11} {'inclusive s':>11}  function [signature]")
    for r in rows[:args.top]:
        print(f"{r['exclusive_s']:11.2f} {r['inclusive_s']:11.2f}  {r['function']} {r['signature'][:90]}")
    if args.json:
        args.json.write_text(json.dumps({"command": cmd, "import_s": t_import, "run_s": wall, "compile_s": top_level,
                                         "loadavg": os.getloadavg(), "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
