"""Time per gradient evaluation of the empirical InfoNCE risk: simkit (Numba) vs PyTorch autograd.

Both contenders compute the same thing in float64, in one process, side by side, on the same inputs:
``R_hat_{n,k}(theta) = (1/n) sum_i l_k(theta; x_i, x+_i, y_i1..y_ik)`` and its gradient in theta, for
the embedding families of :mod:`simkit.embeddings.embedding`:

* simkit -- :meth:`simkit.embeddings.training.EmpiricalRisk.value_and_grad` (analytic gradient, Numba,
  parallel over tuples, bit-reproducible);
* torch-f64 -- the loss written in PyTorch (embed, normalise, scores, ``logsumexp``) and
  ``backward()``; CPU, float64, default thread count.

The headline configuration is n = 4096 tuples, k = 64 independent negatives per tuple, p = 3,
d = 16, linear embedding; further rows vary the family and the negative sharing. Figures are the
best of ``--repeats`` evaluations (the machine is shared: best-of is the least noisy statistic)
and the median; the ratio is torch time / simkit time (> 1: simkit faster). Every row also
reports the largest gradient difference between the two, relative to the gradient's largest
component. Run: ``python benchmarks/bench_training.py`` (``--quick`` for a short run). Results go
to benchmarks/results/training.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

from _torch_first import SPINCOUNT_AT_TORCH_IMPORT, TORCH_FIRST  # noqa: I001  (before simkit: see there)

import numpy as np

import simkit  # noqa: F401  (sets GOMP_SPINCOUNT unless set; PyTorch's libgomp has loaded already)
from simkit.embeddings.embedding import LinearEmbedding, TwoLayerEmbedding
from simkit.distributions.kernels import VMFKernel
from simkit.distributions.sphere import Uniform
from simkit.embeddings.training import EmpiricalRisk, TrainingSample

TAU = 0.125


def torch_value_and_grad(phi, sample: TrainingSample, tau: float):
    """PyTorch autograd of the same risk; returns (value, gradient in phi.params layout)."""
    import torch
    import torch.nn.functional as F

    x = torch.from_numpy(np.array(sample.x))
    xp = torch.from_numpy(np.array(sample.x_pos))
    y = torch.from_numpy(np.array(sample.negatives))
    if isinstance(phi, LinearEmbedding):
        params = [torch.tensor(np.array(phi.W), requires_grad=True)]

        def embed(z):
            return F.normalize(z @ params[0].T, dim=-1)
    else:
        params = [torch.tensor(np.array(a), requires_grad=True) for a in (phi.W1, phi.b1, phi.W2)]

        def embed(z):
            return F.normalize(torch.tanh(z @ params[0].T + params[1]) @ params[2].T, dim=-1)

    def run():
        for p in params:
            p.grad = None
        u, v, w = embed(x), embed(xp), embed(y)
        s0 = (u * v).sum(-1) / tau
        sn = (u @ w.T if sample.shared else torch.einsum("nd,nkd->nk", u, w)) / tau
        loss = (torch.logsumexp(torch.cat([s0[:, None], sn], dim=1), dim=1) - s0).mean()
        loss.backward()
        return float(loss.item()), np.concatenate([p.grad.numpy().ravel() for p in params])

    return run


def timed(fn, repeats):
    times = []
    out = None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), statistics.median(times), out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer repeats and only the headline row")
    ap.add_argument("--repeats", type=int, default=None)
    args = ap.parse_args(argv)
    import numba
    import torch

    load_start = os.getloadavg()
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    repeats = args.repeats or (5 if args.quick else 15)
    print(f"machine: {platform.platform()}, {os.cpu_count()} CPUs; numba threads {numba.get_num_threads()}; "
          f"torch {torch.__version__}, threads {torch.get_num_threads()}; float64 throughout")
    rng = np.random.default_rng(20260601)
    pi, kernel = Uniform(3), VMFKernel(8.0)
    n, k, p, d = 4096, 64, 3, 16
    configs = [("linear", False, None)]
    if not args.quick:
        configs += [("linear", True, None), ("two-layer", False, 32), ("two-layer", True, 32)]
    # compile (or load from cache) before timing
    t0 = time.perf_counter()
    warm = TrainingSample.draw(pi, kernel, 8, 4, rng=0)
    warm_s = TrainingSample.draw(pi, kernel, 8, 4, rng=0, shared=True)
    for ph in (LinearEmbedding.random(p, d, rng=0), TwoLayerEmbedding.random(p, d, 4, rng=0)):
        EmpiricalRisk(warm, TAU).value_and_grad(ph)
        EmpiricalRisk(warm_s, TAU).value_and_grad(ph)
    compile_s = time.perf_counter() - t0
    print(f"Numba compile/load time (not in the figures): {compile_s:.2f} s")
    header = (f"{'family':<10} {'negatives':<11} {'simkit ms':>10} {'torch ms':>10} {'ratio':>7} "
              f"{'(median ms: simkit / torch)':>28} {'rel grad diff':>14}")
    print(f"n = {n}, k = {k}, p = {p}, d = {d}, tau = {TAU}; best of {repeats}")
    print(header)
    print("-" * len(header))
    rows = []
    for family, shared, m in configs:
        sample = TrainingSample.draw(pi, kernel, n, k, rng=rng, shared=shared)
        risk = EmpiricalRisk(sample, TAU)
        phi = (LinearEmbedding.random(p, d, rng=rng) if family == "linear"
               else TwoLayerEmbedding.random(p, d, m, rng=rng))
        t_s, med_s, (f_s, g_s) = timed(lambda: risk.value_and_grad(phi), repeats)
        run = torch_value_and_grad(phi, sample, TAU)
        run()  # warm-up
        t_t, med_t, (f_t, g_t) = timed(run, repeats)
        rel = float(np.max(np.abs(g_s - g_t)) / np.max(np.abs(g_s)))
        ratio = t_t / t_s
        neg = "shared" if shared else "per tuple"
        print(f"{family:<10} {neg:<11} {1e3 * t_s:>10.1f} {1e3 * t_t:>10.1f} {ratio:>7.2f} "
              f"{f'{1e3 * med_s:.1f} / {1e3 * med_t:.1f}':>28} {rel:>14.1e}")
        rows.append({"family": family, "hidden": m, "shared": shared, "n": n, "k": k, "p": p, "d": d,
                     "tau": TAU, "simkit_s": t_s, "torch_s": t_t, "simkit_median_s": med_s,
                     "torch_median_s": med_t, "ratio_torch_over_simkit": ratio,
                     "value_abs_diff": abs(f_s - f_t), "grad_rel_diff": rel})
    out_dir = Path(__file__).parent / "results"
    out_dir.mkdir(exist_ok=True)
    (out_dir / "training.json").write_text(json.dumps({
        "platform": platform.platform(), "cpus": os.cpu_count(), "numba_threads": numba.get_num_threads(),
        "torch": torch.__version__, "torch_threads": torch.get_num_threads(), "repeats": repeats,
        "compile_s": compile_s, "torch_imported_before_simkit": TORCH_FIRST,
        "gomp_spincount_at_torch_import": SPINCOUNT_AT_TORCH_IMPORT, "started_utc": started,
        "loadavg_start": load_start, "loadavg_end": os.getloadavg(), "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
