"""Time per gradient evaluation of the empirical InfoNCE risk: simkit (Numba) vs PyTorch autograd.

Both contenders compute the same thing in float64, in one process, side by side, on the same inputs:
``R_hat_{n,k}(theta) = (1/n) sum_i l_k(theta; x_i, x+_i, y_i1..y_ik)`` and its gradient in theta, for
the embedding families of :mod:`simkit.embeddings.embedding`:

* simkit -- :meth:`simkit.embeddings.training.EmpiricalRisk.value_and_grad` (analytic gradient, Numba,
  parallel over tuples, bit-reproducible);
* torch-f64 -- the loss written in PyTorch (embed, normalise, scores, ``logsumexp``) and
  ``backward()``; CPU, float64, default thread count.

The headline configuration is n = 4096 tuples, k = 64 independent negatives per tuple, p = 3,
d = 16, linear embedding; further rows vary the family and the negative sharing. Each row is timed
in interleaved rounds (benchmarks/_rounds.py): a round times one gradient evaluation of each
contender, the order alternating between rounds; the ratio is the median over rounds of the
per-round torch seconds / simkit seconds (> 1: simkit faster) with a 95% bootstrap interval. No
target applies. Every row also reports the largest gradient difference between the two, relative
to the gradient's largest component (from the warm-up calls, outside the timings).

Run: ``python benchmarks/bench_training.py`` (16 rounds a row; results to
benchmarks/results/training.json, layout of benchmarks/_rounds.py), ``--quick`` for a smoke test
(headline row, 3 rounds, nothing written unless ``--out`` is given).
"""

from __future__ import annotations

import platform
import sys
import time
from pathlib import Path

from _torch_first import SPINCOUNT_AT_TORCH_IMPORT, TORCH_FIRST  # noqa: I001  (before simkit: see there)

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # benchmark the working tree, not some other installed copy

import _rounds  # noqa: E402

import numpy as np  # noqa: E402

import simkit  # noqa: E402,F401  (sets GOMP_SPINCOUNT unless set; PyTorch's libgomp has loaded already)
from simkit.embeddings.embedding import LinearEmbedding, TwoLayerEmbedding  # noqa: E402
from simkit.distributions.kernels import VMFKernel  # noqa: E402
from simkit.distributions.sphere import Uniform  # noqa: E402
from simkit.embeddings.training import EmpiricalRisk, TrainingSample  # noqa: E402

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


def main(argv=None):
    ap = _rounds.parser(__doc__, "training.json",
                        quick="smoke test: only the headline row, 3 rounds, nothing written unless --out is given")
    args = _rounds.parse(ap, argv)
    import numba
    import torch

    meta = _rounds.meta_start()
    print(f"machine: {platform.platform()}, {meta['cpus']} CPUs; numba threads {numba.get_num_threads()}; "
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
    header = (f"{'family':<10} {'negatives':<11} {'simkit ms':>10} {'torch ms':>10} "
              f"{'torch / simkit [95% CI]':<26} {'rel grad diff':>14}")
    print(f"n = {n}, k = {k}, p = {p}, d = {d}, tau = {TAU}; {args.rounds} interleaved rounds a row, "
          "one evaluation per contender a round; ms: medians over rounds")
    print(header)
    print("-" * len(header))
    cases = []
    for family, shared, m in configs:
        sample = TrainingSample.draw(pi, kernel, n, k, rng=rng, shared=shared)
        risk = EmpiricalRisk(sample, TAU)
        phi = (LinearEmbedding.random(p, d, rng=rng) if family == "linear"
               else TwoLayerEmbedding.random(p, d, m, rng=rng))
        run = torch_value_and_grad(phi, sample, TAU)
        f_s, g_s = risk.value_and_grad(phi)  # warm-up calls, outside the timings, and the agreement check
        f_t, g_t = run()
        rel = float(np.max(np.abs(g_s - g_t)) / np.max(np.abs(g_s)))
        t = _rounds.interleaved({"simkit": lambda: risk.value_and_grad(phi), "torch-f64": run}, args.rounds,
                                cpu=True)
        r = _rounds.ratio(t["seconds"], "torch-f64", "simkit",
                          means="PyTorch autograd seconds / simkit seconds per gradient evaluation (> 1: simkit faster)")
        med = {name: float(np.median(v)) for name, v in t["seconds"].items()}
        neg = "shared" if shared else "per tuple"
        print(f"{family:<10} {neg:<11} {1e3 * med['simkit']:>10.1f} {1e3 * med['torch-f64']:>10.1f} "
              f"{_rounds.fmt(r):<26} {rel:>14.1e}", flush=True)
        cases.append({"case": f"{family} {neg}",
                      "params": {"family": family, "hidden": m, "shared": shared, "n": n, "k": k, "p": p, "d": d,
                                 "tau": TAU},
                      **t, "ratios": {"torch / simkit": r}, "seconds_median": med,
                      "value_abs_diff": abs(f_s - f_t), "grad_rel_diff": rel})
    meta.update(numba_threads=numba.get_num_threads(), torch=torch.__version__,
                torch_threads=torch.get_num_threads(), torch_imported_before_simkit=TORCH_FIRST,
                gomp_spincount_at_torch_import=SPINCOUNT_AT_TORCH_IMPORT)
    doc = _rounds.document("InfoNCE risk and gradient, simkit vs PyTorch float64 autograd", meta, cases,
                           compile_s=compile_s)
    print(f"load average (1, 5, 15 min): start {tuple(meta['load_average_start'])}, "
          f"end {tuple(doc['meta']['load_average_end'])}")
    if args.out is not None:
        _rounds.write(args.out, doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
