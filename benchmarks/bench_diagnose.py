"""Benchmark: ``simkit.diagnose`` at scale, the exact curve included.

Run from the repository root::

    python benchmarks/bench_diagnose.py           # both cases below, results to benchmarks/results/diagnose.json
    python benchmarks/bench_diagnose.py --quick   # N / 10 (smoke test, nothing written)

Cases (each in a fresh process, so that its peak resident set size is its own):

* ``100k x 256``: N = 100,000 rows in d = 256, 100 classes (random unit means plus isotropic noise
  of norm ~2: same-class cosines ~0.2), labels as positives, tau = 0.2, batch size 256 with
  symmetric NT-Xent (k = 510);
* ``200k x 64``: N = 200,000 rows in d = 64, 1000 classes, same construction, tau = 0.1, k = 1024.

Defaults of ``diagnose`` throughout (2048 anchors, the exact curve's anchors by its work budget,
k_max = 2^20, 2^15 Monte Carlo tuples). Measured: the wall time of the call (data generation
excluded), the peak RSS of the process before and after it (``resource.getrusage``: interpreter,
data and working memory), and the load average, since the machine is shared.
Targets: 30 s and 1 GiB per case on 2 cores.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # benchmark the working tree

import numpy as np  # noqa: E402

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


def load() -> str:
    try:
        return " ".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:  # pragma: no cover
        return "unknown"


def one_case(name: str, scale: int) -> dict:
    """Run one case in this process (called in a child) and return its measurements."""
    import simkit
    c = dict(CASES[name])
    n, d, n_classes = c.pop("n") // scale, c.pop("d"), c.pop("n_classes")
    x, labels = make_data(n, d, n_classes)
    simkit.diagnose(x[:500], labels=labels[:500], tau=c["tau"], n_tuples=64)  # compile / load the jitted code
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    load_before = load()
    t0 = time.perf_counter()
    dg = simkit.diagnose(x, labels=labels, **c)
    kn = dg.k_needed()
    bias = dg.bias_at()
    wall = time.perf_counter() - t0
    rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    return {
        "case": name, "n_rows": n, "dim": d, "n_classes": n_classes, **c,
        "n_anchors": int(dg._design_a.rows.size), "n_exact_anchors": int(dg._design_e.rows.size),
        "k_max": dg.k_max, "tuples_per_anchor": dg.tuples_per_anchor,
        "wall_time_s": round(wall, 2), "target_s": TARGET_S, "within_time_target": bool(wall <= TARGET_S),
        "peak_rss_mib_before_call": round(rss0, 1), "peak_rss_mib": round(rss1, 1), "target_mib": TARGET_MIB,
        "within_memory_target": bool(rss1 <= TARGET_MIB), "embeddings_mib_float64": round(x.nbytes / 2**20, 1),
        "load_average_1_5_15_before": load_before, "load_average_1_5_15_after": load(),
        "results": {"ce": dg.ce, "ce_mcse": dg.ce_mcse, "c1": dg.c1, "c1_mcse": dg.c1_mcse, "c2": dg.c2,
                    "c2_mcse": dg.c2_mcse, "expansion_scale": dg.expansion_scale, "k": dg.k,
                    "bias_at_k": bias.value, "bias_at_k_mcse": bias.mcse, "bias_source": bias.source,
                    "eps": dg.eps, "k_needed": kn.k, "k_needed_low": kn.low, "k_needed_high": kn.high,
                    "k_needed_source": kn.source, "expansion_used": dg.expansion_ok,
                    "slope_note": dg.slope_note,
                    "top1": dg.retrieval.get("top1", (None, None))[0],
                    "recall10": dg.retrieval.get("rec10", (None, None))[0]},
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="N / 10, nothing written")
    ap.add_argument("--case", default=None, help=argparse.SUPPRESS)  # child process: one case
    ap.add_argument("--scale", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "diagnose.json"))
    args = ap.parse_args(argv)
    if args.case is not None:
        print(json.dumps(one_case(args.case, args.scale)))
        return 0
    scale = 10 if args.quick else 1
    runs = []
    for name in CASES:
        proc = subprocess.run([sys.executable, __file__, "--case", name, "--scale", str(scale)], capture_output=True,
                              text=True, check=True)
        runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        print(json.dumps(runs[-1], indent=1))
    res = {"benchmark": "diagnose",
           "date_utc": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "python": platform.python_version(),
                       "numpy": np.__version__},
           "cases": runs}
    if not args.quick:
        Path(args.out).write_text(json.dumps(res, indent=1) + "\n")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
