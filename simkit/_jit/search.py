"""Jitted core of the similarity-search estimator of claim C2: streaming sums over a database.

For queries ``x`` (B, d), a database ``y`` (K, d), and per-point log densities, one pass over the
database fills, for every grid point ``k`` (common random numbers across k),

    sums[i, g, 0] = sum_{j<k} exp(s_ij - c_i)                      (softmax normaliser, S_k / e^{c_i})
    sums[i, g, 1] = sum_{j<k} mt_ij                                 (W_k / e^{h_i})
    sums[i, g, 2] = sum_{j<k} mt_ij (s_ij - mu_i)                   ((V_k - mu_i W_k) / e^{h_i})
    sums[i, g, 3] = sum_{j<k} mt_ij^2 (s_ij - mu_i)                 (sum m^2 (s - mu) / e^{2 h_i})

with the score ``s_ij = x_i . y_j / tau`` and the scaled density ratio
``mt_ij = exp(lm_ij)``, ``lm_ij = kappa u_i . y_j + b_j - h_i``, where ``log m(x_i, y_j) =
a_i + kappa u_i . y_j + b_j`` (``b_j = -log pi(y_j)``; ``u_i = x_i`` for the vMF kernel and
``u_i = R x_i`` for the rotated one, a second "dot product" skipped when ``same_u``), and the
caller's shift ``h_i - a_i`` bounds ``lm`` above by 0. For the Brownian kernel (``heat_hi``
non-empty) the profile is ``lm_ij = log h_t(x_i . y_j) + b_j - h_i`` instead
(:func:`_log_heat_row`: the heat-kernel series summed per pair, double-double in the far tail).

It also tracks, for the first ``n_rank`` queries, the running top-``n_top`` sets of the database
under Q_k (ranked by s) and under M_k (ranked by lm) and writes, at every grid point,
``top1[i, g]`` = 1 if the two argmaxes coincide (0 otherwise) and, where ``k >= n_top``,
``overlap[i, g]`` = |top-n_top(Q_k) cap top-n_top(M_k)| / n_top. Ties keep the earlier point.
Tiling, the exponential and the 8-lane sums are :mod:`simkit._jit.infonce`'s (imported, not
copied): results are bit-identical whatever the thread count.
Callers keep ``s - c`` and ``lm`` within [-700, 0 + 700].
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.extending import intrinsic

from simkit._jit.infonce import (SMALL_D, TILE_A, TILE_N, _add_segment, _exp_parts, _lane_total, _scale_bits,
                                 tile_segments)

__all__ = ["N_SUMS", "search_sums", "tile_values", "log_heat_values"]

#: number of running sums per query and grid point (see the module docstring)
N_SUMS = 4


def tile_values(b: np.ndarray) -> np.ndarray:
    """Per-point values (K,) into zero-padded tiles (n_tiles, TILE_N) matching ``tile_negatives``."""
    k = b.shape[0]
    n_tiles = (k + TILE_N - 1) // TILE_N
    out = np.zeros((n_tiles, TILE_N))
    out.reshape(-1)[:k] = b
    return out


@njit(fastmath={"contract"}, inline="always")
def _dot_row_small_d(xr, yt, nj, d, out):
    """out[j] = xr . y_j for the tile ``yt`` (d, TILE_N), d <= SMALL_D: vectorised over j."""
    for j in range(nj):
        out[j] = xr[0] * yt[0, j]
    for c in range(1, d):
        xc = xr[c]
        for j in range(nj):
            out[j] += xc * yt[c, j]


@njit(fastmath={"contract"}, inline="always")
def _log_m_row(dotu, bt, nj, kappa, shift, lm):
    """lm[j] = kappa u . y_j + b_j - shift: the vMF-kernel profile of log m (linear in the cosine)."""
    for j in range(nj):
        lm[j] = kappa * dotu[j] + bt[j] - shift


# ----------------------------------------------------------------------------------------------
# the Brownian (heat-kernel) profile: h_t(w) = sum_l a_l P_l(w), summed per pair
#
# No fastmath here: the error-free transformations of double-double arithmetic (two-sum, and
# two-product through an explicit fma) and the rounding bound of the float64 series assume every
# operation is rounded once, as written.

@intrinsic
def _fma(typingctx, a, b, c):
    """``a * b + c`` rounded once (LLVM's fma intrinsic: the hardware instruction where there is one,
    a correctly rounded library call otherwise)."""
    sig = types.float64(types.float64, types.float64, types.float64)

    def codegen(context, builder, signature, args):
        f64 = ir.DoubleType()
        fn = builder.module.declare_intrinsic("llvm.fma", [f64], ir.FunctionType(f64, [f64, f64, f64]))
        return builder.call(fn, args)

    return sig, codegen


@njit(cache=True)
def _two_sum(a, b):
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


@njit(cache=True)
def _fast_two_sum(a, b):
    s = a + b
    return s, b - (s - a)


@njit(cache=True)
def _two_prod(a, b):
    p = a * b
    return p, _fma(a, b, -p)  # the exact rounding error of a * b


@njit(cache=True)
def _dd_add(ah, al, bh, bl):
    """Double-double sum, the accurate (IEEE-style) variant: relative error ~2^-104 even under
    cancellation."""
    s, e = _two_sum(ah, bh)
    t, f = _two_sum(al, bl)
    e += t
    s, e = _fast_two_sum(s, e)
    e += f
    return _fast_two_sum(s, e)


@njit(cache=True)
def _dd_mul(ah, al, bh, bl):
    p, e = _two_prod(ah, bh)
    e += ah * bl + al * bh
    return _fast_two_sum(p, e)


@njit(cache=True)
def _dd_mul_d(ah, al, b):
    p, e = _two_prod(ah, b)
    e += al * b
    return _fast_two_sum(p, e)


@njit(cache=True)
def _dd_div_d(ah, al, b):
    q1 = ah / b
    p, e = _two_prod(q1, b)
    s, f = _two_sum(ah, -p)
    f -= e
    f += al
    return _fast_two_sum(q1, (s + f) / b)


@njit(cache=True)
def _heat_dd(w, a_hi, a_lo, lam):
    """``h_t(w) = sum_l a_l P_l(w)`` in double-double arithmetic: coefficients a_hi + a_lo, the
    recurrence ``P_{l+1} = (2 (l + lam) w P_l - l P_{l-1}) / (l + 2 lam)`` of the normalised
    Gegenbauer polynomials (that of :func:`simkit.distributions.heat._series`) with w exact. Returns (hi, lo)."""
    hh, hl = a_hi[0], a_lo[0]
    qh, ql = 1.0, 0.0  # P_{l-1}
    ph, pl = w, 0.0    # P_l
    for l in range(1, a_hi.shape[0]):
        th, tl = _dd_mul(a_hi[l], a_lo[l], ph, pl)
        hh, hl = _dd_add(hh, hl, th, tl)
        th, tl = _dd_mul_d(ph, pl, w)
        th, tl = _dd_mul_d(th, tl, 2.0 * (l + lam))
        uh, ul = _dd_mul_d(qh, ql, float(l))
        th, tl = _dd_add(th, tl, -uh, -ul)
        qh, ql = ph, pl
        ph, pl = _dd_div_d(th, tl, l + 2.0 * lam)
    return hh, hl


@njit(cache=True)
def _log_heat_row(dotu, bt, nj, a_hi, a_lo, n_float, lam, cut, shift, lm, wc, h, hc, p, pm1):
    """lm[j] = log h_t(w_j) + b_j - shift, w_j = dotu[j] clipped to [-1, 1].

    The float64 series is that of :func:`simkit.distributions.heat._series` (its first ``n_float`` coefficients,
    the same operations in the same order, Neumaier-compensated), vectorised over j; where its
    value is below ``cut`` (its rounding bound would exceed the caller's relative tolerance) the
    pair is re-summed in double-double over all the coefficients (:func:`_heat_dd`).
    ``wc, h, hc, p, pm1`` are scratch rows (>= nj).
    """
    n_terms = n_float
    for j in range(nj):
        w = min(max(dotu[j], -1.0), 1.0)
        wc[j] = w
        h[j] = a_hi[0]
        hc[j] = 0.0
        pm1[j] = 1.0
        p[j] = w
    for l in range(1, n_terms):
        al = a_hi[l]
        c1 = 2.0 * (l + lam)
        c2 = float(l)
        c3 = l + 2.0 * lam
        for j in range(nj):  # branch-free body: vectorised
            pj = p[j]
            x = al * pj
            hj = h[j]
            y = hj + x
            hc[j] += ((hj - y) + x) if abs(hj) >= abs(x) else ((x - y) + hj)
            h[j] = y
            p[j] = (c1 * wc[j] * pj - c2 * pm1[j]) / c3
            pm1[j] = pj
    for j in range(nj):
        v = h[j] + hc[j]
        if v >= cut:
            lm[j] = np.log(v) + bt[j] - shift
        else:
            vh, vl = _heat_dd(wc[j], a_hi, a_lo, lam)
            lm[j] = np.log(vh) + np.log1p(vl / vh) + bt[j] - shift


@njit(cache=True)
def log_heat_values(w, a_hi, a_lo, n_float, lam, cut):
    """``log h_t(w)`` for a 1-D array w by :func:`_log_heat_row` (the jitted pass's profile)."""
    n = w.shape[0]
    out = np.empty(n)
    zeros = np.zeros(n)
    wc, h, hc, p, pm1 = np.empty(n), np.empty(n), np.empty(n), np.empty(n), np.empty(n)
    _log_heat_row(w, zeros, n, a_hi, a_lo, n_float, lam, cut, 0.0, out, wc, h, hc, p, pm1)
    return out


@njit(inline="always")
def _insert(vals, idx, cnt, n_top, v, j):
    """Insert (v, j) into the descending list vals[:cnt] of capacity n_top; return the new count."""
    if cnt == n_top:
        if not v > vals[n_top - 1]:
            return cnt
        pos = n_top - 1
    else:
        pos = cnt
        cnt += 1
    while pos > 0 and v > vals[pos - 1]:
        vals[pos] = vals[pos - 1]
        idx[pos] = idx[pos - 1]
        pos -= 1
    vals[pos] = v
    idx[pos] = j
    return cnt


@njit(parallel=True, fastmath={"contract"}, cache=True)
def search_sums(x, u, same_u, y_tiles, b_tiles, n_db, inv_tau, kappa, heat_hi, heat_lo, heat_nf, heat_lam, heat_cut,
                shift_s, shift_m, mu, k_grid, n_top, n_rank, sums, top1, overlap):
    """Fill ``sums`` (B, G, N_SUMS), ``top1`` and ``overlap`` (B, G); see the module docstring.

    x, u (B, d) C-contiguous (u ignored when ``same_u``); y_tiles (n_tiles, d, TILE_N) from
    ``tile_negatives``; b_tiles (n_tiles, TILE_N) from :func:`tile_values`; n_db = K; heat_hi,
    heat_lo (L,) the heat-kernel coefficients (empty: vMF profile, linear in kappa), the first
    heat_nf of them for the float64 series, heat_lam = (d - 2)/2 and the float64 cut-off heat_cut
    (:func:`_log_heat_row`; u must equal x); shift_s,
    shift_m, mu (B,); k_grid (G,) int64 strictly increasing, k_grid[-1] <= K; n_top >= 1;
    queries i < n_rank get ``top1``/``overlap`` (other rows are left untouched, as are overlap
    entries with k < n_top).
    """
    b_total, d = x.shape
    n_tiles = y_tiles.shape[0]
    n_grid = k_grid.shape[0]
    k_last = k_grid[n_grid - 1]
    n_atiles = (b_total + TILE_A - 1) // TILE_A
    for at in prange(n_atiles):
        a0 = at * TILE_A
        na = min(b_total, a0 + TILE_A) - a0
        xa = np.zeros((TILE_A, d))
        ua = np.zeros((TILE_A, d))
        for r in range(na):
            for c in range(d):
                xa[r, c] = x[a0 + r, c]
                ua[r, c] = x[a0 + r, c] if same_u else u[a0 + r, c]
        sc = np.empty((TILE_A, TILE_N))
        su = np.empty((TILE_A, TILE_N))
        dbuf = np.empty(TILE_N)
        dubuf = np.empty(TILE_N)
        lm = np.empty(TILE_N)
        ps = np.empty(TILE_N)
        ts = np.empty(TILE_N)
        pm = np.empty(TILE_N)
        tm = np.empty(TILE_N)
        mt = np.empty(TILE_N)
        dv = np.empty(TILE_N)
        mv = np.empty(TILE_N)
        wc = np.empty(TILE_N)
        hb = np.empty(TILE_N)
        hcb = np.empty(TILE_N)
        pb = np.empty(TILE_N)
        pm1b = np.empty(TILE_N)
        heat = heat_hi.shape[0] > 0
        ts_i = ts.view(np.int64)
        tm_i = tm.view(np.int64)
        lanes = np.zeros((TILE_A, N_SUMS, 8))
        top_s = np.full((TILE_A, n_top), -np.inf)
        top_m = np.full((TILE_A, n_top), -np.inf)
        idx_s = np.full((TILE_A, n_top), -1, dtype=np.int64)
        idx_m = np.full((TILE_A, n_top), -1, dtype=np.int64)
        cnt_s = np.zeros(TILE_A, dtype=np.int64)
        cnt_m = np.zeros(TILE_A, dtype=np.int64)
        seg_lo = np.empty(n_grid + 1, dtype=np.int64)
        seg_hi = np.empty(n_grid + 1, dtype=np.int64)
        seg_g = np.empty(n_grid + 1, dtype=np.int64)
        g = 0
        for t in range(n_tiles):
            j0 = t * TILE_N
            if j0 >= k_last:
                break
            j1 = min(min(n_db, j0 + TILE_N), k_last)
            nj = j1 - j0
            yt = y_tiles[t]
            bt = b_tiles[t]
            n_seg, g = tile_segments(j0, j1, k_grid, g, seg_lo, seg_hi, seg_g)
            if d > SMALL_D:
                np.dot(xa, yt, sc)
                if not same_u:
                    np.dot(ua, yt, su)
            for r in range(na):
                i = a0 + r
                if d > SMALL_D:
                    dot = sc[r]
                    dotu = dot if same_u else su[r]
                else:
                    _dot_row_small_d(xa[r], yt, nj, d, dbuf)
                    dot = dbuf
                    if same_u:
                        dotu = dbuf
                    else:
                        _dot_row_small_d(ua[r], yt, nj, d, dubuf)
                        dotu = dubuf
                sh, mui = shift_s[i], mu[i]
                for j in range(nj):
                    ps[j], ts[j] = _exp_parts(dot[j] * inv_tau - sh)
                _scale_bits(ts_i, nj)
                if heat:
                    _log_heat_row(dotu, bt, nj, heat_hi, heat_lo, heat_nf, heat_lam, heat_cut, shift_m[i], lm,
                                  wc, hb, hcb, pb, pm1b)
                else:
                    _log_m_row(dotu, bt, nj, kappa, shift_m[i], lm)
                for j in range(nj):
                    pm[j], tm[j] = _exp_parts(lm[j])
                _scale_bits(tm_i, nj)
                for j in range(nj):
                    mt[j] = pm[j] * tm[j]
                    dv[j] = dot[j] * inv_tau - mui
                    mv[j] = mt[j] * dv[j]
                ranked = i < n_rank
                for q in range(n_seg):
                    lo, hi = seg_lo[q], seg_hi[q]
                    _add_segment(lanes[r, 0], ps, ts, lo, hi, j0)
                    _add_segment(lanes[r, 1], pm, tm, lo, hi, j0)
                    _add_segment(lanes[r, 2], mt, dv, lo, hi, j0)
                    _add_segment(lanes[r, 3], mt, mv, lo, hi, j0)
                    if ranked:
                        cs, cm = cnt_s[r], cnt_m[r]
                        for j in range(lo, hi):
                            cs = _insert(top_s[r], idx_s[r], cs, n_top, dot[j - j0], j)
                            cm = _insert(top_m[r], idx_m[r], cm, n_top, lm[j - j0], j)
                        cnt_s[r], cnt_m[r] = cs, cm
                    gq = seg_g[q]
                    if gq >= 0:
                        for c in range(N_SUMS):
                            sums[i, gq, c] = _lane_total(lanes[r, c])
                        if ranked:
                            top1[i, gq] = 1.0 if idx_s[r, 0] == idx_m[r, 0] else 0.0
                            if k_grid[gq] >= n_top:
                                common = 0
                                for p1 in range(n_top):
                                    for p2 in range(n_top):
                                        if idx_s[r, p1] == idx_m[r, p2]:
                                            common += 1
                                overlap[i, gq] = common / n_top
