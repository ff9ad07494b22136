"""Benchmark: draws per second of the spherical Brownian kernel (``simkit.BrownianKernel``).

Run from the repository root::

    python benchmarks/bench_heat.py [--n 20000] [--rounds 15]

Times ``BrownianKernel(t).sample(x, rng=...)`` for ``n`` anchors on S^2 and S^7 at t in {0.1, 1.0}:
one warm-up call (compilation), then ``--rounds`` calls; prints the median draws per second with a
bootstrap 95% interval of the median. There is no third-party sampler of this kernel to compare with,
so the figure is a throughput, not a ratio. Results go to ``benchmarks/results/heat.json``.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np

from simkit import BrownianKernel


def _median_interval(values: np.ndarray, rng: np.random.Generator, n_boot: int = 2000) -> tuple[float, float, float]:
    boot = np.median(rng.choice(values, size=(n_boot, values.size), replace=True), axis=1)
    return float(np.median(values)), float(np.quantile(boot, 0.025)), float(np.quantile(boot, 0.975))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=20_000)
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "heat.json"))
    args = p.parse_args(argv)
    if args.n < 1 or args.rounds < 2:
        p.error("--n must be >= 1 and --rounds >= 2")
    rng = np.random.default_rng(0)
    rows = []
    for d in (3, 8):
        x = np.tile(np.eye(d)[0], (args.n, 1))
        for t in (0.1, 1.0):
            k = BrownianKernel(t)
            k.sample(x, rng=0)  # compile and warm
            rates = []
            for r in range(args.rounds):
                t0 = time.perf_counter()
                k.sample(x, rng=r + 1)
                rates.append(args.n / (time.perf_counter() - t0))
            med, lo, hi = _median_interval(np.asarray(rates), rng)
            rows.append({"d": d, "t": t, "draws_per_s_median": med, "ci95": [lo, hi], "rounds": args.rounds})
            print(f"d = {d}, t = {t}: {med:.3e} draws/s [{lo:.3e}, {hi:.3e}]")
    out = {"benchmark": "heat", "n": args.n, "machine": platform.machine(), "processor": platform.processor(),
           "results": rows}
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
