"""Throughput of the InfoNCE estimator against the baselines a user would otherwise write, and
against the limits of this machine measured in the same run.

All contenders compute, for n anchors with positives and K_max shared negatives, the loss
l_k = -s0 + log(e^{s0} + sum_{j<=k} e^{s_j}) for every k of the grid 1, 2, 4, ..., K_max, in one
process, side by side, on the same inputs:

* simkit           -- simkit.estimators.infonce.infonce_losses (Numba, fused score/exp/prefix sums, float64);
* simkit-f32       -- the same with ``dtype=np.float32`` (float32 scores and exponentials, float64
                      sums; simkit._jit.infonce32): the like-for-like contender of the float32 baselines;
* numpy-tuned      -- matmul on cache-sized chunks into a reused buffer, in-place exp, segment sums
                      over the grid and a cumulative sum (float64);
* torch1p-f32/f64  -- single-pass PyTorch on the CPU, what a careful user writes: per anchor chunk
                      one matmul (x / tau) @ y.T into a reused buffer, subtract the positive's score
                      and ``exp_`` in place, the sums of the grid's segments (k_{g-1}, k_g] of the
                      negatives, a cumulative sum over the grid and log1p;
* torch1p-f32/f64-alone -- the same code timed in a fresh process that imports only NumPy and
                      PyTorch (``_torch_alone.py``), on the same inputs, so that sharing a process
                      with Numba's and OpenBLAS's thread pools cannot handicap PyTorch unseen. On
                      2026-12-04 (AMD EPYC host) PyTorch's figure moved up to 2x between runs, in
                      this process and alone alike (cause not found), so since 2026-12-05 the lone
                      figure is the best over ``--alone-processes`` (default 4) fresh processes of
                      ``--repeats`` calls each, as in the separate script of 2026-12-04 whose best,
                      990 M pairs/s at (32, 1024), the single-process figure had not reached. simkit
                      gets as many lone processes (next item). Compare the better of each
                      contender's two figures;
* simkit-alone, simkit-f32-alone -- simkit's two contenders timed the same way in as many fresh
                      processes that never import PyTorch (``_simkit_alone.py``), added on
                      2026-12-05 after simkit float32 at (32, 1024) read 842 and 1145 M pairs/s in
                      this process, 1.4-1.6 G in processes of its own in a separate script (the
                      lone processes of the next two runs then read 0.8-1.1 G while the in-process
                      figure read 1.4-1.6 G: this machine's two speed levels, see docs/performance.md): the
                      issue's ratio is the better of simkit's two float32 figures over the better
                      of PyTorch's two;
* torch-perk-f32/f64 -- the per-k PyTorch baseline of earlier versions of this benchmark: logits
                      on anchor chunks, then torch.nn.functional.cross_entropy on the first k+1
                      columns, once for every k of the grid (17 passes at K_max = 65536).

Figures are pair evaluations per second (n * K_max / seconds), best of ``--repeats`` (default 7)
consecutive calls per contender (per-k PyTorch: 2 calls at K_max = 65536); every contender's
output is checked against simkit's (largest absolute difference, in nats). Numba compilation is
done before timing and reported separately.

The machine's limits are measured in the same process, before the contenders: the throughput of
a vectorised ``exp`` (elements/s; NumPy's ``np.exp``, simkit's own Numba ``vexp_inplace`` and ``torch.exp``,
float64 and float32, on one core and on all cores, each thread cycling over L2-sized input blocks that stay
in its cache, so that the arithmetic, not the memory, is measured)
and matmul GFLOP/s (NumPy dgemm/sgemm, one and two OpenBLAS threads via threadpoolctl, on the
shapes the contenders use). A pair needs one ``exp`` and, for the score, 2 d flops, so the bounds
are ``exp/s`` pairs/s and ``GFLOP/s / (2 d)`` pairs/s; the binding limit of a contender is the
smaller of the two for its precision on all cores (at d = 3 that is the exponential; a d = 3 gemm
measures its output writes, not arithmetic, so the matmul bound there is the d = 32 shape's
GFLOP/s over 2 d and is reported for information only). The limits are measured before and again
after the contenders (the load of a shared machine changes during a run); the bounds are the
better of the two, and every contender is reported as a fraction of its binding limit. All-core
figures are measured, not the one-core figure times the cores. Run: ``python benchmarks/bench_infonce.py`` (``--quick`` for a
short run; ``--append`` adds this run to the ``runs`` of an existing results file). Results go to
benchmarks/results/infonce.json, with the load average at the start and at the end.

On machines where OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE are set (a workaround for old OpenBLAS
builds), run this benchmark with both unset in its own command; the OpenBLAS kernel used is
recorded (threadpoolctl) in the results.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

from _torch_first import SPINCOUNT_AT_TORCH_IMPORT, TORCH_FIRST  # noqa: I001  (before simkit: see there)

import numpy as np
from threadpoolctl import threadpool_info, threadpool_limits

import simkit  # noqa: F401  (sets GOMP_SPINCOUNT unless set; PyTorch's libgomp has loaded already)
from simkit.estimators.infonce import infonce_losses
from simkit.distributions.sphere import Uniform

from _torch_alone import torch_single_pass  # noqa: E402  (imports neither simkit nor torch at the top)

TAU = 0.1


def numpy_tuned(x, xp, y, tau, grid, chunk_a=256, chunk_n=4096):
    """Cache-blocked NumPy: returns l_k (n, G) in float64."""
    n, d = x.shape
    k_max = int(grid[-1])
    s0 = np.einsum("ij,ij->i", x, xp) / tau
    out = np.empty((n, grid.size))
    chunk_n = min(chunk_n, k_max)
    bufs = {}  # contiguous reused buffers, one per chunk shape
    lo_edges = np.concatenate([[0], grid[:-1]])
    for a0 in range(0, n, chunk_a):
        a1 = min(n, a0 + chunk_a)
        xa = x[a0:a1] / tau
        sh = s0[a0:a1, None]
        seg_tot = np.zeros((a1 - a0, grid.size))
        for j0 in range(0, k_max, chunk_n):
            j1 = min(k_max, j0 + chunk_n)
            shape = (a1 - a0, j1 - j0)
            sc = bufs.get(shape)
            if sc is None:
                sc = bufs[shape] = np.empty(shape)
            np.matmul(xa, y[j0:j1].T, out=sc)
            sc -= sh
            np.exp(sc, out=sc)
            # grid segments (k_{g-1}, k_g] that intersect [j0, j1)
            for g in range(grid.size):
                lo, hi = max(lo_edges[g], j0), min(grid[g], j1)
                if hi > lo:
                    seg_tot[:, g] += sc[:, lo - j0:hi - j0].sum(axis=1)
        out[a0:a1] = np.log1p(np.cumsum(seg_tot, axis=1))
    return out


def torch_ce(x, xp, y, tau, grid, dtype, chunk_a=256):
    import torch
    import torch.nn.functional as F
    tx = torch.from_numpy(x).to(dtype)
    txp = torch.from_numpy(xp).to(dtype)
    ty = torch.from_numpy(y).to(dtype)
    n = tx.shape[0]
    out = np.empty((n, grid.size))
    with torch.no_grad():
        for a0 in range(0, n, chunk_a):
            xa = tx[a0:a0 + chunk_a]
            pos = (xa * txp[a0:a0 + chunk_a]).sum(1, keepdim=True) / tau
            logits = torch.cat([pos, xa @ ty.T / tau], dim=1)
            target = torch.zeros(xa.shape[0], dtype=torch.long)
            for g, k in enumerate(grid):
                out[a0:a0 + xa.shape[0], g] = F.cross_entropy(logits[:, :k + 1], target, reduction="none").double().numpy()
    return out


def run_alone(script, x, xp, y, tau, grid, repeats, processes=1):
    """A contender's lone figure: ``script`` (``_torch_alone.py``: single-pass PyTorch, importing
    only NumPy and PyTorch; ``_simkit_alone.py``: simkit's estimator, never importing PyTorch) run
    in ``processes`` fresh processes, one after the other, each making ``repeats`` timed calls in
    float32 and float64 on these inputs: {"f32": (best seconds, output), "f64": ...,
    "per_process": {"f32": [best seconds of each process], "f64": [...]}}."""
    import subprocess
    import tempfile
    best, per = {}, {"f32": [], "f64": []}
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp) / "in.npz", Path(tmp) / "out.npz"
        np.savez(src, x=x, xp=xp, y=y, tau=tau, grid=grid)
        for _ in range(processes):
            subprocess.run([sys.executable, str(Path(__file__).parent / script), str(src), str(dst),
                            str(repeats)], check=True)
            z = np.load(dst)
            if bool(z["foreign_loaded"]):
                raise RuntimeError(f"the lone process of {script} loaded the other contender's library")
            for k in ("f32", "f64"):
                t = float(z[f"t_{k}"])
                per[k].append(t)
                if k not in best or t < best[k][0]:
                    best[k] = (t, z[f"out_{k}"])
    return {**best, "per_process": per}


def best_times(fns, repeats):
    """Best wall time of each zero-argument callable over ``repeats`` consecutive calls (a
    ``(fn, r)`` pair: ``r`` calls). Contenders run one after the other, not interleaved: OpenBLAS
    threads keep spinning for a while after a NumPy/PyTorch matmul, which slowed whichever
    contender ran next by up to 30% in an interleaved trial. Returns [(seconds, last result)]."""
    out = []
    for f in fns:
        fn, reps = f if isinstance(f, tuple) else (f, repeats)
        best, res = float("inf"), None
        for _ in range(reps):
            t0 = time.perf_counter()
            res = fn()
            best = min(best, time.perf_counter() - t0)
        out.append((best, res))
    return out


# ----------------------------------------------------------------------------------------------
# the machine's limits

_EXP_TOTAL = 1 << 24  # elements evaluated per timed pass
_EXP_BLOCK = 1 << 14  # elements per block: 128 KB in float64, in L2 with its output
# Blocks of the source a thread cycles through: the inputs stay in its cache, so the rate measures
# the exponential's arithmetic, not the memory streaming of a 128 MB array (which bounded the
# earlier version of this limit: two threads measured barely more than one, and the fused estimator,
# whose scores never leave the registers, ran at 1.2-1.9x that "limit" at d = 3).
_EXP_RESIDENT = 2


def _resident(b0, t):
    """Offset of the block used for the ``b0``-th element of thread ``t``: one of its _EXP_RESIDENT blocks."""
    return ((b0 // _EXP_BLOCK) % _EXP_RESIDENT + t * _EXP_RESIDENT) * _EXP_BLOCK


def _exp_source(dtype):
    # scores of the InfoNCE pass lie in [-2/tau, 0] after the shift (tau = 0.1)
    return np.random.default_rng(1).uniform(-20.0, 0.0, _EXP_TOTAL).astype(dtype)


def _numpy_exp_rate(a, threads, repeats):
    """Elements/s of np.exp over ``a`` in L2-sized blocks into per-thread output blocks; ``threads``
    Python threads on disjoint halves (np.exp releases the GIL)."""
    from concurrent.futures import ThreadPoolExecutor
    parts = np.array_split(np.arange(0, a.size, _EXP_BLOCK), threads)
    outs = [np.empty(_EXP_BLOCK, dtype=a.dtype) for _ in range(threads)]

    def work(t):
        o = outs[t]
        for b0 in parts[t]:
            r = _resident(b0, t)
            np.exp(a[r:r + _EXP_BLOCK], out=o)

    best = float("inf")
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(work, range(threads)))  # warm
        for _ in range(repeats):
            t0 = time.perf_counter()
            list(pool.map(work, range(threads)))
            best = min(best, time.perf_counter() - t0)
    return a.size / best


def _numba_exp_rate(a, threads, repeats):
    """Elements/s of simkit's hand-vectorised exp (the one fused in the estimator: float64
    ``vexp_inplace``, float32 ``exp32_inplace`` of the float32 mode), Numba prange."""
    import numba
    kern = _numba_exp_kernel(a.dtype)
    out = np.empty((numba.config.NUMBA_NUM_THREADS, _EXP_BLOCK), dtype=a.dtype)
    tb = np.empty_like(out)
    old = numba.get_num_threads()
    numba.set_num_threads(threads)
    try:
        kern(a, out, tb)
        best = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            kern(a, out, tb)
            best = min(best, time.perf_counter() - t0)
    finally:
        numba.set_num_threads(old)
    return a.size / best


_KERN = {}


def _numba_exp_kernel(dtype=np.float64):
    """The Numba prange kernel timing simkit's exp of ``dtype`` over the cache-resident blocks."""
    name = np.dtype(dtype).name
    if name not in _KERN:
        from numba import get_thread_id, njit, prange

        from simkit._jit.infonce import vexp_inplace
        from simkit._jit.infonce32 import exp32_inplace

        if name == "float64":
            @njit
            def one_block(o, tb):
                vexp_inplace(o, _EXP_BLOCK, 1.0, 0.0, tb)
        else:
            @njit
            def one_block(o, tb):
                exp32_inplace(o)

        @njit(parallel=True, fastmath={"contract"})
        def kern(a, out, tb):
            nb = a.size // _EXP_BLOCK
            for b in prange(nb):
                t = get_thread_id()
                o = out[t]
                r = ((b % _EXP_RESIDENT) + t * _EXP_RESIDENT) * _EXP_BLOCK  # _resident(): cache-resident input
                o[:] = a[r:r + _EXP_BLOCK]
                one_block(o, tb[t])
        _KERN[name] = kern
    return _KERN[name]


