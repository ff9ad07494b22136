"""Statistical efficiency of the C1 gap estimator, and the choice of the block size.

(a) MCSE^2 x seconds of gap_k at k = 1024 (uniform pi on S^2, vMF kernel kappa = 10, tau = 0.1,
    where the exact gap is known), for
    * simkit: blocks of anchors sharing K negatives, exact l_inf subtracted, control variates with
      pilot coefficients (simkit.estimators.infonce.GapEstimator);
    * plain Monte Carlo: every anchor draws its own k fresh negatives, estimate
      mean(l_k) - log k - CE with the exact CE, no control variate.
    The figure of merit is MCSE^2 x seconds (smaller is better; it is the variance per second of
    work); the ratio plain / simkit is the efficiency gain.
(b) Block size: for the default rate_k settings, MCSE^2 x seconds of gap_k at several k for
    anchors-per-block B in {32, ..., 1024} at K_max = 65536 (same total anchors), to choose B.

Run: ``python benchmarks/bench_efficiency.py [--quick]``; results also in benchmarks/results/efficiency.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

import simkit
from simkit import exact
from simkit.estimators.infonce import GapEstimator


def plain_mc(pi, kernel, tau, k, n_anchors, rng, ce, chunk=64):
    """Plain Monte Carlo, vectorised: every anchor has its own k fresh negatives; no control variates."""
    from scipy.special import logsumexp
    vals = []
    for a0 in range(0, n_anchors, chunk):
        c = min(chunk, n_anchors - a0)
        x = pi.rvs(c, rng=rng)
        xp = kernel.sample(x, rng=rng)
        y = pi.rvs(c * k, rng=rng).reshape(c, k, -1)
        s0 = np.einsum("cd,cd->c", x, xp) / tau
        s = np.einsum("cd,ckd->ck", x, y) / tau
        loss = -s0 + logsumexp(np.concatenate([s0[:, None], s], axis=1), axis=1)
        vals.append(loss - np.log(k) - ce)
    return np.concatenate(vals)


def part_a(quick: bool) -> dict:
    pi, kernel, tau, k = simkit.Uniform(3), simkit.VMFKernel(10.0), 0.1, 1024
    ce = exact.cross_entropy(pi, kernel, tau)
    truth = float(exact.gap_exact(kernel, 3, tau, [k])[0])
    rng = np.random.default_rng(11)
    # plain Monte Carlo
    n_plain = 20000 if quick else 200000
    plain_mc(pi, kernel, tau, k, 10, rng, ce)  # warm-up (compilation)
    t0 = time.perf_counter()
    v = plain_mc(pi, kernel, tau, k, n_plain, rng, ce)
    t_plain = time.perf_counter() - t0
    mcse_plain = v.std(ddof=1) / np.sqrt(n_plain)
    # simkit
    est = GapEstimator(pi, kernel, tau, k)
    coef = est.calibrate(256, np.random.default_rng(12), n_blocks=2)
    n_blocks = 32 if quick else 128
    est.block(16, rng, coef)
    t0 = time.perf_counter()
    blocks = np.array([est.block(256, np.random.default_rng([13, b]), coef)["gap_cv"][-1] for b in range(n_blocks)])
    t_sim = time.perf_counter() - t0
    mcse_sim = blocks.std(ddof=1) / np.sqrt(n_blocks)
    out = {
        "k": k, "truth": truth,
        "plain": {"estimate": float(v.mean()), "mcse": float(mcse_plain), "seconds": t_plain, "anchors": n_plain,
                  "mcse2_x_s": float(mcse_plain**2 * t_plain)},
        "simkit": {"estimate": float(blocks.mean()), "mcse": float(mcse_sim), "seconds": t_sim,
                   "anchors": 256 * n_blocks, "mcse2_x_s": float(mcse_sim**2 * t_sim)},
    }
    out["gain"] = out["plain"]["mcse2_x_s"] / out["simkit"]["mcse2_x_s"]
    print(f"(a) gap_k at k = {k}: exact {truth:.6e}")
    for name in ("plain", "simkit"):
        r = out[name]
        print(f"    {name:<7} {r['estimate']:.6e} ± {r['mcse']:.2e}  ({r['anchors']} anchors, {r['seconds']:.2f} s)"
              f"  MCSE^2 x s = {r['mcse2_x_s']:.3e}")
    print(f"    efficiency gain (plain / simkit): {out['gain']:.3g}x")
    return out


def part_b(quick: bool) -> dict:
    from simkit.distributions.designs import RATE_SETTINGS as SETTINGS, build_pi
    k_max = 4096 if quick else 65536
    total = 4096 if quick else 16384
    sizes = [32, 64, 128, 256, 512, 1024]
    ks = [64, 1024, k_max]
    rows = []
    print(f"(b) block size at K_max = {k_max}, {total} anchors per configuration; MCSE^2 x s (relative to the best)")
    for name in ("uniform-d3", "mixture-d16"):
        family, d, kp, km, tau = SETTINGS[name]
        cell = {"setting": name, "pi": family, "dim": d, "kappa_pi": kp, "kappa_m": km, "tau": tau}
        est = GapEstimator(build_pi(cell), simkit.VMFKernel(km), tau, k_max)
        coef = est.calibrate(256, np.random.default_rng(5), n_blocks=2)
        est.block(16, np.random.default_rng(0), coef)
        grid = list(est.grid)
        res = {}
        for b in sizes:
            nb = total // b
            t0 = time.perf_counter()
            g = np.array([est.block(b, np.random.default_rng([21, b, i]), coef)["gap_cv"] for i in range(nb)])
            secs = time.perf_counter() - t0
            mcse = g.std(axis=0, ddof=1) / np.sqrt(nb)
            res[b] = {"seconds": secs, "mcse2_x_s": {int(k): float(mcse[grid.index(k)] ** 2 * secs) for k in ks}}
        for k in ks:
            best = min(res[b]["mcse2_x_s"][k] for b in sizes)
            line = "  ".join(f"B={b}: {res[b]['mcse2_x_s'][k] / best:5.2f}" for b in sizes)
            print(f"    {name:<12} k={k:<6} {line}")
        print(f"    {name:<12} seconds: " + "  ".join(f"B={b}: {res[b]['seconds']:.2f}" for b in sizes))
        rows.append({"setting": name, "k_max": k_max, "results": {str(b): r for b, r in res.items()}})
    return {"rows": rows}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--part", choices=("a", "b", "both"), default="both")
    args = ap.parse_args(argv)
    out = {}
    if args.part in ("a", "both"):
        out["efficiency"] = part_a(args.quick)
    if args.part in ("b", "both"):
        out["block_size"] = part_b(args.quick)
    d = Path(__file__).parent / "results"
    d.mkdir(exist_ok=True)
    (d / "efficiency.json").write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
