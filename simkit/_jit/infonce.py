"""Jitted core of the InfoNCE estimator: streaming prefix sums of exponentiated scores.

For anchors ``x`` (B, d), negatives ``y`` (K, d), ``1/tau`` and a per-anchor shift ``c_i``,
:func:`prefix_sums` fills ``out[i, g] = sum_{j < k_grid[g]} exp(x_i . y_j / tau - c_i)`` for every
grid point in one pass over the negatives: common random numbers across k, memory
O(TILE_A (d + TILE_N) + K d) per thread, never a B x K matrix.

Design (timings: benchmarks/bench_infonce.py and docs/performance.md):

* anchors are processed in tiles of ``TILE_A`` rows, on threads
  (:func:`simkit._jit.threads.run_chunks`); negatives in tiles of ``TILE_N`` columns,
  pre-transposed to ``(n_tiles, d, TILE_N)`` so each tile is contiguous;
* scores of a tile: BLAS ``dgemm`` (``np.dot``) for d > ``SMALL_D``, explicit vectorisable loops
  for small d (where a d-deep gemm is mostly overhead);
* ``exp`` is hand-vectorised (Cody--Waite reduction, degree-11 Chebyshev interpolant, exponent bits
  assembled through an int64 view): Numba's ``np.exp`` calls libm per element and does not
  vectorise; this one is fused with the score and the running sums and is accurate to ~1 ulp;
* each anchor's running sum is kept in 8 lanes indexed by ``j mod 8`` and combined in a fixed
  order, so the result is bit-identical whatever the thread count or tiling of anchors.

Callers must keep ``x_i . y_j / tau - c_i`` within [-700, 700] (the estimator uses
``c_i = log Z(x_i)`` or the positive's score with tau >= 0.005, so |argument| <= 2/tau <= 400).
"""

from __future__ import annotations


import numpy as np
from numba import njit

from simkit._jit.threads import run_chunks

__all__ = ["TILE_A", "TILE_N", "SMALL_D", "prefix_sums", "tile_negatives", "tile_segments", "vexp_inplace"]

TILE_A = 32
TILE_N = 512
SMALL_D = 8

_LOG2E = 1.4426950408889634
_LN2HI = 6.93147180369123816490e-01
_LN2LO = 1.90821492927058770002e-10
_MAGIC = 6755399441055744.0  # 1.5 * 2**52: adding it rounds to an integer held in the low bits
_MAGIC_BITS = int(np.float64(_MAGIC).view(np.int64))
# exp(r) on |r| <= ln2/2: degree-11 interpolant at Chebyshev nodes (near-minimax), computed with
# mpmath at 50 digits; max relative error 2.2e-16 in double Horner evaluation (tests/estimators/test_infonce.py)
_P = (1.0, 1.0, 0.5000000000000019, 0.1666666666666668, 0.0416666666664881, 0.008333333333319601,
      0.0013888888952314775, 0.00019841269890047113, 2.4801485482328494e-05, 2.755724091857897e-06,
      2.763263963904103e-07, 2.5110037605963777e-08)
_P0, _P1, _P2, _P3, _P4, _P5, _P6, _P7, _P8, _P9, _P10, _P11 = _P


@njit(fastmath={"contract"}, inline="always")
def _exp_parts(s):
    """exp(s) = p * 2**n for s in [-708, 709]: returns p and t, whose low bits hold n."""
    s = min(max(s, -708.0), 709.0)
    t = s * _LOG2E + _MAGIC
    nf = t - _MAGIC
    r = s - nf * _LN2HI - nf * _LN2LO  # |r| <= ln2/2, two-part Cody-Waite reduction
    p = _P0 + r * (_P1 + r * (_P2 + r * (_P3 + r * (_P4 + r * (_P5 + r * (_P6 + r * (
        _P7 + r * (_P8 + r * (_P9 + r * (_P10 + r * _P11))))))))))
    return p, t


@njit(inline="always")
def _scale_bits(tb_i, n):
    """Turn the rounding carriers t (viewed as int64) into the doubles 2**n, in place."""
    for j in range(n):
        tb_i[j] = (tb_i[j] - _MAGIC_BITS + 1023) << 52


