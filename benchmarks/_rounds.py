"""Interleaved rounds, median ratios with bootstrap intervals, load averages and the JSON layout
shared by the benchmarks of this directory.

The method, for every ratio a benchmark reports:

* **Rounds.** Each round times every contender once; the order alternates between rounds (the
  listed order in even rounds, reversed in odd ones), so that a change of the machine's load, or a
  contender slowing the one timed after it, falls on all contenders alike. At least 15 rounds.
* **Statistic.** The per-round ratio ``seconds[baseline] / seconds[contender]`` (how many times
  faster the contender is, same work), its median over rounds, and a 95% percentile bootstrap
  interval of that median (10,000 resamples of the rounds, fixed seed).
* **Targets.** A "at least" target counts as met when the interval's lower end clears it, an "at
  most" target when its upper end does; otherwise not shown (``met`` False), whatever the median.
* **Load.** The 1-minute load average before each round, and all three at the start and end.

JSON layout written by :func:`document`: ``benchmark``, ``method``, ``meta`` (host, CPUs, Python,
git commit, start and end UTC, load averages, command line), ``cases`` (one per size or setting:
``case``, ``params``, ``rounds``, ``order``, ``seconds`` per contender, ``load_1min_per_round``,
``ratios`` keyed by label: ``baseline``, ``contender``, ``median``, ``ci95``, ``per_round``,
``target``, ``target_kind``, ``met``) and whatever else the script adds.

``python benchmarks/_rounds.py`` runs a self-check of the statistics against independent
computations (exit 0 when it passes).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import itertools
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Mapping, Sequence

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
MIN_ROUNDS = 15
N_BOOT = 10_000
BOOT_SEED = 20261205

METHOD = ("interleaved rounds: each round times every contender once, order alternating (as listed in even "
          "rounds, reversed in odd ones); per-round ratio = seconds of the baseline / seconds of the contender "
          f"(same work); statistic = median over rounds with a 95% percentile bootstrap interval ({N_BOOT} "
          "resamples of the rounds); an 'at least' target is met when the interval's lower end clears it, "
          "an 'at most' target when its upper end does; 1-minute load average recorded before each round")


def loadavg() -> list[float]:
    """The 1, 5 and 15-minute load averages (NaN where the platform has none)."""
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except (AttributeError, OSError):
        return [float("nan")] * 3


def order_of(names: Sequence[str], r: int) -> list[str]:
    """Contender order of round ``r``: as listed in even rounds, reversed in odd ones."""
    return list(names) if r % 2 == 0 else list(reversed(names))


def interleaved(contenders: Mapping[str, Callable[[], object]], rounds: int, *, cpu: bool = False,
                between: Callable[[], None] | None = None, progress: Callable[[int, dict], None] | None = None,
                timer: Callable[[str, Callable[[], object]], float] | None = None) -> dict:
    """Time every contender once per round, in alternating order.

    ``contenders`` maps names to zero-argument callables. ``timer(name, fn)``, if given, returns the
    seconds of one call (for contenders that time themselves, e.g. in another process); otherwise
    the wall time around ``fn()``. ``between()`` runs, untimed, before each call. ``progress(r, times)``
    is called after each round. Returns ``{"seconds": {name: [...]}, "cpu_seconds": {...} (if
    ``cpu``), "load_1min_per_round": [...], "order": [...], "rounds": rounds}``.
    """
    names = list(contenders)
    secs = {n: [] for n in names}
    cpus = {n: [] for n in names}
    loads = []
    for r in range(rounds):
        loads.append(loadavg()[0])
        for name in order_of(names, r):
            fn = contenders[name]
            if between is not None:
                between()
            if timer is not None:
                secs[name].append(float(timer(name, fn)))
                continue
            c0, t0 = time.process_time(), time.perf_counter()
            fn()
            t1, c1 = time.perf_counter(), time.process_time()
            secs[name].append(t1 - t0)
            cpus[name].append(c1 - c0)
        if progress is not None:
            progress(r, {n: v[-1] for n, v in secs.items()})
    out = {"rounds": rounds, "order": "alternating: " + ", ".join(names) + " in even rounds, reversed in odd ones",
           "seconds": secs, "load_1min_per_round": loads}
    if cpu and timer is None:
        out["cpu_seconds"] = cpus
    return out


def bootstrap_median_ci(x, n_boot: int = N_BOOT, seed: int = BOOT_SEED, level: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap interval of the median of ``x`` (resampling its entries with replacement)."""
    x = np.asarray(x, dtype=float)
    if x.ndim != 1 or x.size == 0 or not np.all(np.isfinite(x)):
        raise ValueError(f"bootstrap_median_ci: x must be a non-empty 1-d array of finite values, got {x!r}")
    rng = np.random.default_rng(seed)
    med = np.median(x[rng.integers(0, x.size, size=(n_boot, x.size))], axis=1)
    a = (1.0 - level) / 2.0
    lo, hi = np.percentile(med, [100 * a, 100 * (1 - a)])
    return float(lo), float(hi)


