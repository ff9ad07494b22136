"""Jitted core of the in-batch estimator: streaming prefix sums over negative *pairs*.

For anchors ``x`` (B, d) and a stream of pairs ``(y_j, y'_j)`` (y ~ π, y' ~ M(y, ·)), one pass fills

    out[i, g, 0] = sum_{j < n_grid[g]} exp(x_i . y_j / tau - c_i),
    out[i, g, 1] = sum_{j < n_grid[g]} exp(x_i . y'_j / tau - c_i),

for every grid point: NT-Xent's denominator at batch B = n + 1 is the sum of both columns, CLIP's is
the second column and the i.i.d. scheme's the first. The tiling, the vectorised exponential and the
8-lane fixed-order sums are those of :mod:`simkit._jit.infonce` (bit-identical results whatever the
thread count); both members of a pair tile are processed while the anchor tile is in registers, so
the cost per negative is that of the i.i.d. kernel. Callers keep ``x_i . y / tau - c_i`` within
[-700, 700].
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from simkit._jit.infonce import (SMALL_D, TILE_A, TILE_N, _add_segment, _exp_parts, _exp_row_small_d,
                                 _lane_total, _scale_bits, tile_segments)

__all__ = ["pair_prefix_sums"]


@njit(fastmath={"contract"}, inline="always")
def _row_sums(xr, sc_row, yt, nj, d, inv_tau, sh, pbuf, tbuf, tb_i, lanes, n_seg, seg_lo, seg_hi, seg_g,
              j0, out_row, col):
    """Exponentiate one anchor's scores against one tile and add them to its lanes by segment."""
    if d > SMALL_D:
        for j in range(nj):
            pbuf[j], tbuf[j] = _exp_parts(sc_row[j] * inv_tau - sh)
    else:
        _exp_row_small_d(xr, yt, nj, d, inv_tau, sh, pbuf, tbuf)
    _scale_bits(tb_i, nj)
    for q in range(n_seg):
        _add_segment(lanes, pbuf, tbuf, seg_lo[q], seg_hi[q], j0)
        if seg_g[q] >= 0:
            out_row[seg_g[q], col] = _lane_total(lanes)


@njit(parallel=True, fastmath={"contract"}, cache=True)
def pair_prefix_sums(x, y_tiles, yp_tiles, n_pairs, inv_tau, shift, n_grid, out):
    """out[i, g, 0|1] = sum_{j < n_grid[g]} exp(x_i . (y_j | y'_j) * inv_tau - shift[i]).

    x (B, d) C-contiguous; y_tiles, yp_tiles from :func:`simkit._jit.infonce.tile_negatives` of the
    first and second members; n_pairs = K; n_grid (G,) int64, strictly increasing, n_grid[-1] <= K;
    out (B, G, 2).
    """
    b_total, d = x.shape
    n_tiles = y_tiles.shape[0]
    n_g = n_grid.shape[0]
    k_last = n_grid[n_g - 1]
    n_atiles = (b_total + TILE_A - 1) // TILE_A
    for at in prange(n_atiles):
        a0 = at * TILE_A
        na = min(b_total, a0 + TILE_A) - a0
        xa = np.zeros((TILE_A, d))
        for r in range(na):
            for c in range(d):
                xa[r, c] = x[a0 + r, c]
        sc = np.empty((TILE_A, TILE_N))
        scp = np.empty((TILE_A, TILE_N))
        pbuf = np.empty(TILE_N)
        tbuf = np.empty(TILE_N)
        tb_i = tbuf.view(np.int64)
        lanes = np.zeros((TILE_A, 8))
        lanes_p = np.zeros((TILE_A, 8))
        seg_lo = np.empty(n_g + 1, dtype=np.int64)
        seg_hi = np.empty(n_g + 1, dtype=np.int64)
        seg_g = np.empty(n_g + 1, dtype=np.int64)
        g = 0
        for t in range(n_tiles):
            j0 = t * TILE_N
            if j0 >= k_last:
                break
            j1 = min(min(n_pairs, j0 + TILE_N), k_last)
            nj = j1 - j0
            yt = y_tiles[t]
            ypt = yp_tiles[t]
            n_seg, g = tile_segments(j0, j1, n_grid, g, seg_lo, seg_hi, seg_g)
            if d > SMALL_D:
                np.dot(xa, yt, sc)
                np.dot(xa, ypt, scp)
            for r in range(na):
                sh = shift[a0 + r]
                _row_sums(xa[r], sc[r], yt, nj, d, inv_tau, sh, pbuf, tbuf, tb_i, lanes[r], n_seg, seg_lo,
                          seg_hi, seg_g, j0, out[a0 + r], 0)
                _row_sums(xa[r], scp[r], ypt, nj, d, inv_tau, sh, pbuf, tbuf, tb_i, lanes_p[r], n_seg, seg_lo,
                          seg_hi, seg_g, j0, out[a0 + r], 1)
