"""Single-pass PyTorch InfoNCE over a k grid (the baseline of ``bench_infonce.py``), importable
without simkit, and run as a script: the same contender in a process of its own.

``python benchmarks/_torch_alone.py IN.npz OUT.npz`` loads ``x, xp, y, tau, grid`` from IN.npz in a
process that imports only NumPy and PyTorch, makes one warm-up call of ``torch_single_pass`` in
float32 and in float64, writes their outputs to OUT.npz, prints ``ready``, and then serves
``bench_infonce.py``'s interleaved rounds: for each line ``f32`` or ``f64`` read from stdin it times
one call in that precision and prints its seconds. ``bench_infonce.py`` reports this "alone" figure
beside the one measured in its own process (where Numba's and OpenBLAS's thread pools live too), and
compares simkit with the better of the two in each round, so that sharing a process cannot handicap
PyTorch unseen.
"""

from __future__ import annotations

import sys
import time

import numpy as np


def torch_single_pass(x, xp, y, tau, grid, dtype, chunk_elems=1 << 20):
    """Single-pass PyTorch: per anchor chunk one matmul into a reused buffer, exp in place, segment
    sums over the grid, a cumulative sum. Chunks of about ``chunk_elems`` scores (4-8 MB)."""
    import torch
    tx = torch.from_numpy(x).to(dtype)
    txp = torch.from_numpy(xp).to(dtype)
    yt = torch.from_numpy(y).to(dtype).T  # (d, K) view: the matmul reads it transposed
    n = tx.shape[0]
    k_max = int(grid[-1])
    yt = yt[:, :k_max]
    edges = [0] + [int(k) for k in grid]
    chunk_a = max(1, min(n, chunk_elems // k_max))
    out = torch.empty((n, grid.size), dtype=dtype)
    with torch.inference_mode():
        s0 = (tx * txp).sum(1, keepdim=True) / tau
        xs = tx / tau
        buf = torch.empty((chunk_a, k_max), dtype=dtype)
        seg = torch.empty((chunk_a, grid.size), dtype=dtype)
        for a0 in range(0, n, chunk_a):
            a1 = min(n, a0 + chunk_a)
            m = a1 - a0
            sc = buf[:m]
            torch.matmul(xs[a0:a1], yt, out=sc)
            sc.sub_(s0[a0:a1]).exp_()
            sg = seg[:m]
            for g in range(grid.size):
                torch.sum(sc[:, edges[g]:edges[g + 1]], dim=1, out=sg[:, g])
            torch.log1p(torch.cumsum(sg, dim=1), out=out[a0:a1])
    return out.double().numpy()


def serve(call, dst, extra) -> int:
    """Warm-up call per precision (outputs to ``dst``), then time one call per stdin line."""
    outs = {f"out_{k}": call(k) for k in ("f32", "f64")}
    np.savez(dst, **outs, **extra())
    print("ready", flush=True)
    for line in sys.stdin:
        which = line.strip()
        if which not in ("f32", "f64"):
            break
        t0 = time.perf_counter()
        call(which)
        print(f"{time.perf_counter() - t0!r}", flush=True)
    return 0


def _main(argv):
    import torch
    z = np.load(argv[0])
    x, xp, y, tau, grid = z["x"], z["xp"], z["y"], float(z["tau"]), z["grid"]
    dts = {"f32": torch.float32, "f64": torch.float64}
    return serve(lambda k: torch_single_pass(x, xp, y, tau, grid, dts[k]), argv[1],
                 lambda: {"torch_threads": torch.get_num_threads(),
                          # the other contender's library must not be loaded here
                          "foreign_loaded": "simkit" in sys.modules or "numba" in sys.modules})


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
