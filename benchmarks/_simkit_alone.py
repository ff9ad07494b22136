"""simkit's InfoNCE estimator timed in a process of its own: the counterpart of ``_torch_alone.py``.

``python benchmarks/_simkit_alone.py IN.npz OUT.npz`` loads ``x, xp, y, tau, grid`` from IN.npz in a
process that imports NumPy and simkit and never PyTorch, makes one warm-up call of
``simkit.estimators.infonce.infonce_losses`` in float32 and in float64 (which also loads the compiled
code from Numba's cache), writes their outputs to OUT.npz, prints ``ready``, and then times one call
per stdin line ``f32`` or ``f64`` (printing its seconds), as ``_torch_alone.py`` does, so that neither
contender is judged in the other's environment only.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the working tree, as bench_infonce.py
sys.path.insert(0, str(Path(__file__).resolve().parent))


def _main(argv):
    from _torch_alone import serve  # imports neither torch nor simkit at the top

    from simkit.estimators.infonce import infonce_losses
    z = np.load(argv[0])
    x, xp, y, tau, grid = z["x"], z["xp"], z["y"], float(z["tau"]), z["grid"]
    dts = {"f32": np.float32, "f64": np.float64}
    return serve(lambda k: infonce_losses(x, xp, y, tau, grid, dtype=dts[k]), argv[1],
                 lambda: {"foreign_loaded": "torch" in sys.modules})


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
