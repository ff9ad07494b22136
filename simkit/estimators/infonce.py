"""The InfoNCE loss and the Monte Carlo estimator of the finite-k gap of claim C1.

Notation (THEORY.md sections 1--3): score ``s(x, y) = x.y / tau`` (phi = identity), positive
``x+ ~ M(x, .)``, negatives ``y_1..y_K ~ pi``; for every k on a grid,

    l_k = -s(x, x+) + log(e^{s(x, x+)} + sum_{j<=k} e^{s(x, y_j)}),
    gap_k = E[l_k] - log k - CE = c1/k + O(1/k^2).

One streaming pass over K_max negatives gives l_k for every k of the grid (common random numbers);
the negatives of a *replicate block* are shared by its anchors (each anchor's loss stays unbiased;
the Monte Carlo error comes from independent blocks).

Variance reduction (all control variates have conditional mean exactly zero given x, so every
estimator below is unbiased for gap_k; none presupposes the C1 expansion):

* subtract the exact per-anchor limit ``l_inf = -s(x, x+) + log Z(x)`` (E l_inf = CE); the positive's
  score cancels, leaving ``D_k = log((e^{s0} + S_k) / (k Z))`` with ``S_k = sum_{j<=k} e^{s_j}``;
* ``A_k = S_k/(k Z) - 1``: the first-order fluctuation of the negatives;
* ``B_k = (e^{s0} - m1(x)) / (k Z)``: the positive's fluctuation around its conditional mean;
* ``C_k = A_k^2 - (Z2/Z^2 - 1)/k``: the second-order term, with its exact conditional mean.

``G_k = D_k - A_k - B_k + C_k / 2`` has standard deviation O(k^{-3/2}) against a mean O(1/k), where
plain Monte Carlo has O(1). Where Z is not exact, ``D_k - D_{2k}`` (Z cancels) estimates
``gap_k - gap_{2k}``, with the exactly centred control variate ``(S_k/k - S_{2k}/(2k)) / Z_rest``
built from the remaining, independent negatives.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import numba
import numpy as np
from numpy.typing import ArrayLike, NDArray

from simkit.exact import formulas as exact
from simkit._jit.blas import single_threaded_blas
from simkit._jit.infonce import SMALL_D, TILE_A, prefix_sums, tile_negatives
from simkit._jit.infonce32 import prefix_sums32, tile_negatives32
from simkit._checks import check_anchor_pairs, check_int, check_point_set, check_rng, check_scalar
from simkit.distributions.kernels import MarkovKernel
from simkit.distributions.sphere import SphereDistribution

__all__ = ["TAU_MIN", "k_grid", "infonce_losses", "GapEstimator", "BLOCK_STATS", "gap_with_coefficients",
           "control_variate_means"]

#: smallest temperature the streaming estimator accepts: exp(+-2/tau) must stay far from overflow
TAU_MIN = 0.005


def k_grid(k_max: int) -> NDArray[np.int64]:
    """The geometric grid 1, 2, 4, ..., k_max (k_max a power of two >= 1)."""
    k_max = check_int("k_max", k_max, low=1, high=1 << 24)
    if k_max & (k_max - 1):
        raise ValueError(f"'k_max' must be a power of two, got {k_max}")
    return 1 << np.arange(int(np.log2(k_max)) + 1, dtype=np.int64)


def _check_grid(grid, n_neg: int) -> NDArray[np.int64]:
    g = np.asarray(grid)
    if g.ndim != 1 or g.size == 0 or not np.issubdtype(g.dtype, np.integer):
        raise ValueError(f"'k' must be a non-empty 1-D array of integers, got {grid!r}")
    g = g.astype(np.int64)
    if g[0] < 1 or np.any(np.diff(g) <= 0):
        raise ValueError("'k' must be strictly increasing integers >= 1")
    if g[-1] > n_neg:
        raise ValueError(f"'k' must not exceed the number of negatives ({n_neg}), got max {g[-1]}")
    return g


#: multiply-adds (anchors x negatives x max(d, SMALL_D)) per call of the prefix kernel: Python runs a
#: signal handler (Ctrl-C, SIGTERM) only between calls, so a large block is cut into calls of a
#: fraction of a second each
CALL_WORK = 1 << 28


def _rows_per_call(n_neg: int, d: int) -> int:
    """Anchors per call of :func:`prefix_sums`: a multiple of its tile, so that every tile (zero-padded
    the same way) and so every result is the one a single call would give; at least 4 tiles per thread."""
    rows = max(CALL_WORK // (max(n_neg, 1) * max(d, SMALL_D)), 4 * TILE_A * numba.get_num_threads())
    return -(-rows // TILE_A) * TILE_A


def _prefix(x: NDArray, y: NDArray, tau: float, shift: NDArray, grid: NDArray) -> NDArray:
    x, shift = np.ascontiguousarray(x), np.ascontiguousarray(shift)
    out = np.empty((x.shape[0], grid.size))
    tiles = tile_negatives(y)
    step = _rows_per_call(int(grid[-1]), x.shape[1])
    # BLAS runs single-threaded inside the parallel loop: the parallelism is over anchor tiles
    with single_threaded_blas():
        for lo in range(0, x.shape[0], step):  # between calls, a pending Ctrl-C or SIGTERM is raised
            hi = min(lo + step, x.shape[0])
            prefix_sums(x[lo:hi], tiles, y.shape[0], 1.0 / tau, shift[lo:hi], grid, out[lo:hi])
    return out


def _log1p_prefix32(x: NDArray, y: NDArray, tau: float, shift: NDArray, grid: NDArray) -> NDArray:
    """log1p of :func:`_prefix` with float32 scores and exponentials (simkit._jit.infonce32); the
    sums and their log1p in float64.

    The log1p is NumPy's, after the kernel, not the kernel's own (libm's ``math.log1p`` per grid
    point in the parallel loop): measured at d = 3, K = 1024, 4096 anchors and the 11-point
    doubling grid, in-kernel log1p took the pass from 4.0 to 2.8 G pairs/s on this 2-core AVX-512
    machine, where NumPy's vectorised log1p costs 0.18 ms for the 45 056 values; on the AVX2 path
    (NPY_DISABLE_CPU_FEATURES=X86_V4) NumPy's takes 0.49 ms, the same as the kernel's on two
    threads."""
    out = np.empty((x.shape[0], grid.size))
    tiles = tile_negatives32(y)  # the negatives' one conversion to float32
    prefix_sums32(np.ascontiguousarray(x, dtype=np.float32), tiles, y.shape[0], 1.0 / tau,
                  np.ascontiguousarray(shift), grid, out, False)  # no BLAS: the products are its own
    return np.log1p(out, out=out)


def _check_dtype(dtype) -> bool:
    """True for float32, False for float64; ValueError for anything else."""
    name = None
    if dtype is not None and not isinstance(dtype, bool):  # np.dtype(None) would be float64
        try:
            name = np.dtype(dtype).name
        except TypeError:
            pass
    if name not in ("float32", "float64"):
        raise ValueError(f"'dtype' must be np.float64 (the default) or np.float32, got {dtype!r}")
    return name == "float32"


def infonce_losses(x: ArrayLike, x_pos: ArrayLike, negatives: ArrayLike, tau: float,
                   k: ArrayLike, *, dtype=np.float64) -> NDArray[np.float64]:
    """InfoNCE losses ``l_k`` for every anchor and every k, negatives shared by all anchors.

    Parameters
    ----------
    x, x_pos : array_like, shape (B, d)
        Anchors and their positives (unit vectors; phi = identity).
    negatives : array_like, shape (K, d)
        Negatives; loss ``l_k`` uses the first k of them.
    tau : float
        Temperature, >= 0.005.
    k : array_like of int
        Strictly increasing numbers of negatives, each <= K.
    dtype : np.float64 or np.float32, keyword-only
        Precision of the negatives' scores and exponentials. ``np.float64`` (default): agreement
        with a direct float64 log-sum-exp to ~1e-13 nats; the studies and :class:`GapEstimator`
        use it, always. ``np.float32`` (also ``"float32"``): the anchors and negatives are rounded
        to float32 once, and the scores ``x.y_j / tau`` and their exponentials are computed in
        float32 (:mod:`simkit._jit.infonce32`), for like-for-like comparisons with float32
        pipelines; the positive's score, the sums over the negatives (float32 within a tile
        segment, then float64) and the final ``log1p`` stay in float64, and no overflow can occur
        at any tau. Its error is that of float32 scores, at most about
        ``2**-24 ((d + 4) / tau + 128)`` nats (tests/jit/test_infonce_f32.py). Measured against the
        float64 path at K = 65536 (1024 anchors, uniform positives and negatives, grid 1, 2, ...,
        K), the largest absolute error is 1.8e-6 (d = 3) and 1.3e-6 (d = 32) nats at tau = 0.1,
        6.8e-6 (d = 3) and 1.1e-5 (d = 32) at tau = 0.02, and 2.8e-5 / 4.6e-5 at tau = TAU_MIN;
        the same at K = 1024 and with vMF(10) positives (it does not grow with K). Other values
        raise ValueError.

    Returns
    -------
    ndarray, shape (B, len(k))
        ``l_k = -s(x, x+) + log(e^{s(x, x+)} + sum_{j<=k} e^{s(x, y_j)})`` in nats (float64 for
        either ``dtype``).
    """
    single = _check_dtype(dtype)
    x, x_pos = check_anchor_pairs(x, x_pos)
    y = check_point_set("negatives", negatives, x.shape[1])
    tau = check_scalar("tau", tau, low=TAU_MIN)
    grid = _check_grid(k, y.shape[0])
    if single:  # shift by the positive's score: its term is exactly 1
        return _log1p_prefix32(x, y, tau, np.einsum("ij,ij->i", x, x_pos) / tau, grid)
    s0 = np.sum(x * x_pos, axis=1) / tau
    s_sum = _prefix(x, y, tau, s0, grid)  # shift by the positive's score: its term is exactly 1
    return np.log1p(s_sum)


#: names of the per-block statistics returned by :meth:`GapEstimator.block` (means over anchors)
BLOCK_STATS = {
    "gap_cv": "mean of D_k - b_A A_k - b_B B_k - b_C C_k (control variates, pilot coefficients)",
    "gap_plain": "mean of D_k = l_k - log k - l_inf (exact per-anchor limit subtracted only)",
    "gap_cv_var": "within-block variance of the control-variate estimator across anchors",
    "loss": "mean InfoNCE loss l_k",
    "dgap": "mean of D_k - D_2k (estimates gap_k - gap_2k; Z cancels)",
    "dgap_cv": "mean of D_k - D_2k minus b_E E_k, E_k its centred control variate (k <= K/4)",
    "ell_inf": "mean of l_inf = -s(x, x+) + log Z(x) (estimates CE)",
}

#: the Taylor coefficients (b_A, b_B, b_C) of the second-order expansion, used without a pilot
TAYLOR_COEF = (1.0, 1.0, -0.5)


@dataclass(frozen=True)
class GapEstimator:
    """Replicate blocks of the C1 gap estimator for (pi, M, tau) and phi = identity.

    Parameters
    ----------
    pi : SphereDistribution
        Data distribution (continuous or Discrete).
    kernel : MarkovKernel
        Positive-pair kernel M.
    tau : float
        Temperature, >= 0.005.
    k_max : int
        Negatives per block (a power of two); the k grid is 1, 2, 4, ..., k_max.
    constant_scale : mapping, optional, keyword-only
        TESTING HOOK for negative controls (tests/estimators/test_negative_control.py), not for studies: multiplies the exact
        constants used to centre the control variates, ``{"m1": 1.05}`` (inside B_k) and/or
        ``{"Z2": 1.05}`` (inside C_k), so that the estimator is deliberately biased. Default None:
        the constants are used as computed (bit-identical to an estimator without the hook).

    Notes
    -----
    Exact per-anchor terms: ``log Z`` and ``log Z2`` (:func:`simkit.exact.log_partition`) and
    ``log m1`` (:func:`simkit.exact.log_m1`). Where m1 has no closed form (GeodesicRandomWalk) the
    B_k control variate is dropped. The control-variate coefficients are fixed per k from an
    independent pilot sample (:meth:`calibrate`), never from the blocks they are applied to, so
    the block means stay exactly unbiased; the Taylor values (1, 1, -1/2) are the default.
    """

    pi: SphereDistribution
    kernel: MarkovKernel
    tau: float
    k_max: int
    grid: NDArray[np.int64] = field(init=False, repr=False)
    constant_scale: dict[str, float] | None = field(default=None, kw_only=True, repr=False)

    def __post_init__(self):
        if not isinstance(self.pi, SphereDistribution):
            raise ValueError(f"'pi' must be a simkit sphere distribution, got {type(self.pi).__name__}")
        if not isinstance(self.kernel, MarkovKernel):
            raise ValueError(f"'kernel' must be a simkit Markov kernel, got {type(self.kernel).__name__}")
        object.__setattr__(self, "tau", check_scalar("tau", self.tau, low=TAU_MIN))
        object.__setattr__(self, "grid", k_grid(self.k_max))
        if self.grid[-1] < 2:
            raise ValueError(f"'k_max' must be >= 2, got {self.k_max}")
        if self.constant_scale is not None:
            scale = dict(self.constant_scale)
            if not scale or not set(scale) <= {"m1", "Z2"}:
                raise ValueError(f"'constant_scale' keys must be among 'm1', 'Z2', got {sorted(scale)!r}")
            for key, val in scale.items():
                check_scalar(f"constant_scale['{key}']", val, low=0.0, low_inclusive=False)
            object.__setattr__(self, "constant_scale", {k: float(v) for k, v in scale.items()})

    @property
    def dim(self) -> int:
        return self.pi.dim

    def default_coef(self) -> NDArray[np.float64]:
        """Coefficients (G, 4): columns b_A, b_B, b_C for gap_k and b_E for the k -> 2k difference."""
        coef = np.empty((self.grid.size, 4))
        coef[:, :3] = TAYLOR_COEF
        coef[:, 3] = 1.0
        return coef

    def _draw(self, n: int, rng) -> tuple[NDArray, NDArray, NDArray]:
        y = self.pi.rvs(int(self.grid[-1]), rng=rng)
        x = self.pi.rvs(n, rng=rng)
        xp = self.kernel.sample(x, rng=rng)
        return x, xp, y

    def calibrate(self, n_anchors: int, rng, n_blocks: int = 4) -> NDArray[np.float64]:
        """Control-variate coefficients from an independent pilot of ``n_blocks`` blocks.

        Per k, least squares of D_k on (A_k, B_k, C_k) with an intercept (the variance-minimising
        coefficients), and of D_k - D_2k on its control variate E_k. Returns an array (G, 4).
        """
        n = check_int("n_anchors", n_anchors, low=8)
        rng = check_rng(rng)
        parts = [self._per_anchor(*self._draw(n, rng)) for _ in range(check_int("n_blocks", n_blocks, low=1))]
        coef = self.default_coef()
        for g in range(self.grid.size):
            d = np.concatenate([p["D"][:, g] for p in parts])
            cols = [None if parts[0][c] is None else np.concatenate([p[c][:, g] for p in parts])
                    for c in ("A", "B", "C")]
            have = [c is not None and np.all(np.isfinite(c)) and np.std(c) > 0 for c in cols]
            design = np.column_stack([np.ones_like(d)] + [c for c, h in zip(cols, have) if h])
            beta = np.linalg.lstsq(design, d, rcond=None)[0][1:]
            coef[g, :3] = 0.0
            coef[g, [i for i, h in enumerate(have) if h]] = beta
            e = np.concatenate([p["E"][:, g] for p in parts])
            dd = np.concatenate([p["dD"][:, g] for p in parts])
            if np.all(np.isfinite(e)) and np.std(e) > 0:
                coef[g, 3] = np.cov(dd, e)[0, 1] / np.var(e, ddof=1)
        return coef

    def block(self, n_anchors: int, rng, coef: NDArray[np.float64] | None = None) -> dict[str, NDArray[np.float64]]:
        """One replicate block: ``n_anchors`` anchors sharing ``k_max`` fresh negatives.

        Returns the per-block means over anchors named in :data:`BLOCK_STATS`, each an array
        over the k grid (``ell_inf`` a scalar array; ``dgap`` and ``dgap_cv`` are NaN where
        undefined: the last one or two grid points).
        """
        n = check_int("n_anchors", n_anchors, low=2)
        rng = check_rng(rng)
        if coef is None:
            coef = self.default_coef()
        coef = np.asarray(coef, dtype=float)
        if coef.shape != (self.grid.size, 4) or not np.all(np.isfinite(coef)):
            raise ValueError(f"'coef' must be a finite array of shape ({self.grid.size}, 4)")
        p = self._per_anchor(*self._draw(n, rng))
        g = p["D"] - coef[:, 0] * p["A"] - coef[:, 2] * p["C"]
        if p["B"] is not None:
            g = g - coef[:, 1] * p["B"]
        dgap_cv = np.mean(p["dD"] - coef[:, 3] * p["E"], axis=0)
        return {
            "gap_cv": g.mean(axis=0),
            "gap_plain": p["D"].mean(axis=0),
            "gap_cv_var": g.var(axis=0, ddof=1),
            "loss": p["loss"].mean(axis=0),
            "dgap": np.mean(p["dD"], axis=0),
            "dgap_cv": dgap_cv,
            "ell_inf": np.array(float(np.mean(p["ell_inf"]))),
        }

    def _per_anchor(self, x: NDArray, xp: NDArray, y: NDArray) -> dict[str, NDArray | None]:
        """Per-anchor terms, each (B, G): D, A, B (or None), C, loss; dD, E (NaN where undefined)."""
        pi, kernel, tau, grid = self.pi, self.kernel, self.tau, self.grid
        kf = grid.astype(float)
        s0 = np.sum(x * xp, axis=1) / tau
        log_z = exact.log_partition(pi, x, tau)
        log_z2 = exact.log_partition(pi, x, tau, scale=2.0)
        if self.constant_scale is not None and "Z2" in self.constant_scale:  # testing hook only
            log_z2 = log_z2 + np.log(self.constant_scale["Z2"])
        s = _prefix(x, y, tau, log_z, grid)  # S_k / Z for every anchor and k
        e0 = np.exp(s0 - log_z)  # e^{s0} / Z
        a = s / kf - 1.0  # A_k
        u = s / kf + e0[:, None] / kf  # (e^{s0} + S_k) / (k Z) > 0
        # D_k = log u: log1p near u = 1 (where A_k carries the digits), plain log elsewhere (A_k would
        # round to -1 when u is tiny, at small k and small tau)
        near = np.abs(u - 1.0) < 0.5
        d_k = np.log(np.where(near, 1.0, u))
        d_k[near] = np.log1p(a[near] + (e0[:, None] / kf + 0.0 * a)[near])
        v = np.expm1(log_z2 - 2.0 * log_z)  # Z2/Z^2 - 1 = Var(e^s | x) / Z^2
        c = a * a - v[:, None] / kf  # C_k, E[C_k | x] = 0
        log_m1 = exact._log_m1(kernel, x, tau)
        if log_m1 is not None and self.constant_scale is not None and "m1" in self.constant_scale:  # testing hook
            log_m1 = log_m1 + np.log(self.constant_scale["m1"])
        b = None if log_m1 is None else (e0 - np.exp(log_m1 - log_z))[:, None] / kf
        loss = np.log(e0[:, None] + s) + (log_z - s0)[:, None]
        # CRN differences D_k - D_2k and their centred control variate: Z_rest from negatives
        # 2k+1..K is independent of the first 2k given x, so E[E_k | x] = 0 without knowing Z
        n_a, n_g = s.shape
        dd = np.full((n_a, n_g), np.nan)
        e = np.full((n_a, n_g), np.nan)
        dd[:, :-1] = d_k[:, :-1] - d_k[:, 1:]
        k_all = kf[-1]
        for i in range(n_g - 2):
            z_rest = (s[:, -1] - s[:, i + 1]) / (k_all - kf[i + 1])
            e[:, i] = (s[:, i] / kf[i] - s[:, i + 1] / kf[i + 1]) / z_rest
        return {"D": d_k, "A": a, "B": b, "C": c, "loss": loss, "dD": dd, "E": e, "ell_inf": log_z - s0}


def gap_with_coefficients(gap_plain: ArrayLike, means: tuple[ArrayLike, ArrayLike, ArrayLike],
                          coef: ArrayLike) -> NDArray[np.float64]:
    """The control-variate gap estimate ``mean D - c_A mean A - c_B mean B - c_C mean C`` under other
    coefficients ``coef`` (shape (G, >= 3), as :meth:`GapEstimator.calibrate` returns), from a block's mean
    plain gap and the block means (A_k, B_k, C_k) of the control variates: what :meth:`GapEstimator.block`
    would give on the same draws with those coefficients."""
    ma, mb, mc = means
    coef = np.asarray(coef, dtype=float)
    return np.asarray(gap_plain) - coef[:, 0] * ma - coef[:, 1] * mb - coef[:, 2] * mc


def control_variate_means(est: GapEstimator, n_anchors: int, rng, coef: ArrayLike,
                          result: dict) -> tuple[NDArray, NDArray, NDArray]:
    """Block means (A_k, B_k, C_k) of the control variates behind ``result = est.block(n_anchors, g, coef)``,
    ``rng`` a copy of the generator g taken before that call (it is not advanced).

    The same draws run twice more, with coefficients e_B and e_C: ``gap_plain - gap_cv`` is then the block
    mean of B_k, resp. C_k, and that of A_k follows from ``result`` itself (its b_A must be non-zero). With
    :func:`gap_with_coefficients` they give the block's estimate under any other coefficients.
    """
    coef = np.asarray(coef, dtype=float)
    unit_b, unit_c = np.zeros_like(coef), np.zeros_like(coef)
    unit_b[:, 1], unit_c[:, 2] = 1.0, 1.0
    mb = result["gap_plain"] - est.block(n_anchors, copy.deepcopy(rng), unit_b)["gap_cv"]
    mc = result["gap_plain"] - est.block(n_anchors, copy.deepcopy(rng), unit_c)["gap_cv"]
    ma = (result["gap_plain"] - result["gap_cv"] - coef[:, 1] * mb - coef[:, 2] * mc) / coef[:, 0]
    return ma, mb, mc
