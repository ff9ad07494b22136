"""Throughput of the InfoNCE estimator against the baselines a user would otherwise write.

All contenders compute, for n anchors with positives and K_max shared negatives, the loss
l_k = -s0 + log(e^{s0} + sum_{j<=k} e^{s_j}) for every k of the grid 1, 2, 4, ..., K_max, in one
process, side by side, on the same inputs:

* simkit       -- simkit.infonce.infonce_losses (Numba, fused score/exp/prefix sums, float64);
* numpy-tuned  -- matmul on cache-sized chunks into a reused buffer, in-place exp, segment sums
                  with np.add.reduceat and a cumulative sum over the grid (float64);
* torch-f32 / torch-f64 -- PyTorch on the CPU: logits = x @ y.T / tau on anchor chunks, then
                  torch.nn.functional.cross_entropy on the first k+1 columns for every k of the grid
                  (the direct way to get l_k from PyTorch).

Figures are pair evaluations per second (n * K_max / seconds), best of ``--repeats`` (default 7)
consecutive calls per contender (PyTorch: one call at K_max = 65536); every
contender's output is checked against simkit's (largest absolute difference, in nats). Numba compilation is done
before timing and reported separately. Run: ``python benchmarks/bench_infonce.py`` (add
``--quick`` for a short run). Results also go to benchmarks/results/infonce.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

import simkit  # noqa: F401  (sets GOMP_SPINCOUNT before any OpenMP runtime loads, for all contenders)
from simkit.infonce import infonce_losses
from simkit.sphere import Uniform

TAU = 0.1


def numpy_tuned(x, xp, y, tau, grid, chunk_a=256, chunk_n=4096):
    """Cache-blocked NumPy: returns l_k (n, G) in float64."""
    n, d = x.shape
    k_max = int(grid[-1])
    s0 = np.einsum("ij,ij->i", x, xp) / tau
    out = np.empty((n, grid.size))
    chunk_n = min(chunk_n, k_max)
    bufs = {}  # contiguous reused buffers, one per chunk shape
    lo_edges = np.concatenate([[0], grid[:-1]])
    for a0 in range(0, n, chunk_a):
        a1 = min(n, a0 + chunk_a)
        xa = x[a0:a1] / tau
        sh = s0[a0:a1, None]
        seg_tot = np.zeros((a1 - a0, grid.size))
        for j0 in range(0, k_max, chunk_n):
            j1 = min(k_max, j0 + chunk_n)
            shape = (a1 - a0, j1 - j0)
            sc = bufs.get(shape)
            if sc is None:
                sc = bufs[shape] = np.empty(shape)
            np.matmul(xa, y[j0:j1].T, out=sc)
            sc -= sh
            np.exp(sc, out=sc)
            # grid segments (k_{g-1}, k_g] that intersect [j0, j1)
            for g in range(grid.size):
                lo, hi = max(lo_edges[g], j0), min(grid[g], j1)
                if hi > lo:
                    seg_tot[:, g] += sc[:, lo - j0:hi - j0].sum(axis=1)
        out[a0:a1] = np.log1p(np.cumsum(seg_tot, axis=1))
    return out


def torch_ce(x, xp, y, tau, grid, dtype, chunk_a=256):
    import torch
    import torch.nn.functional as F
    tx = torch.from_numpy(x).to(dtype)
    txp = torch.from_numpy(xp).to(dtype)
    ty = torch.from_numpy(y).to(dtype)
    n = tx.shape[0]
    out = np.empty((n, grid.size))
    with torch.no_grad():
        for a0 in range(0, n, chunk_a):
            xa = tx[a0:a0 + chunk_a]
            pos = (xa * txp[a0:a0 + chunk_a]).sum(1, keepdim=True) / tau
            logits = torch.cat([pos, xa @ ty.T / tau], dim=1)
            target = torch.zeros(xa.shape[0], dtype=torch.long)
            for g, k in enumerate(grid):
                out[a0:a0 + xa.shape[0], g] = F.cross_entropy(logits[:, :k + 1], target, reduction="none").double().numpy()
    return out


def best_times(fns, repeats):
    """Best wall time of each zero-argument callable over ``repeats`` consecutive calls (a
    ``(fn, r)`` pair: ``r`` calls). Contenders run one after the other, not interleaved: OpenBLAS
    threads keep spinning for a while after a NumPy/PyTorch matmul, which slowed whichever
    contender ran next by up to 30% in an interleaved trial. Returns [(seconds, last result)]."""
    out = []
    for f in fns:
        fn, reps = f if isinstance(f, tuple) else (f, repeats)
        best, res = float("inf"), None
        for _ in range(reps):
            t0 = time.perf_counter()
            res = fn()
            best = min(best, time.perf_counter() - t0)
        out.append((best, res))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--no-torch", action="store_true")
    args = ap.parse_args(argv)
    import numba
    have_torch = False
    if not args.no_torch:
        try:
            import torch
            have_torch = True
        except ImportError:
            print("PyTorch not installed (pip install 'simkit[bench]'); skipping its rows")
    sizes = [(3, 1024), (3, 65536), (32, 1024), (32, 65536)]
    n = 1024 if args.quick else 4096
    rng = np.random.default_rng(0)
    print(f"machine: {platform.platform()}, {os.cpu_count()} CPUs; numba threads {numba.get_num_threads()}"
          + (f"; torch threads {torch.get_num_threads()}, torch {torch.__version__}" if have_torch else ""))
    # compile before timing
    t0 = time.perf_counter()
    xw = Uniform(3).rvs(8, rng=rng)
    infonce_losses(xw, xw, Uniform(3).rvs(16, rng=rng), TAU, np.array([1, 2, 16]))
    xw = Uniform(32).rvs(8, rng=rng)
    infonce_losses(xw, xw, Uniform(32).rvs(16, rng=rng), TAU, np.array([1, 2, 16]))
    compile_s = time.perf_counter() - t0
    print(f"Numba compile/load time of the estimator (not in the figures): {compile_s:.2f} s")
    rows = []
    header = f"{'d':>3} {'K_max':>6} {'contender':<12} {'Mpairs/s':>10} {'simkit x':>9} {'max abs err':>12}"
    print(header)
    print("-" * len(header))
    for d, k_max in sizes:
        nn = n if k_max <= 4096 else max(256, n // 4)
        x = Uniform(d).rvs(nn, rng=rng)
        xp = simkit.VMFKernel(10.0).sample(x, rng=rng)
        y = Uniform(d).rvs(k_max, rng=rng)
        grid = 1 << np.arange(int(np.log2(k_max)) + 1)
        pairs = nn * k_max
        names = ["simkit", "numpy-tuned"]
        fns = [lambda: infonce_losses(x, xp, y, TAU, grid), lambda: numpy_tuned(x, xp, y, TAU, grid)]
        if have_torch:
            reps = 1 if k_max > 4096 else args.repeats
            names += ["torch-f32", "torch-f64"]
            fns += [(lambda: torch_ce(x, xp, y, TAU, grid, torch.float32), reps),
                    (lambda: torch_ce(x, xp, y, TAU, grid, torch.float64), reps)]
        timed = best_times(fns, args.repeats)
        t_s, ref = timed[0]
        contenders = [(name, t, out) for name, (t, out) in zip(names, timed)]
        for name, t, out in contenders:
            err = float(np.max(np.abs(out - ref)))  # nats
            rate = pairs / t
            ratio = t / t_s
            rows.append({"d": d, "k_max": k_max, "n": nn, "contender": name, "pairs_per_s": rate,
                         "simkit_speedup": ratio, "max_abs_err_nat": err, "seconds": t})
            print(f"{d:>3} {k_max:>6} {name:<12} {rate / 1e6:>10.1f} {ratio:>9.2f} {err:>12.1e}")
    out_dir = Path(__file__).parent / "results"
    out_dir.mkdir(exist_ok=True)
    (out_dir / "infonce.json").write_text(json.dumps({
        "platform": platform.platform(), "cpus": os.cpu_count(), "numba_threads": numba.get_num_threads(),
        "compile_s": compile_s, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
