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
* torch1p-f32/f64-alone -- the same code timed in a process that imports only NumPy and PyTorch
                      (``_torch_alone.py``), on the same inputs, so that sharing a process with
                      Numba's and OpenBLAS's thread pools cannot handicap PyTorch unseen;
* simkit-alone, simkit-f32-alone -- simkit's two contenders timed the same way in a process that
                      never imports PyTorch (``_simkit_alone.py``). The headline ratio compares, in
                      each round, the better of simkit's two float32 figures with the better of
                      PyTorch's two;
* torch-perk-f32/f64 -- the per-k PyTorch baseline of earlier versions of this benchmark: logits
                      on anchor chunks, then torch.nn.functional.cross_entropy on the first k+1
                      columns, once for every k of the grid (17 passes at K_max = 65536).

Method (benchmarks/_rounds.py): interleaved rounds (default 16); each round times every contender
once, in alternating order (the lone processes are kept alive for the whole size and time their own
call on a line from this process), after ``--settle`` seconds of sleep (default 0.1: OpenBLAS
threads keep spinning for a while after a NumPy/PyTorch matmul, which slowed whichever contender
ran next by up to 30% in a trial without it). Every ratio is the median over rounds of the
per-round ratio of seconds (baseline / simkit: how many times faster simkit is), with a 95%
percentile bootstrap interval; the float32 target, >= 1.5x single-pass PyTorch float32, is met only
when the interval's lower end clears it. Every contender's output (its warm-up call) is checked
against simkit's (largest absolute difference, in nats). Numba compilation is done before timing
and reported separately. Figures are pair evaluations per second (n * K_max / seconds).

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
better of the two, and every contender is reported as a fraction of its binding limit (per round,
median with its interval; the interval reflects the contender's rounds, not the limit's). All-core
figures are measured, not the one-core figure times the cores. Run: ``python benchmarks/bench_infonce.py`` (``--quick`` for a
smoke test, nothing written). Results go to benchmarks/results/infonce.json (layout of
benchmarks/_rounds.py), with the load averages.

On machines where OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE are set (a workaround for old OpenBLAS
builds), run this benchmark with both unset in its own command; the OpenBLAS kernel used is
recorded (threadpoolctl) in the results.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _torch_first import SPINCOUNT_AT_TORCH_IMPORT, TORCH_FIRST  # noqa: I001  (before simkit: see there)

import numpy as np
from threadpoolctl import threadpool_info, threadpool_limits

import simkit  # noqa: F401  (sets GOMP_SPINCOUNT unless set; PyTorch's libgomp has loaded already)
from simkit.estimators.infonce import infonce_losses
from simkit.distributions.sphere import Uniform

from _torch_alone import torch_single_pass  # noqa: E402  (imports neither simkit nor torch at the top)
import _rounds  # noqa: E402

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


class Lone:
    """A contender in a process of its own (``_torch_alone.py`` or ``_simkit_alone.py``), kept alive
    for one size: its warm-up outputs, and the seconds of one call in a precision on request."""

    def __init__(self, script, tmp, x, xp, y, tau, grid):
        src, self.dst = Path(tmp) / f"{script}-in.npz", Path(tmp) / f"{script}-out.npz"
        np.savez(src, x=x, xp=xp, y=y, tau=tau, grid=grid)
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).parent / script), str(src), str(self.dst)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        if self.proc.stdout.readline().strip() != "ready":
            raise RuntimeError(f"{script} did not start")
        z = np.load(self.dst)
        if bool(z["foreign_loaded"]):
            raise RuntimeError(f"the lone process of {script} loaded the other contender's library")
        self.outputs = {"f32": z["out_f32"], "f64": z["out_f64"]}

    def seconds(self, which):
        self.proc.stdin.write(which + "\n")
        self.proc.stdin.flush()
        return float(self.proc.stdout.readline())

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


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


def _pairs_headline(names):
    """Ratios reported for one size: label -> (baseline(s), contender(s), target)."""
    have = set(names)
    out = {"f64 vs numpy-tuned": ("numpy-tuned", "simkit", None)}
    if "torch1p-f32" in have:
        out.update({
            "f32 vs torch1p-f32 (better of in-process and alone, per round)":
                (["torch1p-f32", "torch1p-f32-alone"], ["simkit-f32", "simkit-f32-alone"], 1.5),
            "f32 vs torch1p-f32, both in this process": ("torch1p-f32", "simkit-f32", None),
            "f32 vs torch1p-f32, both alone": ("torch1p-f32-alone", "simkit-f32-alone", None),
            "f64 vs torch1p-f64 (better of in-process and alone, per round)":
                (["torch1p-f64", "torch1p-f64-alone"], ["simkit", "simkit-alone"], None),
            "f32 vs torch-perk-f32": ("torch-perk-f32", "simkit-f32", None),
            "f64 vs torch-perk-f64": ("torch-perk-f64", "simkit", None)})
    return out


