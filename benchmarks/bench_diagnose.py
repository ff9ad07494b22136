"""Benchmark: ``simkit.diagnose`` on N = 100,000 rows in d = 256 (issue 12, item 3).

Run from the repository root::

    python benchmarks/bench_diagnose.py           # N = 100,000, d = 256, 100 classes
    python benchmarks/bench_diagnose.py --quick   # N = 10,000 (smoke test)

Data: 100 classes with random unit means in R^256; a row is its class mean plus isotropic Gaussian
noise of norm ~2 (sd 2/sqrt(d) per coordinate: same-class cosines ~0.2, other classes ~0 +- 0.09,
so retrieval is imperfect), labels are the classes (the label kernel). tau = 0.2, k = 256, eps =
0.01; anchors subsampled with the default ``n_anchors`` (2048) and default Monte Carlo (2^15
tuples, k grid 1..1024); the exact curve is off by default at this N (``n_exact_anchors``:
simkit.exact.curve needs 4-10 s per anchor at N = 10^5 and raised the traced peak from 0.45 to 1.27
GB with 3 anchors; ``--n-exact-anchors 3`` times it: 58.7 s at load 6-7, against 27 s without).
Measured: the wall time of the ``diagnose`` call (data generation excluded), the peak resident set
size of the process (``resource.getrusage``, which includes the interpreter and the data: O(N d))
and the peak traced allocation inside the call (tracemalloc on a second, identical call: the
working memory, expected O(N d + block N)), and ``uptime``'s load average, since the machine is
shared. Results go to ``benchmarks/results/diagnose.json``.
Target (issue 12): within 60 s.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import resource
import sys
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # benchmark the working tree

import numpy as np  # noqa: E402

import simkit  # noqa: E402

TARGET_S = 60.0


def make_data(n: int, d: int, n_classes: int, noise: float = 2.0, seed: int = 20261201):
    rng = np.random.default_rng(seed)
    means = rng.normal(size=(n_classes, d))
    means /= np.linalg.norm(means, axis=1, keepdims=True)
    labels = rng.integers(0, n_classes, size=n)
    x = means[labels] + rng.normal(scale=noise / np.sqrt(d), size=(n, d))
    return x, labels


def load() -> str:
    try:
        return " ".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:  # pragma: no cover
        return "unknown"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--n", type=int, default=None)
    ap.add_argument("--n-exact-anchors", type=int, default=None)
    ap.add_argument("--no-tracemalloc", action="store_true")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "diagnose.json"))
    args = ap.parse_args(argv)
    n = args.n or (10_000 if args.quick else 100_000)
    d, n_classes, tau, k, eps = 256, 100, 0.2, 256, 0.01
    x, labels = make_data(n, d, n_classes)
    kw = dict(labels=labels, tau=tau, k=k, eps=eps, n_exact_anchors=args.n_exact_anchors)
    load_before = load()
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    t0 = time.perf_counter()
    ds = simkit.diagnose(x, **kw)
    wall = time.perf_counter() - t0
    rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    load_after = load()
    traced = None
    if not args.no_tracemalloc:
        tracemalloc.start()
        simkit.diagnose(x, **kw)
        traced = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
    data_mib = x.nbytes / 2**20
    block = max(1, (1 << 23) // n)
    res = {
        "benchmark": "diagnose",
        "date_utc": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "python": platform.python_version(),
                    "numpy": np.__version__},
        "load_average_1_5_15_before": load_before,
        "load_average_1_5_15_after": load_after,
        "n_rows": n, "dim": d, "n_classes": n_classes, "tau": tau, "k": k, "eps": eps,
        "n_anchors": int(ds.attrs["n_anchors"]), "n_exact_anchors": int(ds.attrs["n_exact_anchors"]),
        "tuples_per_anchor": int(ds.attrs["tuples_per_anchor"]), "k_grid": [int(v) for v in ds.k.values],
        "wall_time_s": round(wall, 2),
        "target_s": TARGET_S,
        "within_target": bool(wall <= TARGET_S),
        "peak_rss_mib_before_call": round(rss0, 1),
        "peak_rss_mib": round(rss1, 1),
        "peak_traced_mib_in_call": None if traced is None else round(traced, 1),
        "embeddings_mib_float64": round(data_mib, 1),
        "score_block_mib": round(block * n * 8 / 2**20, 1),
        "results": {name: float(ds[name]) for name in ("ce", "ce_mcse", "c1", "c1_mcse", "c2", "c2_mcse", "slope",
                                                       "slope_ci_low", "slope_ci_high", "slope_p_half",
                                                       "bias_at_k", "k_for_bias", "top1", "recall10")},
        "gap": [float(v) for v in ds.gap.values],
        "gap_mcse": [float(v) for v in ds.gap_mcse.values],
        "gap_exact": [float(v) for v in ds.gap_exact.values],
        "gap_exact_mcse": [float(v) for v in ds.gap_exact_mcse.values],
    }
    print(json.dumps({k_: v for k_, v in res.items() if k_ not in ("gap", "gap_mcse", "gap_exact", "gap_exact_mcse")},
                     indent=1))
    if not args.quick:
        Path(args.out).write_text(json.dumps(res, indent=1) + "\n")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
