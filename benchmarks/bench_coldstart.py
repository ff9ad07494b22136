"""Benchmark: a first run (empty Numba cache) against a warm one, in fresh processes.

Run from the repository root, preferably on a quiet machine::

    python benchmarks/bench_coldstart.py                     # 7 rounds each, results/coldstart.json
    python benchmarks/bench_coldstart.py --rounds 2 --which rate_k --out /tmp/coldstart.json   # a smoke test

Commands, each a fresh ``python -m simkit`` process (interpreter start and imports included, as a
user sees it): ``run rate_k --quick`` and ``diagnose`` on a 10,000-row file (d = 64, 100 labelled
classes; benchmarks/profile_compile.py's file). A *cold* run gets a new, empty ``NUMBA_CACHE_DIR``;
a *warm* run a cache filled by one untimed run before the rounds. Rounds interleave cold and warm
(cold then warm in each), so that a change of the machine's load falls on both alike. Reported per
command: every wall time, the per-round ratio cold / warm, the median ratio and its 95% percentile
bootstrap interval over rounds (10,000 resamples), the median cold time, and the load averages.
Targets: cold <= 20 s for rate_k on 2 cores, and cold / warm <= 4 for both commands.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

TARGET_COLD_S = 20.0
TARGET_RATIO = 4.0


def _run(args: list[str], cache: Path, work: Path) -> float:
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache), PYTHONPATH=str(ROOT))
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "simkit", *args], cwd=work, env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def _args(which: str, work: Path, i: int) -> list[str]:
    if which == "rate_k":
        return ["run", "rate_k", "--quick", "--out", str(work / f"rate_k-{i}.nc")]
    return ["diagnose", str(work / "emb.npz")]


def bootstrap_median(x: np.ndarray, n_boot: int = 10_000, seed: int = 20261205) -> tuple[float, float]:
    """95% percentile bootstrap interval of the median of ``x`` (resampling its entries)."""
    rng = np.random.default_rng(seed)
    med = np.median(x[rng.integers(0, x.size, size=(n_boot, x.size))], axis=1)
    lo, hi = np.quantile(med, [0.025, 0.975])
    return float(lo), float(hi)


def bench(which: str, rounds: int, work: Path) -> dict:
    warm_cache = work / f"warm-cache-{which}"
    _run(_args(which, work, -1), warm_cache, work)  # fills the warm cache (untimed)
    cold, warm, loads = [], [], []
    for i in range(rounds):
        cache = Path(tempfile.mkdtemp(prefix="cold-cache-", dir=work))
        loads.append(os.getloadavg()[0])
        cold.append(_run(_args(which, work, 2 * i), cache, work))
        shutil.rmtree(cache)
        warm.append(_run(_args(which, work, 2 * i + 1), warm_cache, work))
        print(f"{which} round {i + 1}/{rounds}: cold {cold[-1]:.1f} s, warm {warm[-1]:.1f} s, "
              f"load {loads[-1]:.1f}", file=sys.stderr)
    c, w = np.array(cold), np.array(warm)
    ratio = c / w
    lo, hi = bootstrap_median(ratio)
    return {"command": "simkit " + " ".join(_args(which, Path("."), 0)), "rounds": rounds,
            "cold_s": cold, "warm_s": warm, "ratio": ratio.tolist(),
            "median_cold_s": float(np.median(c)), "median_warm_s": float(np.median(w)),
            "median_ratio": float(np.median(ratio)), "median_ratio_95ci": [lo, hi],
            "loadavg_1min_before_rounds": loads,
            "target": {"ratio_max": TARGET_RATIO, **({"cold_max_s": TARGET_COLD_S} if which == "rate_k" else {})}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--which", choices=["rate_k", "diagnose", "both"], default="both")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "coldstart.json")
    ap.add_argument("--note", default="", help="conditions to record with the results (e.g. 'machine loaded')")
    args = ap.parse_args(argv)
    if args.rounds < 1:
        ap.error("--rounds must be >= 1")
    from profile_compile import diagnose_file
    results = []
    with tempfile.TemporaryDirectory() as td:
        work = Path(td)
        diagnose_file(work / "emb.npz")
        for which in (["rate_k", "diagnose"] if args.which == "both" else [args.which]):
            r = bench(which, args.rounds, work)
            results.append(r)
            print(f"{r['command']}: cold {r['median_cold_s']:.1f} s, warm {r['median_warm_s']:.1f} s (medians); "
                  f"cold/warm {r['median_ratio']:.2f} (95% CI {r['median_ratio_95ci'][0]:.2f}-"
                  f"{r['median_ratio_95ci'][1]:.2f}) over {r['rounds']} rounds")
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    out = {"benchmark": "coldstart", "utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
           "host": platform.node(), "cpus": os.cpu_count(), "python": platform.python_version(),
           "commit": commit, "note": args.note, "loadavg_after": os.getloadavg(), "results": results}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