def main(argv=None):
    ap = _rounds.parser(__doc__, "infonce.json", quick="n / 4, 3 rounds, nothing written unless --out (a smoke test)")
    ap.add_argument("--anchors", type=int, default=1024,
                    help="n at K_max = 1024 (n / 4 at 65536); 1024 keeps 16 rounds near 8 minutes on a loaded 2-core machine")
    ap.add_argument("--settle", type=float, default=0.1, help="seconds of sleep before each timed call")
    ap.add_argument("--limit-repeats", type=int, default=5)
    ap.add_argument("--no-torch", action="store_true")
    args = _rounds.parse(ap, argv)
    if args.quick:
        args.anchors //= 4
    if args.settle < 0 or args.limit_repeats < 1 or args.anchors < 1:
        ap.error("--settle must be >= 0, --limit-repeats and --anchors >= 1")
    import numba
    meta = _rounds.meta_start()
    have_torch = False
    if not args.no_torch:
        try:
            import torch
            have_torch = True
        except ImportError:
            print("PyTorch not installed (pip install 'simkit[bench]'); skipping its contenders")
    sizes = [(3, 1024), (3, 65536), (32, 1024), (32, 65536)]
    n = args.anchors
    rng = np.random.default_rng(0)
    print(f"machine: {platform.platform()}, {os.cpu_count()} CPUs; numba threads {numba.get_num_threads()}"
          + (f"; torch threads {torch.get_num_threads()}, torch {torch.__version__}" if have_torch else ""))
    blas = [{k: v for k, v in i.items() if k in ("internal_api", "version", "architecture", "num_threads")}
            for i in threadpool_info()]
    print(f"BLAS: {blas}; OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE')}; "
          f"load average at start {tuple(meta['load_average_start'])}")
    t0 = time.perf_counter()  # compile before timing
    for d in (3, 32):
        xw = Uniform(d).rvs(8, rng=rng)
        for dt in (np.float64, np.float32):
            infonce_losses(xw, xw, Uniform(d).rvs(16, rng=rng), TAU, np.array([1, 2, 16]), dtype=dt)
    compile_s = time.perf_counter() - t0
    print(f"Numba compile/load time of the estimator (not in the figures): {compile_s:.2f} s")

    limits_before = measure_limits(args.limit_repeats, args.quick, with_torch=have_torch)
    cases = []
    for d, k_max in sizes:
        nn = n if k_max <= 4096 else max(64, n // 4)
        x = Uniform(d).rvs(nn, rng=rng)
        xp = simkit.VMFKernel(10.0).sample(x, rng=rng)
        y = Uniform(d).rvs(k_max, rng=rng)
        grid = 1 << np.arange(int(np.log2(k_max)) + 1)
        fns = {"simkit": lambda: infonce_losses(x, xp, y, TAU, grid),
               "simkit-f32": lambda: infonce_losses(x, xp, y, TAU, grid, dtype=np.float32),
               "numpy-tuned": lambda: numpy_tuned(x, xp, y, TAU, grid)}
        if have_torch:
            fns.update({"torch1p-f32": lambda: torch_single_pass(x, xp, y, TAU, grid, torch.float32),
                        "torch1p-f64": lambda: torch_single_pass(x, xp, y, TAU, grid, torch.float64),
                        "torch-perk-f32": lambda: torch_ce(x, xp, y, TAU, grid, torch.float32),
                        "torch-perk-f64": lambda: torch_ce(x, xp, y, TAU, grid, torch.float64)})
        outputs = {name: fn() for name, fn in fns.items()}  # warm-up calls, checked below
        with tempfile.TemporaryDirectory() as tmp:
            lone = {}
            if have_torch:
                lone["torch"] = Lone("_torch_alone.py", tmp, x, xp, y, TAU, grid)
                lone["simkit"] = Lone("_simkit_alone.py", tmp, x, xp, y, TAU, grid)
                for who, tag in (("torch", "torch1p"), ("simkit", "simkit")):
                    for prec in ("f32", "f64"):
                        name = f"{tag}-{prec}-alone" if who == "torch" or prec == "f32" else "simkit-alone"
                        fns[name] = (lone[who], prec)
                        outputs[name] = lone[who].outputs[prec]
            ref = outputs["simkit"]
            err = {name: float(np.max(np.abs(out - ref))) for name, out in outputs.items()}

            def timer(name, fn):
                if isinstance(fn, tuple):
                    return fn[0].seconds(fn[1])
                t = time.perf_counter()
                fn()
                return time.perf_counter() - t

            t = _rounds.interleaved(fns, args.rounds, timer=timer, between=lambda: time.sleep(args.settle))
            for p in lone.values():
                p.close()
        pairs = nn * k_max
        ratios = {label: _rounds.ratio(t["seconds"], b, c, target=tgt,
                                       means="baseline seconds / simkit seconds (how many times faster simkit is)")
                  for label, (b, c, tgt) in _pairs_headline(list(fns)).items()}
        cases.append({"case": f"d={d} K={k_max}", "params": {"d": d, "k_max": k_max, "n": nn, "tau": TAU,
                                                              "settle_s": args.settle}, **t,
                      "ratios": ratios, "max_abs_err_nat": err,
                      "pairs_per_s_median": {k: pairs / float(np.median(v)) for k, v in t["seconds"].items()}})
        print(f"\n(d, K_max) = ({d}, {k_max}), n = {nn}, {args.rounds} rounds; load {t['load_1min_per_round'][0]}"
              f"-{t['load_1min_per_round'][-1]}")
        for name, v in t["seconds"].items():
            print(f"  {name:<18} {pairs / np.median(v) / 1e6:9.1f} M pairs/s (median)  max abs err {err[name]:.1e}")
        for label, r in ratios.items():
            extra = "" if r["target"] is None else f"  (target >= {r['target']}x: {'met' if r['met'] else 'not shown'})"
            print(f"  {label:<64} {_rounds.fmt(r)}{extra}")
    # the limits again, after the contenders: on a shared machine the load changes during the run, so
    # the bounds are the better of the two measurements (and the fractions computed against them)
    limits_after = measure_limits(args.limit_repeats, args.quick, with_torch=have_torch)
    limits = _best_of(limits_before, limits_after)
    print("\nfraction of the binding limit (per round; median [95% CI]), limits the better of before and after:")
    for c in cases:
        d, k_max, nn = c["params"]["d"], c["params"]["k_max"], c["params"]["n"]
        fr = {}
        for name, v in c["seconds"].items():
            dt = "float32" if "-f32" in name else "float64"
            lim, which, exp_b, mm_b = binding_limit(limits, d, dt)
            fr[name] = _rounds.summarise(nn * k_max / np.asarray(v) / lim, means=f"pairs/s / {which} limit",
                                         limit_pairs_per_s=lim, limit_binding=which)
        best32 = np.minimum(*(np.asarray(c["seconds"][k]) for k in ("simkit-f32", "simkit-f32-alone"))) \
            if "simkit-f32-alone" in c["seconds"] else np.asarray(c["seconds"]["simkit-f32"])
        lim32, which32, _, _ = binding_limit(limits, d, "float32")
        tgt = 0.6 if (d, k_max) in ((3, 65536), (32, 1024), (32, 65536)) else None
        fr["simkit-f32, better of in-process and alone"] = _rounds.summarise(
            nn * k_max / best32 / lim32, target=tgt, means=f"pairs/s / {which32} limit", limit_pairs_per_s=lim32,
            limit_binding=which32)
        c["fraction_of_limit"] = fr
        print(f"  ({d}, {k_max}): " + "; ".join(f"{k} {_rounds.fmt(v, '', 2)}" for k, v in fr.items()
                                                 if k.startswith("simkit") or k.startswith("torch1p")))
    for dt, b in limits["best"].items():
        print(f"  {dt}: exp {b['exp_per_s_all_cores'] / 1e9:.2f} G/s all cores ({b['exp_per_s_one_core'] / 1e9:.2f} "
              f"one core); d32 gemm {b['gemm_gflops_d32_all_cores']:.1f} GFLOP/s all cores "
              f"({b['gemm_gflops_d32_one_core']:.1f} one core)")
    meta.update(numba_threads=numba.get_num_threads(), torch=torch.__version__ if have_torch else None,
                torch_threads=torch.get_num_threads() if have_torch else None, blas=blas,
                openblas_coretype=os.environ.get("OPENBLAS_CORETYPE"), torch_imported_before_simkit=TORCH_FIRST,
                gomp_spincount_at_torch_import=SPINCOUNT_AT_TORCH_IMPORT)
    doc = _rounds.document("InfoNCE l_k on the whole k grid: simkit vs NumPy and PyTorch CPU, with the machine's "
                           "exp and matmul limits measured in the same run", meta, cases, compile_s=compile_s,
                           limits=limits, limits_before_contenders=limits_before,
                           limits_after_contenders=limits_after)
    print(f"load average at end {tuple(doc['meta']['load_average_end'])}")
    if args.out is not None:
        _rounds.write(args.out, doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
