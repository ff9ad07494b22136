"""Benchmark: ``simkit.diagnose`` at scale, the exact curve included.

Run from the repository root::

    python benchmarks/bench_diagnose.py             # both cases at N / 20, 15 rounds, benchmarks/results/diagnose.json
    python benchmarks/bench_diagnose.py --scale 1   # the full sizes (15 rounds: about 10 minutes each)
    python benchmarks/bench_diagnose.py --quick     # N / 20, 3 rounds (smoke test, nothing written)

Cases (each in a fresh process, so that its peak resident set size is its own), at N / ``--scale``:

* ``100k x 256``: N = 100,000 rows in d = 256, 100 classes (random unit means plus isotropic noise
  of norm ~2: same-class cosines ~0.2), labels as positives, tau = 0.2, batch size 256 with
  symmetric NT-Xent (k = 510);
* ``200k x 64``: N = 200,000 rows in d = 64, 1000 classes, same construction, tau = 0.1, k = 1024.

Defaults of ``diagnose`` throughout (2048 anchors, the exact curve's anchors by its work budget,
k_max = 2^20, 2^15 Monte Carlo tuples). There is no second contender: no other tool computes the
exact finite-k curve, and the one number a user would otherwise compute (a NumPy softmax
cross-entropy) is a small part of the work, so the figure is a throughput. Each case's process makes
``--rounds`` timed calls on the same data (benchmarks/_rounds.py with one contender): the median
seconds of a call, with a 95% percentile bootstrap interval over rounds, and rows per second. Also
measured: the peak RSS of the process before and after the calls (``resource.getrusage``:
interpreter, data and working memory), and the 1-minute load average before each call, since the
machine is shared. Targets, at the full sizes only (``--scale 1``): 30 s and 1 GiB per case on 2
cores; the time target counts as met when the interval's upper end is below it.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # benchmark the working tree
sys.path.insert(0, str(ROOT / "benchmarks"))

import numpy as np  # noqa: E402

import _rounds  # noqa: E402

TARGET_S = 30.0
TARGET_MIB = 1024.0
CASES = {"100k x 256": dict(n=100_000, d=256, n_classes=100, tau=0.2, batch_size=256, symmetric=True),
         "200k x 64": dict(n=200_000, d=64, n_classes=1000, tau=0.1, k=1024)}


def make_data(n: int, d: int, n_classes: int, noise: float = 2.0, seed: int = 20261201):
    rng = np.random.default_rng(seed)
    means = rng.normal(size=(n_classes, d))
    means /= np.linalg.norm(means, axis=1, keepdims=True)
    labels = rng.integers(0, n_classes, size=n)
    x = rng.normal(scale=noise / np.sqrt(d), size=(n, d))
    for lo in range(0, n, 8192):  # in place: no (N, d) temporary in the process's peak
        x[lo:lo + 8192] += means[labels[lo:lo + 8192]]
    return x, labels


def one_case(name: str, scale: int, rounds: int) -> dict:
    """Run one case in this process (called in a child): ``rounds`` timed calls; its measurements."""
    import simkit
    c = dict(CASES[name])
    n, d, n_classes = c.pop("n") // scale, c.pop("d"), c.pop("n_classes")
    x, labels = make_data(n, d, n_classes)
    simkit.diagnose(x[:500], labels=labels[:500], tau=c["tau"], n_tuples=64)  # compile / load the jitted code
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    last = {}

    def call():
        dg = simkit.diagnose(x, labels=labels, **c)
        last.update(dg=dg, kn=dg.k_needed(), bias=dg.bias_at())

    t = _rounds.interleaved({"diagnose": call}, rounds, cpu=True)
    rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    dg, kn, bias = last["dg"], last["kn"], last["bias"]
    full = scale == 1
    sec = _rounds.summarise(t["seconds"]["diagnose"], target=TARGET_S if full else None, target_kind="at most",
                            means="seconds of one diagnose call (k_needed and bias_at included)")
    rows = _rounds.summarise(n / np.asarray(t["seconds"]["diagnose"]), means="rows per second")
    return {
        "case": name, "params": {"n_rows": n, "dim": d, "n_classes": n_classes, "scale": scale, **c},
        **t, "seconds_per_call": sec, "rows_per_s": rows,
        "n_anchors": int(dg._design_a.rows.size), "n_exact_anchors": int(dg._design_e.rows.size),
        "k_max": dg.k_max, "tuples_per_anchor": dg.tuples_per_anchor,
        "target_s": TARGET_S if full else None, "target_mib": TARGET_MIB if full else None,
        "peak_rss_mib_before_calls": round(rss0, 1), "peak_rss_mib": round(rss1, 1),
        "within_memory_target": bool(rss1 <= TARGET_MIB) if full else None,
        "embeddings_mib_float64": round(x.nbytes / 2**20, 1),
        "results_of_last_call": {
            "ce": dg.ce, "ce_mcse": dg.ce_mcse, "c1": dg.c1, "c1_mcse": dg.c1_mcse, "c2": dg.c2,
            "c2_mcse": dg.c2_mcse, "expansion_scale": dg.expansion_scale, "k": dg.k,
            "bias_at_k": bias.value, "bias_at_k_mcse": bias.mcse, "bias_source": bias.source,
            "eps": dg.eps, "k_needed": kn.k, "k_needed_low": kn.low, "k_needed_high": kn.high,
            "k_needed_source": kn.source, "expansion_used": dg.expansion_ok, "slope_note": dg.slope_note,
            "top1": dg.retrieval.get("top1", (None, None))[0], "recall10": dg.retrieval.get("rec10", (None, None))[0]},
    }


def main(argv=None) -> int:
    ap = _rounds.parser(__doc__, "diagnose.json", rounds=15, quick="N / 20, 3 rounds, nothing written unless --out")
    ap.add_argument("--scale", type=int, default=20, help="N / scale rows (1: the full sizes and their targets)")
    ap.add_argument("--case", default=None, help=argparse.SUPPRESS)  # child process: one case
    args = _rounds.parse(ap, argv)
    if args.quick:
        args.scale = 20
    if args.scale < 1:
        ap.error(f"argument --scale: must be >= 1, got {args.scale}")
    if args.case is not None:
        print(json.dumps(one_case(args.case, args.scale, args.rounds), default=float))
        return 0
    meta = _rounds.meta_start()
    cases = []
    for name in CASES:
        proc = subprocess.run([sys.executable, __file__, "--case", name, "--scale", str(args.scale),
                               "--rounds", str(args.rounds), *(["--quick"] if args.quick else [])],
                              capture_output=True, text=True, check=True)
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        cases.append(r)
        tgt = "" if r["target_s"] is None else f" (target <= {r['target_s']:.0f} s: {'met' if r['seconds_per_call']['met'] else 'not shown'})"
        print(f"{name} / {args.scale} = {r['params']['n_rows']} rows x {r['params']['dim']}: "
              f"{_rounds.fmt(r['seconds_per_call'], ' s')} a call{tgt}, "
              f"{_rounds.fmt(r['rows_per_s'], ' rows/s', 0)}, {r['rounds']} rounds, load "
              f"{min(r['load_1min_per_round'])}-{max(r['load_1min_per_round'])}; peak RSS {r['peak_rss_mib']:.0f} MiB",
              flush=True)
    meta.update(numpy=np.__version__)
    doc = _rounds.document("diagnose", meta, cases)
    if args.out is not None:
        _rounds.write(args.out, doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
