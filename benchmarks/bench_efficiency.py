"""Statistical efficiency of the C1 gap estimator, and the choice of the block size.

(a) MCSE^2 x seconds of gap_k at k = 1024 (uniform pi on S^2, vMF kernel kappa = 10, tau = 0.1,
    where the exact gap is known), for
    * simkit: blocks of anchors sharing K negatives, exact l_inf subtracted, control variates with
      pilot coefficients (simkit.estimators.infonce.GapEstimator);
    * plain Monte Carlo: every anchor draws its own k fresh negatives, estimate
      mean(l_k) - log k - CE with the exact CE, no control variate.
    The figure of merit is MCSE^2 x seconds (smaller is better; it is the variance per second of
    work); the ratio plain / simkit is the efficiency gain (target >= 100x).
(b) Block size: for the default rate_k settings, MCSE^2 x seconds of gap_k at several k for
    anchors-per-block B in {32, ..., 1024} at K_max = 65536 (same total anchors), to choose B.

Every ratio comes from interleaved rounds (benchmarks/_rounds.py): a round runs every contender
once (fresh seeds each round, order alternating), each run giving its own MCSE (from its anchors in
(a), from its blocks in (b)) and its wall-clock seconds; the per-round ratio is of the products
MCSE^2 x seconds, summarised by its median over rounds with a 95% bootstrap interval. In (b) a
block size's ratio is its product over the smallest product of that round (>= 1; 1 is the best).
A target counts as met when the interval's lower end clears it.

Run: ``python benchmarks/bench_efficiency.py`` (16 rounds; results to
benchmarks/results/efficiency.json, layout of benchmarks/_rounds.py); ``--quick`` is a smoke test
(smaller runs, 3 rounds, nothing written unless ``--out`` is given).
"""

from __future__ import annotations

import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # benchmark the working tree, not some other installed copy

import _rounds  # noqa: E402

import numpy as np  # noqa: E402

import simkit  # noqa: E402
from simkit import exact  # noqa: E402
from simkit.estimators.infonce import GapEstimator  # noqa: E402

TARGET_A = 100.0  # required efficiency gain, plain / simkit


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


def _pooled(est, mcse) -> dict:
    """Mean of the per-round estimates and its MCSE (independent rounds)."""
    est, mcse = np.asarray(est), np.asarray(mcse)
    return {"estimate": float(est.mean()), "mcse": float(np.sqrt(np.sum(mcse ** 2)) / est.size)}


def part_a(quick: bool, rounds: int) -> dict:
    pi, kernel, tau, k = simkit.Uniform(3), simkit.VMFKernel(10.0), 0.1, 1024
    ce = exact.cross_entropy(pi, kernel, tau)
    truth = float(exact.gap_exact(kernel, 3, tau, [k])[0])
    n_plain = 20000 if quick else 200000
    n_blocks = 32 if quick else 128
    est = GapEstimator(pi, kernel, tau, k)
    coef = est.calibrate(256, np.random.default_rng(12), n_blocks=2)
    plain_mc(pi, kernel, tau, k, 10, np.random.default_rng(11), ce)  # warm-up (compilation)
    est.block(16, np.random.default_rng(11), coef)
    runs = {"plain": [], "simkit": []}  # per round: (estimate, mcse)

    def plain():
        v = plain_mc(pi, kernel, tau, k, n_plain, np.random.default_rng([11, len(runs["plain"])]), ce)
        runs["plain"].append((float(v.mean()), float(v.std(ddof=1) / np.sqrt(n_plain))))

    def sim():
        r = len(runs["simkit"])
        g = np.array([est.block(256, np.random.default_rng([13, r, b]), coef)["gap_cv"][-1] for b in range(n_blocks)])
        runs["simkit"].append((float(g.mean()), float(g.std(ddof=1) / np.sqrt(n_blocks))))

    t = _rounds.interleaved({"plain": plain, "simkit": sim}, rounds, cpu=True)
    product = {n: [m ** 2 * s for (_, m), s in zip(runs[n], t["seconds"][n])] for n in runs}
    gain = _rounds.ratio(product, "plain", "simkit", target=TARGET_A,
                         means="per round: (MCSE^2 x seconds of plain Monte Carlo) / (the same of simkit)")
    anchors = {"plain": n_plain, "simkit": 256 * n_blocks}
    per = {n: {"anchors_per_round": anchors[n], **_pooled(*zip(*runs[n])),
               "estimate_per_round": [e for e, _ in runs[n]], "mcse_per_round": [m for _, m in runs[n]],
               "mcse2_x_s_per_round": product[n], "mcse2_x_s_median": float(np.median(product[n])),
               "seconds_median": float(np.median(t["seconds"][n]))} for n in runs}
    print(f"(a) gap_k at k = {k}: exact {truth:.6e}; {rounds} interleaved rounds")
    for name in ("plain", "simkit"):
        r = per[name]
        print(f"    {name:<7} {r['estimate']:.6e} ± {r['mcse']:.2e} (pooled over rounds; {r['anchors_per_round']} "
              f"anchors, {r['seconds_median']:.2f} s a round)  MCSE^2 x s median {r['mcse2_x_s_median']:.3e}")
    lo, hi = gain["ci95"]
    print(f"    efficiency gain (plain / simkit): {gain['median']:.3g}x [{lo:.3g}, {hi:.3g}]; target >= {TARGET_A:g}x: "
          f"{'met' if gain['met'] else 'not met'}")
    return {"case": f"gap_k, k = {k}", "params": {"k": k, "kappa": 10.0, "tau": tau, "dim": 3, "truth": truth},
            **t, "ratios": {"efficiency gain": gain}, "contenders": per}