def summarise(per_round, *, target: float | None = None, target_kind: str = "at least", **label) -> dict:
    """Median, 95% bootstrap interval and target verdict of per-round values (ratios, or seconds)."""
    v = np.asarray(per_round, dtype=float)
    lo, hi = bootstrap_median_ci(v)
    if target_kind not in ("at least", "at most"):
        raise ValueError(f"target_kind must be 'at least' or 'at most', got {target_kind!r}")
    met = None if target is None else bool(lo >= target if target_kind == "at least" else hi <= target)
    return {**label, "median": float(np.median(v)), "ci95": [lo, hi], "rounds": int(v.size),
            "per_round": v.tolist(), "target": target, "target_kind": target_kind if target is not None else None,
            "met": met}


def ratio(seconds: Mapping[str, Sequence[float]], baseline: str | Sequence[str], contender: str | Sequence[str],
          **kw) -> dict:
    """Per-round ``seconds[baseline] / seconds[contender]`` summarised (:func:`summarise`).

    A list of names on either side takes, per round, the smallest of their seconds (the better of a
    contender's figures, e.g. in this process and in a process of its own)."""
    def pick(names):
        names = [names] if isinstance(names, str) else list(names)
        return np.min(np.array([seconds[n] for n in names], dtype=float), axis=0), names

    b, bn = pick(baseline)
    c, cn = pick(contender)
    return summarise(b / c, baseline=bn[0] if len(bn) == 1 else bn, contender=cn[0] if len(cn) == 1 else cn, **kw)


def fmt(s: dict, unit: str = "x", digits: int = 2) -> str:
    """``1.23x [1.10, 1.31]`` from a :func:`summarise` result."""
    lo, hi = s["ci95"]
    return f"{s['median']:.{digits}f}{unit} [{lo:.{digits}f}, {hi:.{digits}f}]"


def positive_int(text: str) -> int:
    """An argparse ``type``: a positive integer, or one line naming the constraint."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {v}")
    return v


QUICK_ROUNDS = 3


def parser(doc: str, results: str | None, *, rounds: int = 16,
           quick: str = "a smoke test: 3 rounds, nothing written unless --out is given") -> argparse.ArgumentParser:
    """The options every benchmark here shares: ``--quick`` (alias ``--smoke``), ``--rounds`` and, when the
    script writes one results file, ``--out`` (default ``benchmarks/results/<results>``, none with ``--quick``).

    The description is the first paragraph of ``doc`` (the script's docstring); :func:`parse` completes the
    defaults. A script adds its own options to the returned parser.
    """
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0].strip())
    ap.add_argument("--quick", "--smoke", action="store_true", help=quick)
    ap.add_argument("--rounds", type=positive_int, default=None,
                    help=f"interleaved rounds (>= {MIN_ROUNDS}; default {rounds}, {QUICK_ROUNDS} with --quick)")
    if results is not None:
        ap.add_argument("--out", type=Path, default=None,
                        help=f"results file (default benchmarks/results/{results}; none with --quick)")
    ap.set_defaults(_default_rounds=rounds, _results=results)
    return ap


def parse(ap: argparse.ArgumentParser, argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse, fill ``rounds`` and ``out`` from :func:`parser`'s defaults, refuse too few rounds (exit 2)."""
    args = ap.parse_args(argv)
    if args.rounds is None:
        args.rounds = QUICK_ROUNDS if args.quick else args._default_rounds
    check_rounds(args.rounds, args.quick)
    if args._results is not None and args.out is None and not args.quick:
        args.out = ROOT / "benchmarks" / "results" / args._results
    return args


def check_rounds(rounds: int, allow_fewer: bool = False, flag: str = "--quick") -> None:
    """Refuse fewer than :data:`MIN_ROUNDS` rounds unless asked (smoke tests, the script's option ``flag``);
    one line, exit 2."""
    if rounds < 1 or (rounds < MIN_ROUNDS and not allow_fewer):
        print(f"error: --rounds must be >= {MIN_ROUNDS} (got {rounds}; {flag} allows fewer, for a trial run)",
              file=sys.stderr)
        raise SystemExit(2)


def git_commit() -> str | None:
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True).stdout.strip()
        return head + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return None


def utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def meta_start() -> dict:
    """Host, CPUs, Python, commit, command line, start time and load averages (call at the start)."""
    return {"host": platform.node(), "platform": platform.platform(), "cpus": os.cpu_count(),
            "python": platform.python_version(), "commit": git_commit(), "argv": sys.argv[1:],
            "utc_start": utc_now(), "load_average_start": loadavg()}


def document(benchmark: str, meta: dict, cases: list[dict], **extra) -> dict:
    """The results document: method, meta (completed with end time and load averages), cases."""
    meta = {**meta, "utc_end": utc_now(), "load_average_end": loadavg()}
    return {"benchmark": benchmark, "method": METHOD, "meta": meta, "cases": cases, **extra}


def write(path: Path | str, doc: dict) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1, default=float) + "\n")
    print(f"wrote {path}")


def _self_check() -> None:
    """The statistics against independent computations (fixed inputs; deterministic)."""
    # median ratio: an odd and an even number of rounds, computed by hand
    s = ratio({"a": [2.0, 3.0, 16.0], "b": [1.0, 1.0, 2.0]}, "a", "b")
    assert s["per_round"] == [2.0, 3.0, 8.0] and s["median"] == 3.0, s  # (the mean would be 4.33)
    s = ratio({"a": [4.0, 12.0, 1.0, 6.0], "b": [1.0, 3.0, 1.0, 1.0], "c": [2.0, 1.0, 2.0, 2.0]}, "a", ["b", "c"])
    assert s["per_round"] == [4.0, 12.0, 1.0, 6.0] and s["median"] == 5.0, s  # min of b, c per round
    # the bootstrap interval against the exact bootstrap distribution of the median, enumerated over
    # the 5^5 equally likely resamples of a 5-point input: P(median = min) = P(median = max) = 0.058,
    # so both 2.5% and 97.5% points are far from a tie and the 10^4-resample percentiles equal them
    x = np.array([1.0, 2.0, 4.0, 7.0, 11.0])
    meds = np.array([np.median(c) for c in itertools.product(x, repeat=x.size)])
    vals, counts = np.unique(meds, return_counts=True)
    cdf = np.cumsum(counts) / meds.size
    exact = (float(vals[np.searchsorted(cdf, 0.025)]), float(vals[np.searchsorted(cdf, 0.975)]))
    assert bootstrap_median_ci(x) == exact == (1.0, 11.0), (bootstrap_median_ci(x), exact)
    # a skewed 16-round input: the interval brackets the median and lies within the data's range
    y = np.array([1.0, 1.1, 1.2, 1.25, 1.3, 1.32, 1.35, 1.4, 1.42, 1.5, 1.6, 1.7, 2.5, 3.0, 4.0, 9.0])
    lo, hi = bootstrap_median_ci(y)
    assert y.min() <= lo <= np.median(y) <= hi <= y.max(), (lo, hi)
    # targets: met only when the interval clears them
    s = summarise([2.0] * 16, target=1.5)
    assert s["ci95"] == [2.0, 2.0] and s["met"] is True
    assert summarise([1.4, 1.6] * 8, target=1.5)["met"] is False  # median 1.5, interval [1.4, 1.6]
    assert summarise([1.4, 1.6] * 8, target=2.0, target_kind="at most")["met"] is True
    # the alternating order
    assert order_of("abc", 0) == list("abc") and order_of("abc", 1) == list("cba")
    t = interleaved({"a": lambda: None, "b": lambda: None}, 3)
    assert t["rounds"] == 3 and all(len(v) == 3 for v in t["seconds"].values()) and len(t["load_1min_per_round"]) == 3
    seen = []
    interleaved({"a": lambda: seen.append("a"), "b": lambda: seen.append("b")}, 3)
    assert seen == list("abbaab"), seen


if __name__ == "__main__":
    _self_check()
    print("benchmarks/_rounds.py self-check passed")
