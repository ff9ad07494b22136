"""CPU seconds of one seed of a study's design, per task kind, from a sample of its tasks.

Runs every cell's preparation (its parts and their combination, if split) and the first ``--blocks``
blocks of every cell, one task at a time in this process (``execute_task``, the runner's own entry),
timing each with ``time.process_time``; then extrapolates a full seed as

    sum over cells of (preparation CPU + n_blocks(cfg) x mean timed block CPU of that cell),

counting only real blocks (a block that returns immediately, e.g. beyond a sub-design's own block
count, is timed too: its mean is what it costs). Run with NUMBA_NUM_THREADS=1 (and one BLAS thread)
for core-seconds; run once before timing so that Numba's on-disk cache is warm (compilation excluded).

    NUMBA_NUM_THREADS=1 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 \\
      python benchmarks/profile_seed.py temperature --blocks 2 --set n_tau=4 --json out.json

``--group`` names the cell keys that define a task kind (default: the study's first cell key).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import defaultdict

import numpy as np

from simkit.runner import get_study, resolve_config
from simkit.runner.run import COMBINE_STAGE, PART_STAGE, _n_parts, execute_task


def _kind(cell: dict, keys: list[str]) -> str:
    return ",".join(f"{k}={cell.get(k)}" for k in keys)


def profile(name: str, sets: dict[str, str], blocks: int, keys: list[str] | None, block_list: list[int] | None,
            cell_filter: str | None) -> dict:
    study = get_study(name)
    cfg = resolve_config(study, quick=False, seed=None, overrides=sets)
    cells = study.cells(cfg)
    keys = keys or [next(iter(cells[0]))]
    n_blocks = study.n_blocks(cfg)
    rows = []
    for ci, cell in enumerate(cells):
        kind = _kind(cell, keys)
        if cell_filter and cell_filter not in kind:
            continue
        t = time.process_time()
        n_parts = _n_parts(study, cell, cfg)
        if n_parts:
            parts = [execute_task(study, cfg, cell, PART_STAGE, j, None) for j in range(n_parts)]
            prep = execute_task(study, cfg, cell, COMBINE_STAGE, 0, parts)
        else:
            prep = execute_task(study, cfg, cell, 0, 0, None)
        rows.append({"cell": ci, "kind": kind, "task": "prepare", "block": -1, "cpu_s": time.process_time() - t})
        for b in (block_list if block_list is not None else range(min(blocks, n_blocks))):
            t = time.process_time()
            execute_task(study, cfg, cell, 1, b, prep)
            rows.append({"cell": ci, "kind": kind, "task": "block", "block": b, "cpu_s": time.process_time() - t})
        print(f"{kind}: " + " ".join(f"{r['task'][0]}{r['block']}={r['cpu_s']:.2f}"
                                    for r in rows if r["cell"] == ci), file=sys.stderr, flush=True)
    by_kind: dict[str, dict] = defaultdict(lambda: {"cells": 0, "prepare_s": 0.0, "block_s": [], "seed_s": 0.0})
    for ci in sorted({r["cell"] for r in rows}):
        mine = [r for r in rows if r["cell"] == ci]
        bl = [r["cpu_s"] for r in mine if r["task"] == "block"]
        k = by_kind[mine[0]["kind"]]
        k["cells"] += 1
        k["prepare_s"] += mine[0]["cpu_s"]
        k["block_s"] += bl
        k["seed_s"] += mine[0]["cpu_s"] + (n_blocks * float(np.mean(bl)) if bl else 0.0)
    total = sum(k["seed_s"] for k in by_kind.values())
    return {"study": name, "config": cfg, "n_cells": len(cells), "n_blocks": n_blocks,
            "threads": {v: os.environ.get(v, "") for v in ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS",
                                                           "OPENBLAS_NUM_THREADS")},
            "kinds": {k: {**v, "block_mean_s": float(np.mean(v["block_s"])) if v["block_s"] else 0.0}
                      for k, v in by_kind.items()},
            "seed_cpu_s_extrapolated": total, "tasks": rows}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("study")
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE")
    ap.add_argument("--blocks", type=int, default=2, help="timed blocks per cell (the first ones)")
    ap.add_argument("--block-list", default=None, help="comma-separated block indices to time instead")
    ap.add_argument("--group", default=None, help="comma-separated cell keys defining a task kind")
    ap.add_argument("--only", default=None, help="time only cells whose kind contains this text")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    from simkit.runner import tune_malloc
    tune_malloc()  # as the command line does: without it a cell's first blocks can run slow (page faults)
    sets = dict(s.split("=", 1) for s in a.set)
    bl = [int(b) for b in a.block_list.split(",")] if a.block_list else None
    out = profile(a.study, sets, a.blocks, a.group.split(",") if a.group else None, bl, a.only)
    for k, v in out["kinds"].items():
        print(f"{k}: {v['cells']} cells, prepare {v['prepare_s']:.1f} s in all, block mean {v['block_mean_s']:.3f} s "
              f"({len(v['block_s'])} timed), seed share {v['seed_s']:.1f} s")
    print(f"{a.study}: {out['n_cells']} cells x {out['n_blocks']} blocks; extrapolated seed CPU "
          f"{out['seed_cpu_s_extrapolated']:.1f} s = {out['seed_cpu_s_extrapolated'] / 60:.2f} core-minutes")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