@njit(fastmath={"contract"}, inline="always")
def vexp_inplace(row, n, scale, shift, tbuf):
    """row[j] <- exp(row[j] * scale - shift) for j < n, vectorised; ``tbuf`` is scratch (>= n)."""
    for j in range(n):
        p, t = _exp_parts(row[j] * scale - shift)
        tbuf[j] = t
        row[j] = p
    _scale_bits(tbuf.view(np.int64), n)
    for j in range(n):
        row[j] *= tbuf[j]


def tile_negatives(y: np.ndarray) -> np.ndarray:
    """Rearrange negatives (K, d) into zero-padded, transposed tiles (n_tiles, d, TILE_N)."""
    k, d = y.shape
    n_tiles = (k + TILE_N - 1) // TILE_N
    out = np.zeros((n_tiles, d, TILE_N))
    for t in range(n_tiles):
        blk = y[t * TILE_N:(t + 1) * TILE_N]
        out[t, :, :blk.shape[0]] = blk.T
    return out


@njit(inline="always")
def tile_segments(j0, j1, k_grid, g, seg_lo, seg_hi, seg_g):
    """Split the columns [j0, j1) of a tile at the grid points k_grid[g], k_grid[g+1], ...: segment s
    is [seg_lo[s], seg_hi[s]); seg_g[s] is the index of the grid point it ends at, or -1 when it
    ends at j1 short of one. Shared by every row of the tile. Returns (number of segments, the
    index of the next grid point)."""
    n_seg = 0
    pos = j0
    while pos < j1:
        nb = min(j1, k_grid[g])
        seg_lo[n_seg] = pos
        seg_hi[n_seg] = nb
        if nb == k_grid[g]:
            seg_g[n_seg] = g
            g += 1
        else:
            seg_g[n_seg] = -1
        n_seg += 1
        pos = nb
    return n_seg, g


@njit(fastmath={"contract"}, inline="always")
def _add_segment(lanes, pbuf, tbuf, p, q, j0):
    """lanes[j % 8] += pbuf[j - j0] * tbuf[j - j0] for j in [p, q): the lane depends only on j."""
    j = p
    while j < q and (j & 7) != 0:
        lanes[j & 7] += pbuf[j - j0] * tbuf[j - j0]
        j += 1
    # the eight lanes live in registers through the unrolled loop (SLP-vectorised)
    l0, l1, l2, l3 = lanes[0], lanes[1], lanes[2], lanes[3]
    l4, l5, l6, l7 = lanes[4], lanes[5], lanes[6], lanes[7]
    while j + 8 <= q:
        b = j - j0
        l0 += pbuf[b] * tbuf[b]
        l1 += pbuf[b + 1] * tbuf[b + 1]
        l2 += pbuf[b + 2] * tbuf[b + 2]
        l3 += pbuf[b + 3] * tbuf[b + 3]
        l4 += pbuf[b + 4] * tbuf[b + 4]
        l5 += pbuf[b + 5] * tbuf[b + 5]
        l6 += pbuf[b + 6] * tbuf[b + 6]
        l7 += pbuf[b + 7] * tbuf[b + 7]
        j += 8
    lanes[0], lanes[1], lanes[2], lanes[3] = l0, l1, l2, l3
    lanes[4], lanes[5], lanes[6], lanes[7] = l4, l5, l6, l7
    while j < q:
        lanes[j & 7] += pbuf[j - j0] * tbuf[j - j0]
        j += 1


@njit(inline="always")
def _lane_total(lanes):
    return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]))


@njit(fastmath={"contract"}, inline="always")
def _exp_row_small_d(xr, yt, nj, d, inv_tau, shift, pbuf, tbuf):
    """Scores x.y_j computed inline (d <= SMALL_D), then the exp polynomial; one pass for d <= 4."""
    if d == 2:
        x0, x1 = xr[0] * inv_tau, xr[1] * inv_tau
        for j in range(nj):
            pbuf[j], tbuf[j] = _exp_parts(x0 * yt[0, j] + x1 * yt[1, j] - shift)
    elif d == 3:
        x0, x1, x2 = xr[0] * inv_tau, xr[1] * inv_tau, xr[2] * inv_tau
        for j in range(nj):
            pbuf[j], tbuf[j] = _exp_parts(x0 * yt[0, j] + x1 * yt[1, j] + x2 * yt[2, j] - shift)
    elif d == 4:
        x0, x1, x2, x3 = xr[0] * inv_tau, xr[1] * inv_tau, xr[2] * inv_tau, xr[3] * inv_tau
        for j in range(nj):
            pbuf[j], tbuf[j] = _exp_parts(x0 * yt[0, j] + x1 * yt[1, j] + x2 * yt[2, j] + x3 * yt[3, j] - shift)
    else:
        for j in range(nj):
            pbuf[j] = 0.0
        for c in range(d):
            xc = xr[c] * inv_tau
            for j in range(nj):
                pbuf[j] += xc * yt[c, j]
        for j in range(nj):
            pbuf[j], tbuf[j] = _exp_parts(pbuf[j] - shift)


