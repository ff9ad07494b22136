"""Scaling of the study engine: in-process against a Dask LocalCluster of 1 and of 2 worker processes.

Runs, in interleaved rounds (benchmarks/_rounds.py: each round runs every mode once, the order of
the modes alternating between rounds, so that load from other jobs on the machine hits every mode
alike), each design of ``--designs`` (default ``quick``)
    * ``quick``: the quick rate_k study, ``resolve_config(STUDY, quick=True)`` (3 settings x (1 + 32) tasks,
      and the mixture's preparation split into 16 parts: 115 tasks);
    * ``blocks``: a design whose work is mostly parallel blocks (uniform-d3 and vmf-d8, K = 65536,
      32 blocks each), to show what the machine gives when the critical path is short;
in three modes: in-process (one process, Numba threads = cores), and ``run_study(...,
scheduler=...)`` on a LocalCluster with 1 and with 2 worker processes (the engine's Dask executor
sends a cell's blocks in batches, ``batch="auto"``; a Dask task in the figures below is a batch) (``threads_per_worker=1``;
``NUMBA_NUM_THREADS=1`` in the workers through the nanny's ``env``, checked in every worker, so
two workers do not oversubscribe two cores).

Before any timing every worker process (and this process) runs each cell's ``prepare`` and one
block with another seed: Numba's on-disk cache is loaded (or compiled) once per process. The workers
get simkit's malloc thresholds (``simkit.runner._malloc``, registered as every ``DaskExecutor`` does)
before the warm-up; runs before 2026-12-04 had Dask's ``MALLOC_TRIM_THRESHOLD_=65536`` alone, under
which a preparation ran 2.6x slower on a worker than in-process.

Reported: wall time of ``run_study`` (connect, submit, tasks, checkpoints, summarise, netCDF), the
speed-ups 2 workers vs 1 and in-process vs 1 worker, the task time (sum of task durations: the
Dask task stream on the cluster, a timer around each task in-process), the overhead fraction
``1 - task time / (wall x workers)``, the CPU seconds of the driver process (the engine's loop,
checkpoints, summary and netCDF, and the LocalCluster's scheduler and nannies), the phases (preparations, blocks, driver tail), the ideal
wall time of the engine's two-stage schedule from the measured task durations, and the task size
that would keep the overhead under 5%; medians over ``--rounds`` rounds (default 15). The speed-ups
are per-round ratios of wall times (1 worker / 2 workers, 1 worker / in-process), their medians with
95% percentile bootstrap intervals. The machine is shared, so each round also measures the parallel
capacity that two worker processes get at that moment: a fixed load (``--capacity-blocks`` blocks
of the ``blocks`` design) on one worker alone, then on both at once; 2.0 means two full cores; the
fraction of capacity is the per-round speed-up over that round's capacity (target >= 0.9, met when
the interval's lower end clears it). The datasets of all modes are checked identical.

``--full-tasks`` instead times, in-process, each cell's preparation (its tasks, the second call:
the first loads Numba's cache) and 4 blocks of the full (default) rate_k design, the task sizes that
docs/scaling.md uses to plan a 64-worker run.

Run: ``python benchmarks/bench_scaling.py [--rounds R] [--designs quick,blocks]`` and ``python benchmarks/bench_scaling.py
--full-tasks``; results in benchmarks/results/scaling.json (each updates its own part).
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _rounds  # noqa: E402  (NumPy only: nothing that fixes Numba's thread count)

# Heavy imports (simkit, and through it Numba) happen inside the functions below: worker
# processes are spawned, and a spawned process re-imports this file as ``__mp_main__``; importing
# Numba there would fix its thread count before the nanny's NUMBA_NUM_THREADS=1 is applied.

BLOCKS_DESIGN = {"settings": "uniform-d3,vmf-d8", "k_max": 65536, "n_blocks": 32, "block_anchors": 256,
                 "pilot_blocks": 2}
WORKER_ENV = {"NUMBA_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
              "MKL_NUM_THREADS": "1"}


def _designs():
    from simkit.runner import resolve_config
    from studies.rate_k import STUDY
    return {"quick": resolve_config(STUDY, quick=True), "blocks": resolve_config(STUDY, BLOCKS_DESIGN)}


def _prepare(cfg: dict, cell: dict) -> tuple[dict, list[float]]:
    """A cell's preparation as the engine runs it (its parts and their combination, or one task),
    and the seconds of each of those tasks."""
    from simkit.runner import execute_task
    from simkit.runner.run import COMBINE_STAGE, PART_STAGE
    from studies.rate_k import STUDY
    n = STUDY.prepare_parts(cell, cfg)
    times, parts = [], []
    for j in range(n):
        t = time.perf_counter()
        parts.append(execute_task("rate_k", cfg, cell, PART_STAGE, j, None))
        times.append(time.perf_counter() - t)
    t = time.perf_counter()
    prep = (execute_task("rate_k", cfg, cell, COMBINE_STAGE, 0, parts) if n
            else execute_task("rate_k", cfg, cell, 0, 0, None))
    return prep, [*times, time.perf_counter() - t]


def _warm(cfgs: list[dict]) -> tuple[int, float, int]:
    """Each cell's preparation and one block, with another seed (loads Numba's cache).

    Returns (process id, seconds, Numba threads)."""
    import numba

    from simkit.runner import execute_task
    from studies.rate_k import STUDY
    t0 = time.perf_counter()
    for cfg in cfgs:
        cfg = {**cfg, "seed": cfg["seed"] + 1}
        for cell in STUDY.cells(cfg):
            prep, _ = _prepare(cfg, cell)
            execute_task("rate_k", cfg, cell, 1, 0, prep)
    return os.getpid(), time.perf_counter() - t0, numba.get_num_threads()


def _spin(cfg: dict, n: int) -> float:
    """Seconds for ``n`` blocks of ``cfg``'s first cell (a fixed CPU-bound load)."""
    from simkit.runner import execute_task
    from studies.rate_k import STUDY
    cell = STUDY.cells(cfg)[0]
    prep, _ = _prepare(cfg, cell)
    t0 = time.perf_counter()
    for b in range(n):
        execute_task("rate_k", cfg, cell, 1, b, prep)
    return time.perf_counter() - t0