def part_b(quick: bool, rounds: int) -> list[dict]:
    from simkit.distributions.designs import RATE_SETTINGS as SETTINGS, build_pi
    k_max = 4096 if quick else 65536
    total = 4096 if quick else 16384
    sizes = [32, 64, 128, 256, 512, 1024]
    ks = [64, 1024, k_max]
    cases = []
    print(f"(b) block size at K_max = {k_max}, {total} anchors per run, {rounds} interleaved rounds; "
          "MCSE^2 x s over the round's best, median [95% CI]")
    for name in ("uniform-d3", "mixture-d16"):
        family, d, kp, km, tau = SETTINGS[name]
        cell = {"setting": name, "pi": family, "dim": d, "kappa_pi": kp, "kappa_m": km, "tau": tau}
        est = GapEstimator(build_pi(cell), simkit.VMFKernel(km), tau, k_max)
        coef = est.calibrate(256, np.random.default_rng(5), n_blocks=2)
        est.block(16, np.random.default_rng(0), coef)
        grid = list(est.grid)
        mcse = {b: [] for b in sizes}  # per round: MCSE at each k of ks

        def run(b):
            def call():
                r, nb = len(mcse[b]), total // b
                g = np.array([est.block(b, np.random.default_rng([21, r, b, i]), coef)["gap_cv"] for i in range(nb)])
                m = g.std(axis=0, ddof=1) / np.sqrt(nb)
                mcse[b].append([float(m[grid.index(kk)]) for kk in ks])
            return call

        names = [f"B={b}" for b in sizes]
        t = _rounds.interleaved({f"B={b}": run(b) for b in sizes}, rounds, cpu=True)
        ratios, products = {}, {}
        for j, kk in enumerate(ks):
            prod = {f"B={b}": [m[j] ** 2 * s for m, s in zip(mcse[b], t["seconds"][f"B={b}"])] for b in sizes}
            products[str(kk)] = prod
            for b in sizes:
                ratios[f"k={kk} B={b}"] = _rounds.ratio(prod, f"B={b}", names,
                                                        means=f"per round: MCSE^2 x s of B = {b} over the "
                                                              "smallest of the round's block sizes (1 = best)")
            line = "  ".join(f"B={b}: {_rounds.fmt(ratios[f'k={kk} B={b}'], unit='')}" for b in sizes)
            print(f"    {name:<12} k={kk:<6} {line}")
        print(f"    {name:<12} seconds (median): "
              + "  ".join(f"B={b}: {np.median(t['seconds'][f'B={b}']):.2f}" for b in sizes), flush=True)
        cases.append({"case": f"block size, {name}", "params": {**cell, "k_max": k_max, "anchors_per_run": total,
                                                                 "ks": ks, "block_sizes": sizes},
                      **t, "ratios": ratios, "mcse_per_round": {str(b): v for b, v in mcse.items()},
                      "mcse2_x_s_per_round": products})
    return cases


def main(argv=None):
    ap = _rounds.parser(__doc__, "efficiency.json",
                        quick="smoke test: smaller runs, 3 rounds, nothing written unless --out is given")
    ap.add_argument("--part", choices=("a", "b", "both"), default="both")
    args = _rounds.parse(ap, argv)
    meta = _rounds.meta_start()
    print(f"machine: {platform.platform()}, {meta['cpus']} CPUs; load average {tuple(meta['load_average_start'])}")
    cases = []
    if args.part in ("a", "both"):
        cases.append(part_a(args.quick, args.rounds))
    if args.part in ("b", "both"):
        cases += part_b(args.quick, args.rounds)
    doc = _rounds.document("statistical efficiency of the C1 gap estimator and its block size", meta, cases,
                           quick=args.quick)
    print(f"load average at the end: {tuple(doc['meta']['load_average_end'])}")
    if args.out is not None:
        _rounds.write(args.out, doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