def _gemm_gflops(m, k, n, dtype, threads, repeats, py_threads=1, min_s=0.05):
    """GFLOP/s (2 m k n per product) of NumPy's matmul (m, k) @ (k, n) into a reused output, on
    ``threads`` OpenBLAS threads, or (``py_threads`` > 1) on that many Python threads at once, each
    with its own operands and one OpenBLAS thread (the pattern of simkit's pass: single-threaded
    BLAS inside each of its parallel workers)."""
    from concurrent.futures import ThreadPoolExecutor
    rng = np.random.default_rng(2)
    ops = [(rng.standard_normal((m, k)).astype(dtype),
            rng.standard_normal((n, k)).astype(dtype).T,  # transposed view, as the contenders use it
            np.empty((m, n), dtype=dtype)) for _ in range(py_threads)]

    def work(i, reps):
        a, b, c = ops[i]
        for _ in range(reps):
            np.matmul(a, b, out=c)

    with threadpool_limits(limits=1 if py_threads > 1 else threads, user_api="blas"), \
            ThreadPoolExecutor(py_threads) as pool:
        work(0, 1)
        t0 = time.perf_counter()
        work(0, 1)
        one = time.perf_counter() - t0
        reps = max(1, int(min_s / max(one, 1e-7)))
        best = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            list(pool.map(work, range(py_threads), [reps] * py_threads))
            best = min(best, (time.perf_counter() - t0) / reps)
    return 2.0 * m * k * n * py_threads / best / 1e9