def _capacity(client, cfg: dict, n: int) -> dict:
    """What two worker processes get from the machine right now: the same fixed load run on one
    worker alone, then on both at once; capacity = 2 x alone / together (2 = two full cores)."""
    w = sorted(client.scheduler_info()["workers"])
    alone = client.submit(_spin, cfg, n, workers=[w[0]], allow_other_workers=False, pure=False).result()
    both = client.gather([client.submit(_spin, cfg, n, workers=[x], allow_other_workers=False, pure=False)
                          for x in w])
    return {"alone_s": alone, "together_s": both, "capacity": 2 * alone / statistics.mean(both)}


def _stage_of(key: str) -> str:
    """Task keys are ``simkit-<run tag>-<prepare|part|block>-<cell>-<block>`` (simkit.runner.dask); a
    preparation part and the task that combines the parts count as preparation."""
    return "prepare" if key.split("-")[2] in ("prepare", "part") else "block"


def _timed_in_process(cfg, out: Path) -> dict:
    from simkit.runner import run as engine
    from studies.rate_k import STUDY
    spans = []
    real = engine.execute_task

    def timed(study_name, cfg_, cell, stage, block, prep):
        t = time.perf_counter()
        try:
            return real(study_name, cfg_, cell, stage, block, prep)
        finally:
            spans.append(("block" if stage == 1 else "prepare", t, time.perf_counter()))

    engine.execute_task = timed  # run_study looks the task function up at call time
    try:
        t0 = time.perf_counter()
        res = engine.run_study(STUDY, cfg, out, progress=False)
        wall = time.perf_counter() - t0
    finally:
        engine.execute_task = real
    return _summary(res, wall, t0, spans, n_workers=1)


