"""simkit's InfoNCE estimator timed in a process of its own: the counterpart of ``_torch_alone.py``.

``python benchmarks/_simkit_alone.py IN.npz OUT.npz REPEATS`` loads ``x, xp, y, tau, grid`` from
IN.npz, times ``simkit.estimators.infonce.infonce_losses`` in float32 and float64 (one warm-up call, which
also loads the compiled code from Numba's cache, then the best of REPEATS consecutive calls each)
in a process that imports NumPy and simkit and never PyTorch, and writes the times and the outputs
to OUT.npz. ``bench_infonce.py`` runs it in as many fresh processes as PyTorch's lone figure gets
and compares the better of simkit's two figures (its own process, alone) with the better of
PyTorch's, so that neither contender is judged in the other's environment only.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the working tree, as bench_infonce.py


def _main(argv):
    from simkit.estimators.infonce import infonce_losses
    src, dst, repeats = argv[0], argv[1], int(argv[2])
    z = np.load(src)
    x, xp, y, tau, grid = z["x"], z["xp"], z["y"], float(z["tau"]), z["grid"]
    out = {}
    for name, dt in (("f32", np.float32), ("f64", np.float64)):
        res = infonce_losses(x, xp, y, tau, grid, dtype=dt)
        best = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            res = infonce_losses(x, xp, y, tau, grid, dtype=dt)
            best = min(best, time.perf_counter() - t0)
        out[f"t_{name}"] = best
        out[f"out_{name}"] = res
    out["foreign_loaded"] = "torch" in sys.modules  # the other contender's library
    np.savez(dst, **out)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
