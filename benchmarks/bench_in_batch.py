"""Throughput of the in-batch pair kernel against the i.i.d. kernel, in interleaved rounds.

Both contenders compute, for n anchors and the same number K of negatives, the prefix sums of
exp(x.y/tau - c) over the grid 1, 2, 4, ...:

* iid  -- simkit._jit.infonce.prefix_sums over K negatives (the i.i.d. estimator's core);
* pair -- simkit._jit.in_batch.pair_prefix_sums over K/2 pairs (y, y'), i.e. the same K negatives
          (NT-Xent's denominator at every batch size, both members' sums kept apart).

Figures are negatives per second (n K / seconds). The method (benchmarks/_rounds.py): each round
times both contenders once, in alternating order, on the same inputs; the statistic is the median over
rounds of the per-round ratio pair/iid throughput (= iid seconds / pair seconds), with a percentile
bootstrap 95% interval (10 000 resamples of the rounds). Interleaving makes the ratio robust to the
load of a shared machine (other jobs slow both contenders of a round alike); the absolute figures are
not. Writes benchmarks/results/in_batch.json in the layout of benchmarks/_rounds.py.

Run: ``python benchmarks/bench_in_batch.py [--rounds 21] [--anchors 2048] [--negatives 16384]``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the working tree
sys.path.insert(0, str(Path(__file__).resolve().parent))

import _rounds  # noqa: E402
from simkit._jit.blas import single_threaded_blas  # noqa: E402
from simkit._jit.in_batch import pair_prefix_sums  # noqa: E402
from simkit._jit.infonce import prefix_sums, tile_negatives  # noqa: E402


def _unit(v):
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def main(argv=None) -> dict:
    ap = _rounds.parser(__doc__, "in_batch.json", rounds=21)
    ap.add_argument("--anchors", type=_rounds.positive_int, default=2048)
    ap.add_argument("--negatives", type=_rounds.positive_int, default=1 << 14)
    ap.add_argument("--dims", default="3,32")
    args = _rounds.parse(ap, argv)
    meta = _rounds.meta_start()
    rng = np.random.default_rng(0)
    tau, n, k = 0.1, args.anchors, args.negatives
    cases = []
    for d in (int(v) for v in args.dims.split(",")):
        x = _unit(rng.normal(size=(n, d)))
        y = _unit(rng.normal(size=(k, d)))
        shift = np.zeros(n)
        grid_i = 1 << np.arange(int(np.log2(k)) + 1, dtype=np.int64)
        grid_p = grid_i[grid_i <= k // 2]
        ti, ty, typ = tile_negatives(y), tile_negatives(y[: k // 2]), tile_negatives(y[k // 2:])
        out_i, out_p = np.empty((n, grid_i.size)), np.empty((n, grid_p.size, 2))

        def run_iid():
            prefix_sums(x, ti, k, 1.0 / tau, shift, grid_i, out_i)

        def run_pair():
            pair_prefix_sums(x, ty, typ, k // 2, 1.0 / tau, shift, grid_p, out_p)

        with single_threaded_blas():
            run_iid(), run_pair()  # compile / warm
            np.testing.assert_allclose(out_p[:, -1, :].sum(axis=1), out_i[:, -1], rtol=1e-12)
            t = _rounds.interleaved({"iid": run_iid, "pair": run_pair}, args.rounds)
        r = _rounds.ratio(t["seconds"], "iid", "pair",
                          means="pair/iid throughput of the same negatives = iid seconds / pair seconds")
        ti_, tp_ = np.array(t["seconds"]["iid"]), np.array(t["seconds"]["pair"])
        cases.append({"case": f"d={d}", "params": {"d": d, "anchors": n, "negatives": k, "tau": tau}, **t,
                      "ratios": {"pair/iid": r},
                      "iid_negatives_per_s_median": float(n * k / np.median(ti_)),
                      "pair_negatives_per_s_median": float(n * k / np.median(tp_))})
        print(f"d = {d}: pair/iid throughput ratio {_rounds.fmt(r, digits=3)} over {args.rounds} rounds; "
              f"iid {n * k / np.median(ti_) / 1e6:.0f} M/s, pair {n * k / np.median(tp_) / 1e6:.0f} M negatives/s")
    doc = _rounds.document("in_batch", meta, cases)
    if args.out is not None:
        _rounds.write(args.out, doc)
    return doc


if __name__ == "__main__":
    main()