def _timed_dask(cfg, out: Path, cluster, client) -> dict:
    from distributed import get_task_stream

    from simkit.runner import run_study
    from studies.rate_k import STUDY
    with get_task_stream(client) as stream:
        t0_wall = time.time()
        t0 = time.perf_counter()
        c0 = time.process_time()
        res = run_study(STUDY, cfg, out, scheduler=cluster.scheduler_address, progress=False)
        wall = time.perf_counter() - t0
        driver_cpu = time.process_time() - c0
    records = [r for r in stream.data if str(r["key"]).startswith("simkit-")]
    spans = []
    for r in records:
        for s in r["startstops"]:
            if s["action"] == "compute":
                # task-stream times are wall-clock seconds: shift them onto perf_counter's origin
                spans.append((_stage_of(str(r["key"])), t0 + s["start"] - t0_wall,
                              t0 + s["stop"] - t0_wall))
    summary = _summary(res, wall, t0, spans, n_workers=len(client.scheduler_info()["workers"]))
    # CPU seconds of this process: the engine's loop, checkpoints, summary and netCDF, and (a
    # LocalCluster lives here) the scheduler and the nannies; on 2 cores it competes with the workers
    summary["driver_cpu_s"] = driver_cpu
    return summary


def _same_results(a, b) -> bool:
    """results_identical, ignoring the checkout's provenance (git_commit, and for a modified tree the
    changed files and the diff's hash): the checkout may get commits or edits during a run."""
    from simkit.runner import results_identical
    a, b = a.copy(), b.copy()
    for d in (a, b):
        for key in ("git_commit", "git_changed_files", "git_diff_sha256"):
            d.attrs.pop(key, None)
    return results_identical(a, b)


def _makespan(durations: list[float], n_workers: int) -> float:
    """Greedy list schedule (tasks in the given order, each to the first free worker)."""
    free = [0.0] * n_workers
    for d in durations:
        i = free.index(min(free))
        free[i] += d
    return max(free)


def _summary(res, wall, t0, spans, n_workers) -> dict:
    assert res.completed and not res.errors, res.errors
    prep = [s for s in spans if s[0] == "prepare"]
    block = [s for s in spans if s[0] == "block"]
    busy = sum(b - a for _, a, b in spans)
    last_stop = max(b for _, _, b in spans)
    block_phase = max(b for _, _, b in block) - min(a for _, a, _ in block)
    ideal = (_makespan(sorted((b - a for _, a, b in prep), reverse=True), n_workers)
             + _makespan([b - a for _, a, b in block], n_workers))
    return {
        "wall_s": wall,
        "n_workers": n_workers,
        "prepare_durations_s": [b - a for _, a, b in prep],
        "block_durations_s": [b - a for _, a, b in block],
        "n_tasks": len(spans),
        "task_time_s": busy,
        "overhead_fraction": 1.0 - busy / (wall * n_workers),
        "prepare_task_s": sorted(b - a for _, a, b in prep),
        "block_task_s_median": statistics.median(b - a for _, a, b in block),
        "block_task_s_total": sum(b - a for _, a, b in block),
        "head_s": min(a for _, a, _ in spans) - t0,  # connect, read checkpoints, submit
        "prepare_phase_s": max(b for _, _, b in prep) - min(a for _, a, _ in prep),
        "block_phase_s": block_phase,
        "block_phase_overhead_fraction": 1.0 - sum(b - a for _, a, b in block) / (block_phase * n_workers),
        "tail_s": t0 + wall - last_stop,  # summarise, write the netCDF, remove checkpoints
        "ideal_wall_s": ideal,
        "dataset": res.dataset,
    }