def _torch_exp_rate(a, threads, repeats):
    """Elements/s of torch.exp (its vectorised CPU kernel) over ``a`` in L2-sized blocks into a
    reused output, on ``threads`` intra-op threads."""
    import torch
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        ta = torch.from_numpy(a)
        blk = _EXP_BLOCK * threads  # each intra-op thread gets one L2-sized block
        out = torch.empty(blk, dtype=ta.dtype)
        # the same _EXP_RESIDENT inputs (cache-resident) cycled over the pass of _EXP_TOTAL elements
        views = [ta[(i % _EXP_RESIDENT) * blk:(i % _EXP_RESIDENT + 1) * blk] for i in range(ta.numel() // blk)]
        for v in views[:8]:
            torch.exp(v, out=out)
        best = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            for v in views:
                torch.exp(v, out=out)
            best = min(best, time.perf_counter() - t0)
    finally:
        torch.set_num_threads(old)
    return len(views) * blk / best


def measure_limits(repeats, quick=False, with_torch=False):
    """The machine's exp throughput and gemm GFLOP/s, one core and all cores (see the docstring)."""
    cores = os.cpu_count() or 1
    exp = {}
    for dt in ("float64", "float32"):
        a = _exp_source(np.dtype(dt))
        if quick:
            a = a[:_EXP_TOTAL // 8]
        for threads in sorted({1, cores}):
            exp[f"numpy_{dt}_{threads}t"] = _numpy_exp_rate(a, threads, repeats)
        for threads in sorted({1, cores}):
            exp[f"simkit_vexp_{dt}_{threads}t"] = _numba_exp_rate(a, threads, repeats)
        if with_torch:
            for threads in sorted({1, cores}):
                exp[f"torch_{dt}_{threads}t"] = _torch_exp_rate(a, threads, repeats)
    gemm = {}
    shapes = {"d32_chunk": (256, 32, 4096), "d32_tile": (32, 32, 512), "d3_chunk": (256, 3, 4096),
              "square_1024": (1024, 1024, 1024)}
    for dt in ("float64", "float32"):
        for name, (m, k, n) in shapes.items():
            for threads in sorted({1, cores}):
                gemm[f"{name}_{dt}_{threads}t"] = _gemm_gflops(m, k, n, np.dtype(dt), threads, repeats)
            if cores > 1 and name != "square_1024":
                gemm[f"{name}_{dt}_{cores}x1t"] = _gemm_gflops(m, k, n, np.dtype(dt), 1, repeats,
                                                               py_threads=cores)
    bounds = {}
    for dt in ("float64", "float32"):
        exp_one = max(v for k_, v in exp.items() if dt in k_ and k_.endswith("_1t"))
        # all cores can do at least what one does (on a loaded machine the measured all-core rate
        # can fall below the one-core rate)
        exp_all = max([exp_one] + [v for k_, v in exp.items() if dt in k_ and k_.endswith(f"_{cores}t")])
        mm_all = max(v for k_, v in gemm.items() if k_.startswith("d32_") and dt in k_
                     and (k_.endswith(f"_{cores}t") or k_.endswith(f"_{cores}x1t")))
        mm_one = max(gemm[f"d32_chunk_{dt}_1t"], gemm[f"d32_tile_{dt}_1t"])
        mm_all = max(mm_all, mm_one)
        bounds[dt] = {"exp_per_s_all_cores": exp_all, "exp_per_s_one_core": exp_one,
                      "gemm_gflops_d32_all_cores": mm_all, "gemm_gflops_d32_one_core": mm_one}
    return {"exp_elements_per_s": exp, "gemm_gflops": gemm, "gemm_shapes_mkn": shapes, "best": bounds,
            "exp_what": f"np.exp / simkit vexp_inplace / torch.exp of {a.size} elements uniform on "
                        f"[-20, 0], in blocks of {_EXP_BLOCK} (per thread) into a reused output, each thread "
                        f"cycling over {_EXP_RESIDENT} cache-resident input blocks (arithmetic, not memory); numpy on "
                        "N threads = N Python threads on disjoint halves; simkit_vexp on N Numba "
                        "threads; torch on N intra-op threads. The bound of a precision is the best "
                        "implementation's rate",
            "gemm_what": "np.matmul (m, k) @ (k, n) (right operand a transposed view) into a reused "
                         "output, on N OpenBLAS threads (threadpoolctl; '_Nt') or on N Python threads "
                         "with one OpenBLAS thread each ('_Nx1t'); GFLOP = 2 m k n / 1e9; the d = 32 "
                         "bound is the best d32 shape"}


def _best_of(a, b):
    """Element-wise best (largest) of two :func:`measure_limits` results, with "best" recomputed."""
    out = {k: v for k, v in a.items()}
    out["exp_elements_per_s"] = {k: max(v, b["exp_elements_per_s"].get(k, 0.0)) for k, v in a["exp_elements_per_s"].items()}
    out["gemm_gflops"] = {k: max(v, b["gemm_gflops"].get(k, 0.0)) for k, v in a["gemm_gflops"].items()}
    out["best"] = {dt: {k: max(v, b["best"][dt][k]) for k, v in bd.items()} for dt, bd in a["best"].items()}
    out["what"] = "element-wise best of the measurements before and after the contenders"
    return out


def binding_limit(limits, d, dtype):
    """(limit pairs/s, which) on all cores: min of the exp bound and, at d = 32, the matmul bound."""
    b = limits["best"][dtype]
    exp_b = b["exp_per_s_all_cores"]
    mm_b = b["gemm_gflops_d32_all_cores"] * 1e9 / (2 * d)
    if d > 8 and mm_b < exp_b:
        return mm_b, "matmul", exp_b, mm_b
    return exp_b, "exp", exp_b, mm_b


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--alone-processes", type=int, default=4,
                    help="fresh processes for the lone PyTorch figure, the best counts (default 4)")
    ap.add_argument("--append", action="store_true", help="add this run to the runs of the results file")
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "infonce.json")
    args = ap.parse_args(argv)
    for name in ("repeats", "alone_processes"):
        if getattr(args, name) < 1:
            ap.error(f"argument --{name.replace('_', '-')}: must be a positive integer, got {getattr(args, name)}")
    import numba
    load_start = os.getloadavg()
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    have_torch = False
    if not args.no_torch:
        try:
            import torch
            have_torch = True
        except ImportError:
            print("PyTorch not installed (pip install 'simkit[bench]'); skipping its rows")
    sizes = [(3, 1024), (3, 65536), (32, 1024), (32, 65536)]
    n = 1024 if args.quick else 4096
    rng = np.random.default_rng(0)
    print(f"machine: {platform.platform()}, {os.cpu_count()} CPUs; numba threads {numba.get_num_threads()}"
          + (f"; torch threads {torch.get_num_threads()}, torch {torch.__version__}" if have_torch else ""))
    blas = [{k: v for k, v in i.items() if k in ("internal_api", "version", "architecture", "num_threads")}
            for i in threadpool_info()]
    print(f"BLAS: {blas}; OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE')}; "
          f"load average at start {tuple(round(v, 2) for v in load_start)}")
    # compile before timing
    t0 = time.perf_counter()
    xw = Uniform(3).rvs(8, rng=rng)
    infonce_losses(xw, xw, Uniform(3).rvs(16, rng=rng), TAU, np.array([1, 2, 16]))
    xw = Uniform(32).rvs(8, rng=rng)
    infonce_losses(xw, xw, Uniform(32).rvs(16, rng=rng), TAU, np.array([1, 2, 16]))
    compile_s = time.perf_counter() - t0
    print(f"Numba compile/load time of the estimator (not in the figures): {compile_s:.2f} s")

    limits = measure_limits(min(args.repeats, 5), args.quick, with_torch=have_torch)
    print("\nlimits of this machine (measured now):")
    for k_, v in limits["exp_elements_per_s"].items():
        print(f"  exp {k_:<26} {v / 1e9:7.2f} G elements/s")
    for k_, v in limits["gemm_gflops"].items():
        m_, kk, nn_ = limits["gemm_shapes_mkn"][k_.split("_float")[0]]
        print(f"  gemm {k_:<25} {v:7.1f} GFLOP/s  ({m_} x {kk}) @ ({kk} x {nn_})")
    print()

    rows = []
    alone_per_process = {}
    simkit_alone_per_process = {}
    header = (f"{'d':>3} {'K_max':>6} {'n':>5} {'contender':<15} {'Mpairs/s':>9} {'simkit x':>9} {'f32 x':>9} "
              f"{'max abs err':>12} {'limit':>7} {'of limit':>8}")
    print(header)
    print("-" * len(header))
    for d, k_max in sizes:
        nn = n if k_max <= 4096 else max(256, n // 4)
        x = Uniform(d).rvs(nn, rng=rng)
        xp = simkit.VMFKernel(10.0).sample(x, rng=rng)
        y = Uniform(d).rvs(k_max, rng=rng)
        grid = 1 << np.arange(int(np.log2(k_max)) + 1)
        pairs = nn * k_max
        names = ["simkit", "simkit-f32", "numpy-tuned"]
        fns = [lambda: infonce_losses(x, xp, y, TAU, grid),
               lambda: infonce_losses(x, xp, y, TAU, grid, dtype=np.float32),
               lambda: numpy_tuned(x, xp, y, TAU, grid)]
        if have_torch:
            reps = 2 if k_max > 4096 else args.repeats
            names += ["torch1p-f32", "torch1p-f64", "torch-perk-f32", "torch-perk-f64"]
            fns += [lambda: torch_single_pass(x, xp, y, TAU, grid, torch.float32),
                    lambda: torch_single_pass(x, xp, y, TAU, grid, torch.float64),
                    (lambda: torch_ce(x, xp, y, TAU, grid, torch.float32), reps),
                    (lambda: torch_ce(x, xp, y, TAU, grid, torch.float64), reps)]
        timed = best_times(fns, args.repeats)
        if have_torch:
            # the same PyTorch contender in a process of its own: the baseline is never handicapped
            # by sharing a process with Numba's and OpenBLAS's thread pools (the better one counts)
            alone = run_alone("_torch_alone.py", x, xp, y, TAU, grid, args.repeats, args.alone_processes)
            alone_per_process[f"d={d} K={k_max}"] = alone["per_process"]
            names += ["torch1p-f32-alone", "torch1p-f64-alone"]
            timed += [alone["f32"], alone["f64"]]
            # and simkit in processes without PyTorch, as many: neither is judged in the other's
            # environment only (the better of each contender's two figures counts)
            ours = run_alone("_simkit_alone.py", x, xp, y, TAU, grid, args.repeats, args.alone_processes)
            simkit_alone_per_process[f"d={d} K={k_max}"] = ours["per_process"]
            names += ["simkit-alone", "simkit-f32-alone"]
            timed += [ours["f64"], ours["f32"]]
        t_s, ref = timed[0]
        t_s32 = timed[1][0]  # simkit-f32: the like-for-like time of the float32 contenders
        for name, (t, out) in zip(names, timed):
            err = float(np.max(np.abs(out - ref)))  # nats
            rate = pairs / t
            dt = "float32" if "-f32" in name else "float64"
            lim, which, exp_b, mm_b = binding_limit(limits, d, dt)
            rows.append({"d": d, "k_max": k_max, "n": nn, "contender": name, "dtype": dt, "pairs_per_s": rate,
                         "simkit_speedup": t / t_s, "simkit_f32_speedup": t / t_s32,
                         "max_abs_err_nat": err, "seconds": t,
                         "limit_pairs_per_s": lim, "limit_binding": which, "fraction_of_limit": rate / lim,
                         "exp_bound_pairs_per_s": exp_b, "matmul_bound_pairs_per_s": mm_b})
            print(f"{d:>3} {k_max:>6} {nn:>5} {name:<15} {rate / 1e6:>9.1f} {t / t_s:>9.2f} {t / t_s32:>9.2f} {err:>12.1e} "
                  f"{which:>7} {rate / lim:>8.0%}")
    # the limits again, after the contenders: on a shared machine the load changes during the run, so
    # the bounds are the better of the two measurements (and the fractions computed against them)
    limits_after = measure_limits(min(args.repeats, 5), args.quick, with_torch=have_torch)
    limits_before = limits
    limits = _best_of(limits_before, limits_after)
    for row in rows:
        lim, which, exp_b, mm_b = binding_limit(limits, row["d"], row["dtype"])
        row.update(limit_pairs_per_s=lim, limit_binding=which, fraction_of_limit=row["pairs_per_s"] / lim,
                   exp_bound_pairs_per_s=exp_b, matmul_bound_pairs_per_s=mm_b)
    print("\nfraction of the limit, with the limits the better of the measurements before and after "
          "the contenders:")
    print(f"{'d':>3} {'K_max':>6} {'contender':<15} {'Mpairs/s':>9} {'limit':>7} {'Mpairs/s':>9} {'of limit':>8}")
    for row in rows:
        print(f"{row['d']:>3} {row['k_max']:>6} {row['contender']:<15} {row['pairs_per_s'] / 1e6:>9.1f} "
              f"{row['limit_binding']:>7} {row['limit_pairs_per_s'] / 1e6:>9.1f} {row['fraction_of_limit']:>8.0%}")
    over = [r for r in rows if r["fraction_of_limit"] > 1.0]
    for r in over:  # a limit below a contender's own rate was measured under a disturbance
        print(f"WARNING: {r['contender']} at d = {r['d']}, K_max = {r['k_max']} ran at {r['fraction_of_limit']:.0%} "
              f"of its {r['limit_binding']} limit: that limit's measurement is too low, and so are the fractions "
              "computed against it")
    for dt, b in limits["best"].items():
        print(f"  {dt}: exp {b['exp_per_s_all_cores'] / 1e9:.2f} G/s all cores ({b['exp_per_s_one_core'] / 1e9:.2f} "
              f"one core); d32 gemm {b['gemm_gflops_d32_all_cores']:.1f} GFLOP/s all cores "
              f"({b['gemm_gflops_d32_one_core']:.1f} one core)")
    # the ratio: simkit float32 against the better of the two single-pass PyTorch float32 figures
    vs_best = {}
    for d, k_max in sizes:
        rate = {r["contender"]: r["pairs_per_s"] for r in rows if (r["d"], r["k_max"]) == (d, k_max)}
        torch_best = max((rate[c] for c in ("torch1p-f32", "torch1p-f32-alone") if c in rate), default=None)
        ours_best = max(rate[c] for c in ("simkit-f32", "simkit-f32-alone") if c in rate)
        if torch_best is not None:
            vs_best[f"d={d} K={k_max}"] = ours_best / torch_best
    if vs_best:
        print("\nthe better of simkit-f32 (this process) and simkit-f32-alone / the better of torch1p-f32 "
              "(this process) and torch1p-f32-alone: "
              + ", ".join(f"{k} {v:.2f}x" for k, v in vs_best.items()))
    load_end = os.getloadavg()
    print(f"\nlimit = min(exp bound, matmul bound) for the contender's precision on all cores: "
          f"exp bound = exp/s, matmul bound = d32 GFLOP/s / (2 d) (binding only at d = 32)")
    print(f"load average at end {tuple(round(v, 2) for v in load_end)}")
    run = {"started_utc": started, "platform": platform.platform(), "cpus": os.cpu_count(),
           "numba_threads": numba.get_num_threads(),
           "torch": torch.__version__ if have_torch else None,
           "torch_threads": torch.get_num_threads() if have_torch else None,
           "blas": blas, "openblas_coretype": os.environ.get("OPENBLAS_CORETYPE"),
           "loadavg_start": load_start, "loadavg_end": load_end,
           "torch_imported_before_simkit": TORCH_FIRST,
           "gomp_spincount_at_torch_import": SPINCOUNT_AT_TORCH_IMPORT,
           "compile_s": compile_s, "tau": TAU, "repeats": args.repeats, "limits": limits,
           "alone_processes": args.alone_processes if have_torch else None,
           "torch1p_alone_seconds_per_process": alone_per_process,
           "simkit_alone_seconds_per_process": simkit_alone_per_process,
           "simkit_f32_vs_best_torch1p_f32": vs_best,
           "simkit_f32_vs_best_torch1p_f32_means": "since 2026-12-05 (the runs before it are in archive/infonce-2026-12-05-epyc-rows8-inprocess.json): the better of simkit-f32 and simkit-f32-alone over the better of torch1p-f32 and torch1p-f32-alone (before: simkit-f32 in this process over the better PyTorch)", "limits_before_contenders": limits_before, "limits_after_contenders": limits_after, "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    runs = []
    if args.append and args.out.exists():
        prev = json.loads(args.out.read_text())
        runs = prev.get("runs", [])
    runs.append(run)
    doc = {"benchmark": "InfoNCE l_k on the whole k grid: simkit vs NumPy and PyTorch CPU, with the "
                        "machine's exp and matmul limits measured in the same run",
           "runs": runs}
    if len(runs) >= 2:
        doc["simkit_speedup_by_run"] = {
            f"d={r['d']} K={r['k_max']} {r['contender']}": [
                next(q["simkit_speedup"] for q in rr["rows"] if (q["d"], q["k_max"], q["contender"])
                     == (r["d"], r["k_max"], r["contender"])) for rr in runs]
            for r in runs[-1]["rows"]}
        doc["simkit_f32_speedup_by_run"] = {
            f"d={r['d']} K={r['k_max']} {r['contender']}": [
                next(q["simkit_f32_speedup"] for q in rr["rows"] if (q["d"], q["k_max"], q["contender"])
                     == (r["d"], r["k_max"], r["contender"])) for rr in runs]
            for r in runs[-1]["rows"]}
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