@njit(fastmath={"contract"}, cache=True)
def _prefix_tile(x, y_tiles, n_neg, inv_tau, shift, k_grid, out, at):
    """Anchor tile ``at`` of :func:`prefix_sums` (rows ``at * TILE_A`` on), out of line: the parallel
    compiler's passes then see a loop of one call, not this body (docs/performance.md, "Cold start")."""
    b_total, d = x.shape
    n_tiles = y_tiles.shape[0]
    n_grid = k_grid.shape[0]
    k_last = k_grid[n_grid - 1]
    a0 = at * TILE_A
    na = min(b_total, a0 + TILE_A) - a0
    xa = np.zeros((TILE_A, d))
    for r in range(na):
        for c in range(d):
            xa[r, c] = x[a0 + r, c]
    sc = np.empty((TILE_A, TILE_N))
    pbuf = np.empty(TILE_N)
    tbuf = np.empty(TILE_N)
    tb_i = tbuf.view(np.int64)
    lanes = np.zeros((TILE_A, 8))
    seg_lo = np.empty(n_grid + 1, dtype=np.int64)
    seg_hi = np.empty(n_grid + 1, dtype=np.int64)
    seg_g = np.empty(n_grid + 1, dtype=np.int64)
    g = 0
    for t in range(n_tiles):
        j0 = t * TILE_N
        if j0 >= k_last:
            break
        j1 = min(min(n_neg, j0 + TILE_N), k_last)
        nj = j1 - j0
        yt = y_tiles[t]
        n_seg, g = tile_segments(j0, j1, k_grid, g, seg_lo, seg_hi, seg_g)
        if d > SMALL_D:
            np.dot(xa, yt, sc)
        for r in range(na):
            sh = shift[a0 + r]
            if d > SMALL_D:
                row = sc[r]
                for j in range(nj):
                    pbuf[j], tbuf[j] = _exp_parts(row[j] * inv_tau - sh)
            else:
                _exp_row_small_d(xa[r], yt, nj, d, inv_tau, sh, pbuf, tbuf)
            _scale_bits(tb_i, nj)
            lr = lanes[r]
            for q in range(n_seg):
                _add_segment(lr, pbuf, tbuf, seg_lo[q], seg_hi[q], j0)
                if seg_g[q] >= 0:
                    out[a0 + r, seg_g[q]] = _lane_total(lr)


@njit(fastmath={"contract"}, cache=True, nogil=True)
def _prefix_tiles(x, y_tiles, n_neg, inv_tau, shift, k_grid, out, t0, t1):
    """Anchor tiles ``t0`` to ``t1 - 1`` of :func:`prefix_sums`."""
    for at in range(t0, t1):
        _prefix_tile(x, y_tiles, n_neg, inv_tau, shift, k_grid, out, at)


def prefix_sums(x, y_tiles, n_neg, inv_tau, shift, k_grid, out):
    """out[i, g] = sum_{j < k_grid[g]} exp(x_i . y_j * inv_tau - shift[i]).

    x (B, d) C-contiguous; y_tiles from :func:`tile_negatives`; n_neg = K; k_grid (G,) int64,
    strictly increasing, k_grid[-1] <= K; out (B, G) C-contiguous. Anchor tiles on threads
    (:func:`simkit._jit.threads.run_chunks`), not ``prange``: no parallel compile.
    """
    run_chunks(_prefix_tiles, (x.shape[0] + TILE_A - 1) // TILE_A, x, y_tiles, n_neg, inv_tau, shift, k_grid, out)