def full_tasks() -> dict:
    """In-process seconds of the full rate_k design's tasks: each cell's preparation and 4 blocks."""
    import numba

    from simkit.runner import execute_task, resolve_config
    from studies.rate_k import STUDY
    cfg = resolve_config(STUDY)
    out = {"config": cfg, "numba_threads": numba.get_num_threads(), "load_average_before": os.getloadavg(),
           "cells": {}}
    for cell in STUDY.cells(cfg):
        times = []
        for _ in range(2):
            prep, task_s = _prepare(cfg, cell)
            times.append(task_s)
        blocks = []
        for b in range(4):
            t = time.perf_counter()
            execute_task("rate_k", cfg, cell, 1, b, prep)
            blocks.append(time.perf_counter() - t)
        # a split preparation: its parts run in parallel, then the combination (the last task)
        path = max(times[1][:-1], default=0.0) + times[1][-1]
        out["cells"][cell["setting"]] = {"prepare_s": sum(times[1]), "prepare_first_call_s": sum(times[0]),
                                         "prepare_tasks_s": times[1], "prepare_critical_path_s": path,
                                         "block_s": blocks}
        print(f"{cell['setting']:<12} prepare {sum(times[1]):6.2f} s in {len(times[1])} task(s), critical path "
              f"{path:.2f} s (first call {sum(times[0]):.2f} s)  blocks " + " ".join(f"{b:.3f}" for b in blocks)
              + " s", flush=True)
    out["load_average_after"] = os.getloadavg()
    return out


def _write(part: str, value) -> None:
    path = Path(__file__).parent / "results" / "scaling.json"
    path.parent.mkdir(exist_ok=True)
    data = json.loads(path.read_text()) if path.exists() else {}
    data[part] = value
    path.write_text(json.dumps(data, indent=2, default=float) + "\n")
    print(f"wrote {path} ({part})")


MODES = ("in-process", "1 worker", "2 workers")
TARGET_FRACTION_OF_CAPACITY = 0.9


