"""Benchmark: a first run (empty Numba cache) against a warm one, in fresh processes.

Run from the repository root, preferably on a quiet machine::

    python benchmarks/bench_coldstart.py                     # 15 rounds each, results/coldstart.json
    python benchmarks/bench_coldstart.py --rounds 2 --quick --which rate_k --out /tmp/coldstart.json   # a smoke test

Commands, each a fresh ``python -m simkit`` process (interpreter start and imports included, as a
user sees it): ``run rate_k --quick`` and ``diagnose`` on a 10,000-row file (d = 64, 100 labelled
classes; benchmarks/profile_compile.py's file). A *cold* run gets a new, empty ``NUMBA_CACHE_DIR``;
a *warm* run a cache filled by one untimed run before the rounds. Rounds interleave cold and warm
(the order alternating between rounds, benchmarks/_rounds.py), so that a change of the machine's
load falls on both alike. Reported per command: every wall time, the per-round ratio cold / warm,
the median ratio and its 95% percentile bootstrap interval over rounds (10,000 resamples), the
median cold time with its interval, and the load averages. Targets: cold <= 20 s for rate_k on 2
cores, and cold / warm <= 4 for both commands; an "at most" target is met when the interval's upper
end is below it. Results in the layout of benchmarks/_rounds.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import _rounds  # noqa: E402

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


def bench(which: str, rounds: int, work: Path) -> dict:
    warm_cache = work / f"warm-cache-{which}"
    _run(_args(which, work, -1), warm_cache, work)  # fills the warm cache (untimed)
    calls = iter(range(2 * rounds))

    def cold():
        cache = Path(tempfile.mkdtemp(prefix="cold-cache-", dir=work))
        try:
            return _run(_args(which, work, next(calls)), cache, work)
        finally:
            shutil.rmtree(cache)

    def warm():
        return _run(_args(which, work, next(calls)), warm_cache, work)

    def progress(r, last):
        print(f"{which} round {r + 1}/{rounds}: cold {last['cold']:.1f} s, warm {last['warm']:.1f} s, "
              f"load {_rounds.loadavg()[0]:.1f}", file=sys.stderr)

    t = _rounds.interleaved({"cold": cold, "warm": warm}, rounds, timer=lambda name, fn: fn(), progress=progress)
    target = {"ratio_max": TARGET_RATIO, **({"cold_max_s": TARGET_COLD_S} if which == "rate_k" else {})}
    ratios = {"cold/warm": _rounds.ratio(t["seconds"], "cold", "warm", target=TARGET_RATIO, target_kind="at most",
                                         means="cold seconds / warm seconds of the same command")}
    cold_s = _rounds.summarise(t["seconds"]["cold"], target=target.get("cold_max_s"), target_kind="at most",
                               means="seconds of a cold run")
    warm_s = _rounds.summarise(t["seconds"]["warm"], means="seconds of a warm run")
    return {"case": which, "command": "simkit " + " ".join(_args(which, Path("."), 0)),
            "params": {"target": target}, **t, "ratios": ratios, "cold_s": cold_s, "warm_s": warm_s}


def main(argv=None) -> int:
    ap = _rounds.parser(__doc__, "coldstart.json", rounds=15)
    ap.add_argument("--which", choices=["rate_k", "diagnose", "both"], default="both")
    ap.add_argument("--note", default="", help="conditions to record with the results (e.g. 'machine loaded')")
    args = _rounds.parse(ap, argv)
    meta = {**_rounds.meta_start(), "note": args.note}
    from profile_compile import diagnose_file
    cases = []
    with tempfile.TemporaryDirectory() as td:
        work = Path(td)
        diagnose_file(work / "emb.npz")
        for which in (["rate_k", "diagnose"] if args.which == "both" else [args.which]):
            r = bench(which, args.rounds, work)
            cases.append(r)
            print(f"{r['command']}: cold {_rounds.fmt(r['cold_s'], ' s', 1)}, warm {_rounds.fmt(r['warm_s'], ' s', 1)} "
                  f"(medians [95% CI]); cold/warm {_rounds.fmt(r['ratios']['cold/warm'])} over {r['rounds']} rounds")
    if args.out is not None:
        _rounds.write(args.out, _rounds.document("coldstart", meta, cases))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