def main(argv=None) -> int:
    ap = _rounds.parser(__doc__, None, rounds=15, quick="3 rounds, nothing written (a smoke test)")
    ap.add_argument("--designs", default="quick", help="comma-separated: quick, blocks (default quick)")
    ap.add_argument("--capacity-blocks", type=int, default=8, help="blocks of the capacity calibration")
    ap.add_argument("--full-tasks", action="store_true", help="only time the full design's tasks in-process")
    args = _rounds.parse(ap, argv)
    if args.full_tasks:
        _write("full_design_tasks", full_tasks())
        return 0
    wanted = [d.strip() for d in args.designs.split(",") if d.strip()]
    if not wanted or any(d not in ("quick", "blocks") for d in wanted) or args.capacity_blocks < 1:
        ap.error(f"--designs must list quick and/or blocks (got {args.designs!r}); --capacity-blocks >= 1")

    import logging

    import numpy as np

    from distributed import Client, LocalCluster

    import simkit

    meta = _rounds.meta_start()
    all_designs = _designs()
    designs = {k: all_designs[k] for k in wanted}
    print(f"{platform.platform()}; {os.cpu_count()} CPUs; load average {meta['load_average_start'][0]:.2f}", flush=True)
    t = time.perf_counter()
    warm_cfgs = list({**designs, "blocks": all_designs["blocks"]}.values())
    _, _, threads_here = _warm(warm_cfgs)
    print(f"in-process warm-up {time.perf_counter() - t:.1f} s (Numba threads {threads_here})", flush=True)
    clusters = {}
    for n in (1, 2):
        t = time.perf_counter()
        cluster = LocalCluster(n_workers=n, processes=True, threads_per_worker=1, host="127.0.0.1",
                               dashboard_address=None, scheduler_kwargs={"dashboard_address": "127.0.0.1:0"},
                               env=WORKER_ENV)
        client = Client(cluster)
        # as every DaskExecutor does (run_study registers it again): glibc's malloc thresholds reset in
        # each worker, which Dask's nanny starts with MALLOC_TRIM_THRESHOLD_=65536; registered before
        # the warm-up so that the capacity calibration and every run see the same workers
        from simkit.runner._dask_plugin import MallocTuning
        client.register_plugin(MallocTuning())
        started = time.perf_counter() - t
        workers = list(client.scheduler_info()["workers"])
        warm = client.gather([client.submit(_warm, warm_cfgs, workers=[w], allow_other_workers=False,
                                            pure=False, key=f"warm-up-{w}") for w in workers])
        assert {th for _, _, th in warm} == {1}, f"workers run {warm} Numba threads, not 1"
        print(f"{n} worker(s): started in {started:.1f} s, warm-up {max(s for _, s, _ in warm):.1f} s "
              f"(Numba threads per worker: {[th for _, _, th in warm]})", flush=True)
        clusters[n] = (cluster, client)

    runs = {d: {m: [] for m in MODES} for d in designs}
    capacity, loads = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            loads.append(_rounds.loadavg()[0])
            capacity.append(_capacity(clusters[2][1], all_designs["blocks"], args.capacity_blocks))
            print(f"[{r + 1}/{args.rounds}] load {loads[-1]:.2f}; parallel capacity of 2 worker processes: "
                  f"{capacity[-1]['capacity']:.2f} cores", flush=True)
            for dname, cfg in designs.items():
                for mode in _rounds.order_of(MODES, r):
                    out = Path(tmp) / f"{dname}-{mode.replace(' ', '')}-{r}.nc"
                    if mode == "in-process":
                        s = _timed_in_process(cfg, out)
                    else:
                        cluster, client = clusters[int(mode[0])]
                        s = _timed_dask(cfg, out, cluster, client)
                    runs[dname][mode].append(s)
                    print(f"[{r + 1}/{args.rounds}] {dname:<6} {mode:<10} wall {s['wall_s']:6.2f} s  "
                          f"tasks {s['task_time_s']:6.2f} s  overhead {100 * s['overhead_fraction']:5.1f}%",
                          flush=True)
    logging.getLogger("distributed").setLevel(logging.ERROR)  # no INFO lines while closing
    for cluster, client in clusters.values():
        client.close()
        cluster.close()

    cap = [c["capacity"] for c in capacity]
    cases = []
    for dname, modes in runs.items():
        ref = modes["in-process"][0]["dataset"]
        identical = all(_same_results(ref, s["dataset"]) for ss in modes.values() for s in ss)
        med = {m: {k: (statistics.median(s[k] for s in ss) if isinstance(ss[0][k], float) else ss[0][k])
                   for k in ss[0] if k not in ("dataset", "prepare_durations_s", "block_durations_s")}
               for m, ss in modes.items()}
        seconds = {m: [s["wall_s"] for s in ss] for m, ss in modes.items()}
        w1 = med["1 worker"]
        # the ceiling of the engine's schedule (every preparation, a barrier, every block) on 2
        # workers, from the task durations measured on 1 worker (no contention between workers)
        one = modes["1 worker"][0]
        ceiling = (sum(one["prepare_durations_s"]) + sum(one["block_durations_s"])) / (
            _makespan(sorted(one["prepare_durations_s"], reverse=True), 2) + _makespan(one["block_durations_s"], 2))
        # per-task cost of the engine + Dask in the block phase, and the task size for < 5%
        n_blocks = w1["n_tasks"] - len(w1["prepare_task_s"])
        per_task = max(w1["block_phase_s"] - w1["block_task_s_total"], 0.0) / n_blocks
        speedup = _rounds.ratio(seconds, "1 worker", "2 workers", means="1-worker wall / 2-worker wall")
        ratios = {
            "2 vs 1 worker": speedup,
            "in-process vs 1 worker": _rounds.ratio(seconds, "1 worker", "in-process",
                                                    means="1-worker wall / in-process wall"),
            "2 workers vs in-process": _rounds.ratio(seconds, "in-process", "2 workers",
                                                     means="in-process wall / 2-worker wall"),
            "fraction of capacity": _rounds.summarise(
                np.asarray(speedup["per_round"]) / np.asarray(cap), target=TARGET_FRACTION_OF_CAPACITY,
                means="per-round speed-up 2 vs 1 worker / that round's parallel capacity of 2 workers"),
        }
        cases.append({
            "case": dname, "params": {k: v for k, v in designs[dname].items()}, "rounds": args.rounds,
            "order": "alternating: " + ", ".join(MODES) + " in even rounds, reversed in odd ones",
            "seconds": seconds, "load_1min_per_round": loads, "ratios": ratios,
            "identical_datasets": identical, "modes_median": med,
            "ceiling_speedup_2_vs_1_worker": ceiling,
            "ceiling_fraction_of_capacity": min(ceiling, statistics.median(cap)) / statistics.median(cap),
            "block_phase_speedup_2_vs_1_worker": w1["block_phase_s"] / med["2 workers"]["block_phase_s"],
            "serial_fraction_1_worker": max(w1["prepare_task_s"]) / w1["task_time_s"],
            "overhead_per_block_task_s": per_task,
            "fixed_driver_s": w1["head_s"] + w1["tail_s"],
            "block_task_s_for_5pct_overhead": 19.0 * per_task,
        })
    meta.update(simkit_version=simkit.__version__)
    out = _rounds.document(
        "scaling", meta, cases, worker_env=WORKER_ENV,
        worker_malloc="simkit.runner._dask_plugin.MallocTuning in every worker (mmap threshold 32 MiB, "
                      "trim threshold 64 MiB, over the nanny's MALLOC_TRIM_THRESHOLD_=65536)",
        parallel_capacity_2_workers={"runs": capacity, "blocks": args.capacity_blocks,
                                     **_rounds.summarise(cap, means="2 x alone / together")})
    print()
    for c in cases:
        m, r = c["modes_median"], c["ratios"]
        print(f"{c['case']}: {c['params']['settings']}, k_max {c['params']['k_max']}, {c['params']['n_blocks']} "
              f"blocks; datasets identical across modes: {c['identical_datasets']}")
        print(f"  {'mode':<11}{'wall s':>8}{'tasks s':>9}{'overhead':>10}{'prep phase':>12}{'block phase':>13}"
              f"{'tail s':>8}{'ideal s':>9}")
        for mode, s in m.items():
            print(f"  {mode:<11}{s['wall_s']:>8.2f}{s['task_time_s']:>9.2f}{100 * s['overhead_fraction']:>9.1f}%"
                  f"{s['prepare_phase_s']:>12.2f}{s['block_phase_s']:>13.2f}{s['tail_s']:>8.2f}{s['ideal_wall_s']:>9.2f}")
        print(f"  speed-up 2 vs 1 worker {_rounds.fmt(r['2 vs 1 worker'])}; fraction of capacity "
              f"{_rounds.fmt(r['fraction of capacity'])} (target >= 0.9: "
              f"{'met' if r['fraction of capacity']['met'] else 'not shown'}); in-process vs 1 worker "
              f"{_rounds.fmt(r['in-process vs 1 worker'])}; 2 workers vs in-process {_rounds.fmt(r['2 workers vs in-process'])}"
              f"; schedule ceiling {c['ceiling_speedup_2_vs_1_worker']:.2f}x; block phase "
              f"{c['block_phase_speedup_2_vs_1_worker']:.2f}x")
        print(f"  longest preparation = {100 * c['serial_fraction_1_worker']:.0f}% of the task time; overhead per "
              f"block task {1000 * c['overhead_per_block_task_s']:.1f} ms (median block "
              f"{1000 * m['1 worker']['block_task_s_median']:.0f} ms): blocks of >= "
              f"{c['block_task_s_for_5pct_overhead']:.2f} s keep it under 5%; fixed driver cost {c['fixed_driver_s']:.2f} s")
        print(f"  driver process CPU: {m['1 worker']['driver_cpu_s']:.2f} s (1 worker), "
              f"{m['2 workers']['driver_cpu_s']:.2f} s (2 workers)")
    pc = out["parallel_capacity_2_workers"]
    print(f"parallel capacity of 2 worker processes: {_rounds.fmt(pc, ' cores')}; load average before "
          f"{meta['load_average_start'][0]:.2f}, after {out['meta']['load_average_end'][0]:.2f}")
    if not args.quick:
        _write("scaling", out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
