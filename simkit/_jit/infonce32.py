"""Float32 variant of :mod:`simkit._jit.infonce`: the same streaming prefix sums, single precision.

:func:`prefix_sums32` fills ``out[i, g] = sum_{j < k_grid[g]} exp(x_i . y_j / tau - c_i)`` (float64
output, float64 shift ``c_i``) from float32 anchors and negatives, with float32 scores and
exponentials. Not for studies (they use the float64 kernel): it exists for like-for-like
comparisons with float32 pipelines (``infonce_losses(..., dtype=np.float32)``).

Anchors are processed in parallel tiles of ``TILE_A`` rows against negatives pre-transposed into
float32 tiles (:func:`tile_negatives32`). Scores are exponentiated as soon as they are formed
(inside the exponential's loop for d <= ``SMALL_D``, in register blocks of ``ROWS_BIG_D`` rows
otherwise), never stored; segment sums between grid points are taken in float32 against a float32
reference and accumulated in float64, so no float32 overflow can occur at any tau or shift. ``exp``
is hand-vectorised in float32 (:func:`_exp32`, < 1 ulp), and the vector loops are LLVM IR
(``@intrinsic``) summing in 16 lanes combined in a fixed tree: the result depends only on the
inputs, never on the thread count or the anchor tiling. Float constants are module-level
``np.float32`` values (a float64 operand would halve the vector width). The full design and the
reasons for each choice: docs/design.md, "simkit._jit.infonce32"; timings: docs/performance.md.

Callers must keep ``x_i . y_j / tau - c_i`` within [-600, 600] (the factor ``exp(m - c_i)`` is a
float64) and d >= 2.
"""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.core import cgutils
from numba.extending import intrinsic

from simkit._jit.infonce import tile_segments

__all__ = ["TILE_A", "TILE_N", "SMALL_D", "LANES", "M_STEP", "ARG_MIN", "ARG_LO", "ARG_HI",
           "EXP32_COEF", "prefix_sums32", "tile_negatives32", "exp32_inplace"]

TILE_A = 128
TILE_N = 512
SMALL_D = 8
LANES = 16

_F32 = np.float32
_LOG2E = _F32(1.4426950408889634)
_LN2HI = _F32(0.693359375)  # 9 significant bits: n * _LN2HI is exact for |n| <= 2**15
_LN2LO = _F32(-2.12194440054690583e-4)  # ln 2 - _LN2HI
_MAGIC = _F32(12582912.0)  # 1.5 * 2**23: adding it rounds to an integer held in the low bits
#: arguments below are raised to it (exp(-87) > 2**-126, the smallest normal float32)
ARG_MIN = _F32(-87.0)
#: accepted range of a segment's largest argument s_j - m (else m is reset and the segment redone)
ARG_LO = _F32(-40.0)
ARG_HI = _F32(64.0)  # 16 lanes * 32 terms * e^64 < 2e31, far below the float32 maximum 3.4e38
#: references m are multiples of M_STEP (a power of two: exact in float32)
M_STEP = _F32(8.0)
_INV_M_STEP = _F32(1.0) / M_STEP
_ZERO = _F32(0.0)
_EXP_ARG_LO = _F32(np.exp(np.float64(ARG_LO)))
_NINF = _F32(-np.inf)
# exp(r) on |r| <= ln2/2: c0..c2 = 1, 1, 1/2 fixed, c3..c6 a discrete minimax fit of the relative
# error (linear programming on 3001 points, each coefficient rounded to float32 before the next was
# refitted); max relative error 6.9e-9 in exact arithmetic (tests/jit/test_infonce_f32.py)
EXP32_COEF = (1.0, 1.0, 0.5, 0.16666465997695923, 0.04166650399565697, 0.008373676799237728,
              0.001392548205330968)
_C0, _C1, _C2, _C3, _C4, _C5, _C6 = (_F32(c) for c in EXP32_COEF)


# ----------------------------------------------------------------------------------------------
# the exponential, scalar (Numba) and 16-wide (LLVM IR); the same float32 operations in both


@intrinsic
def _pow2_carrier(typingctx, t):
    """The float32 2**n from the rounding carrier t = 1.5 * 2**23 + n (|n| <= 126): its int32 bits
    are _MAGIC_BITS + n, and ((bits + 127) << 23) are those of 2**n because _MAGIC_BITS << 23
    vanishes modulo 2**32. A bitcast, not a memory view: it stays in the registers."""
    if t != types.float32:
        return None

    def codegen(context, builder, signature, args):
        i32 = ir.IntType(32)
        bits = builder.bitcast(args[0], i32)
        bits = builder.shl(builder.add(bits, ir.Constant(i32, 127)), ir.Constant(i32, 23))
        return builder.bitcast(bits, ir.FloatType())

    return types.float32(types.float32), codegen


@njit(fastmath={"contract"}, inline="always")
def _exp32(s):
    """exp(s) in float32 for ARG_MIN <= s <= 88 (s below ARG_MIN is raised to it); < 1 ulp."""
    s = max(s, ARG_MIN)
    t = s * _LOG2E + _MAGIC
    nf = t - _MAGIC
    r = s - nf * _LN2HI - nf * _LN2LO  # |r| <= ln2/2 (+ rounding), two-part Cody-Waite reduction
    p = _C0 + r * (_C1 + r * (_C2 + r * (_C3 + r * (_C4 + r * (_C5 + r * _C6)))))
    return p * _pow2_carrier(t)


_F = ir.FloatType()
_I32 = ir.IntType(32)
_I64 = ir.IntType(64)
#: width of the IR vectors: the 16 lanes are held as LANES // _VW vectors (lane c in vector
#: c // _VW), which keeps AVX2's 16 registers enough for the loop (a <16 x float> loop spilled its
#: accumulator to the stack)
_VW = 8
_V = ir.VectorType(_F, _VW)
_VI = ir.VectorType(_I32, _VW)


def _vc(value):
    return ir.Constant(_V, [float(value)] * _VW)


def _splat(builder, scalar):
    v = builder.insert_element(ir.Constant(_V, ir.Undefined), scalar, ir.Constant(_I32, 0))
    return builder.shuffle_vector(v, ir.Constant(_V, ir.Undefined), ir.Constant(_VI, [0] * _VW))


def _fma(builder, a, b, c):
    """a * b + c, one rounding (llvm.fma on vectors)."""
    fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_V, [_V, _V, _V]), f"llvm.fma.v{_VW}f32")
    return builder.call(fn, [a, b, c])


def _emit_vexp(builder, s, clamp=True):
    """Vector :func:`_exp32` (same operations, same order, same fused multiply-adds); without the
    clamp at ARG_MIN when ``clamp`` is false (the caller knows every s >= ARG_MIN)."""
    if clamp:
        s = builder.select(builder.fcmp_ordered("<", s, _vc(ARG_MIN)), _vc(ARG_MIN), s)
    t = _fma(builder, s, _vc(_LOG2E), _vc(_MAGIC))
    nf = builder.fsub(t, _vc(_MAGIC))
    r = _fma(builder, builder.fneg(nf), _vc(_LN2HI), s)
    r = _fma(builder, builder.fneg(nf), _vc(_LN2LO), r)
    p = _fma(builder, r, _vc(_C6), _vc(_C5))
    for c in (_C4, _C3, _C2, _C1, _C0):
        p = _fma(builder, r, p, _vc(c))
    bits = builder.shl(builder.add(builder.bitcast(t, _VI), ir.Constant(_VI, [127] * _VW)),
                       ir.Constant(_VI, [23] * _VW))
    return builder.fmul(p, builder.bitcast(bits, _V))


def _vmax(builder, a, b):
    return builder.select(builder.fcmp_ordered(">", b, a), b, a)


def _reduce(builder, vecs, op):
    """The lanes combined in a fixed tree: lane c with lane c + 8 (the two vectors), then c + 4,
    c + 2, c + 1; returns the scalar."""
    vec = op(vecs[0], vecs[1])
    width = _VW
    while width > 1:
        width //= 2
        vt = ir.VectorType(_I32, width)
        lo = builder.shuffle_vector(vec, vec, ir.Constant(vt, list(range(width))))
        hi = builder.shuffle_vector(vec, vec, ir.Constant(vt, list(range(width, 2 * width))))
        vec = op(lo, hi)
    return builder.extract_element(vec, ir.Constant(_I32, 0))


def _emit_loop(builder, n, scores_at, m, fast=False):
    """Blocks j = 0, 16, ..., n - 16: e = exp(scores_at(j + 8 h) - m) for h = 0, 1 summed in 16
    lanes (lane c: the elements j = c mod 16), and the lane maxima of the arguments. Returns the
    (sum, max) vector pairs in the block the builder ends in (the identities 0 and -inf when n == 0).
    ``fast``: no clamp at ARG_MIN and no maxima (returned as -inf), for arguments known to lie in
    [ARG_MIN, ARG_HI]."""
    assert LANES == 2 * _VW
    pre = builder.block
    loop = builder.append_basic_block("l16.loop")
    done = builder.append_basic_block("l16.done")
    builder.cbranch(builder.icmp_signed(">", n, ir.Constant(_I64, 0)), loop, done)
    builder.position_at_end(loop)
    j = builder.phi(_I64)
    accs = [builder.phi(_V) for _ in range(2)]
    mxs = [builder.phi(_V) for _ in range(2)]
    accs2, mxs2 = [], []
    for h in range(2):
        arg = builder.fsub(scores_at(builder.add(j, ir.Constant(_I64, h * _VW))), m)
        mxs2.append(mxs[h] if fast else _vmax(builder, mxs[h], arg))
        accs2.append(builder.fadd(accs[h], _emit_vexp(builder, arg, clamp=not fast)))
    j2 = builder.add(j, ir.Constant(_I64, LANES))
    end = builder.block
    builder.cbranch(builder.icmp_signed("<", j2, n), loop, done)
    j.add_incoming(ir.Constant(_I64, 0), pre)
    j.add_incoming(j2, end)
    for phis, first, nxts in ((accs, _vc(0.0), accs2), (mxs, _vc(-np.inf), mxs2)):
        for phi, nxt in zip(phis, nxts):
            phi.add_incoming(first, pre)
            phi.add_incoming(nxt, end)
    builder.position_at_end(done)
    out = []
    for first, nxts in ((_vc(0.0), accs2), (_vc(-np.inf), mxs2)):
        pair = []
        for nxt in nxts:
            phi = builder.phi(_V)
            phi.add_incoming(first, pre)
            phi.add_incoming(nxt, end)
            pair.append(phi)
        out.append(pair)
    return out


def _finish(context, builder, acc, mx):
    tot = _reduce(builder, acc, builder.fadd)
    top = _reduce(builder, mx, lambda a, b: _vmax(builder, a, b))
    return context.make_tuple(builder, types.UniTuple(types.float32, 2), (tot, top))


def _load(builder, ptr):
    """The _VW floats at ``ptr`` (a float pointer), unaligned."""
    return builder.load(builder.bitcast(ptr, _V.as_pointer()), align=4)


def _c_array(context, builder, aryty, value, ndim):
    """Data pointer and shape of a C-contiguous array argument."""
    ary = context.make_array(aryty)(context, builder, value=value)
    return ary.data, cgutils.unpack_tuple(builder, ary.shape, ndim)


def _is_c32(aryty, ndim):
    return (isinstance(aryty, types.Array) and aryty.dtype == types.float32 and aryty.ndim == ndim
            and aryty.layout == "C")


def _make_seg_body_small_d(fast):
    @intrinsic
    def _seg_body_small_d(typingctx, y_tiles, t, xa, r, lo, n, m):
        """(sum of exp(s_j - m), max of s_j - m) over the columns lo .. lo + n - 1 of tile t (n a
        multiple of 16), the sum in 16 lanes j mod 16, the scores s_j = xa[r] . y_tiles[t, :, j] computed in place
        (d = y_tiles.shape[1], 2 <= d <= SMALL_D: x0 * y0, then one fused multiply-add per further
        coordinate); y_tiles 3-D and xa 2-D C float32 arrays."""
        if not (_is_c32(y_tiles, 3) and _is_c32(xa, 2) and m == types.float32):
            return None

        def codegen(context, builder, signature, args):
            ydata, (_, d, width) = _c_array(context, builder, signature.args[0], args[0], 3)
            xdata, (_, xd) = _c_array(context, builder, signature.args[2], args[2], 2)
            tile = builder.gep(ydata, [builder.add(builder.mul(builder.mul(args[1], d), width), args[4])],
                               source_etype=_F)
            xrow = builder.gep(xdata, [builder.mul(args[3], xd)], source_etype=_F)
            mv = _splat(builder, args[6])
            merge_sum, merge_max = [], []
            fn = builder.function
            after = fn.append_basic_block("sd.after")
            bad = fn.append_basic_block("sd.other")
            switch = builder.switch(d, bad)
            for dd in range(2, SMALL_D + 1):
                blk = fn.append_basic_block(f"sd.d{dd}")
                switch.add_case(ir.Constant(_I64, dd), blk)
                builder.position_at_end(blk)
                xs = [_splat(builder, builder.load(builder.gep(xrow, [ir.Constant(_I64, c)], source_etype=_F)))
                      for c in range(dd)]
                rows = [builder.gep(tile, [builder.mul(ir.Constant(_I64, c), width)], source_etype=_F)
                        for c in range(dd)]

                def scores_at(j, xs=xs, rows=rows):
                    s = builder.fmul(xs[0], _load(builder, builder.gep(rows[0], [j], source_etype=_F)))
                    for c in range(1, len(xs)):
                        s = _fma(builder, xs[c], _load(builder, builder.gep(rows[c], [j], source_etype=_F)), s)
                    return s

                acc, mx = _emit_loop(builder, args[5], scores_at, mv, fast)
                merge_sum.append((acc, builder.block))
                merge_max.append((mx, builder.block))
                builder.branch(after)
            builder.position_at_end(bad)  # d outside 2..SMALL_D: never called so (NaN result)
            merge_sum.append(([_vc(np.nan)] * 2, bad))
            merge_max.append(([_vc(np.nan)] * 2, bad))
            builder.branch(after)
            builder.position_at_end(after)
            out = []
            for pairs in (merge_sum, merge_max):
                vecs = []
                for h in range(2):
                    phi = builder.phi(_V)
                    for v, b in pairs:
                        phi.add_incoming(v[h], b)
                    vecs.append(phi)
                out.append(vecs)
            return _finish(context, builder, *out)

        sig = types.UniTuple(types.float32, 2)(y_tiles, types.int64, xa, types.int64, types.int64, types.int64,
                                               types.float32)
        return sig, codegen

    return _seg_body_small_d


def _make_rows_exp(n_rows, fast):
    """An intrinsic ``f(y_tiles, t, xa, r0, er0, lo, n, mref, ebuf, emax)`` for d > SMALL_D: for the
    rows r = r0 .. r0 + n_rows - 1 of the anchor tile ``xa`` and the columns j = lo .. lo + n - 1
    of tile t (n a multiple of 16), ebuf[er0 + r - r0, j] = exp(s_rj - mref[r]) and emax[r] =
    max(emax[r], max_j (s_rj - mref[r])). s_rj = xa[r] . y_tiles[t, :, j] is formed in registers
    (x0 y0, then one fused multiply-add per further coordinate, in order: the scores of
    :func:`_score`) by an n_rows x 16 register block and exponentiated there. ``fast``: no clamp
    and emax untouched."""

    @intrinsic
    def rows(typingctx, y_tiles, t, xa, r0, er0, lo, n, mref, ebuf, emax):
        if not (_is_c32(y_tiles, 3) and _is_c32(xa, 2) and _is_c32(mref, 1) and _is_c32(ebuf, 2)
                and _is_c32(emax, 1)):
            return None

        def codegen(context, builder, signature, args):
            ydata, (_, d, width) = _c_array(context, builder, signature.args[0], args[0], 3)
            xdata, (_, xd) = _c_array(context, builder, signature.args[2], args[2], 2)
            mdata, _ = _c_array(context, builder, signature.args[7], args[7], 1)
            edata, (_, ew) = _c_array(context, builder, signature.args[8], args[8], 2)
            tdata, _ = _c_array(context, builder, signature.args[9], args[9], 1)
            t, r0, er0, lo, n = args[1], args[3], args[4], args[5], args[6]
            one = ir.Constant(_I64, 1)
            ridx = [builder.add(r0, ir.Constant(_I64, r)) for r in range(n_rows)]
            tile = builder.gep(ydata, [builder.add(builder.mul(builder.mul(t, d), width), lo)], source_etype=_F)
            xrows = [builder.gep(xdata, [builder.mul(ridx[r], xd)], source_etype=_F) for r in range(n_rows)]
            erows = [builder.gep(edata, [builder.add(builder.mul(builder.add(er0, ir.Constant(_I64, r)), ew), lo)],
                                 source_etype=_F) for r in range(n_rows)]
            ms = [_splat(builder, builder.load(builder.gep(mdata, [ridx[r]], source_etype=_F)))
                  for r in range(n_rows)]
            fn = builder.function
            pre = builder.block
            jloop = fn.append_basic_block("rx.j")
            cloop = fn.append_basic_block("rx.c")
            cdone = fn.append_basic_block("rx.cdone")
            done = fn.append_basic_block("rx.done")
            builder.cbranch(builder.icmp_signed(">", n, ir.Constant(_I64, 0)), jloop, done)
            # j loop head: the products of the first coordinate
            builder.position_at_end(jloop)
            j = builder.phi(_I64)
            mxs = [[builder.phi(_V) for _ in range(2)] for _ in range(n_rows)]
            y0 = [_load(builder, builder.gep(tile, [builder.add(j, ir.Constant(_I64, h * _VW))], source_etype=_F))
                  for h in range(2)]
            s0 = [[builder.fmul(_splat(builder, builder.load(xrows[r])), y0[h]) for h in range(2)]
                  for r in range(n_rows)]
            jhead = builder.block
            builder.cbranch(builder.icmp_signed(">", d, one), cloop, cdone)
            # c loop: coordinates 1 .. d - 1
            builder.position_at_end(cloop)
            c = builder.phi(_I64)
            ss = [[builder.phi(_V) for _ in range(2)] for _ in range(n_rows)]
            yrow = builder.gep(tile, [builder.add(builder.mul(c, width), j)], source_etype=_F)
            yv = [_load(builder, builder.gep(yrow, [ir.Constant(_I64, h * _VW)], source_etype=_F)) for h in range(2)]
            ss2 = []
            for r in range(n_rows):
                xv = _splat(builder, builder.load(builder.gep(xrows[r], [c], source_etype=_F)))
                ss2.append([_fma(builder, xv, yv[h], ss[r][h]) for h in range(2)])
            c2 = builder.add(c, one)
            cend = builder.block
            builder.cbranch(builder.icmp_signed("<", c2, d), cloop, cdone)
            c.add_incoming(one, jhead)
            c.add_incoming(c2, cend)
            for r in range(n_rows):
                for h in range(2):
                    ss[r][h].add_incoming(s0[r][h], jhead)
                    ss[r][h].add_incoming(ss2[r][h], cend)
            # exponentials of the n_rows x 16 scores, stored
            builder.position_at_end(cdone)
            sfin = [[builder.phi(_V) for _ in range(2)] for _ in range(n_rows)]
            for r in range(n_rows):
                for h in range(2):
                    sfin[r][h].add_incoming(s0[r][h], jhead)
                    sfin[r][h].add_incoming(ss2[r][h], cend)
            mxs2 = [[None, None] for _ in range(n_rows)]
            for r in range(n_rows):
                for h in range(2):
                    arg = builder.fsub(sfin[r][h], ms[r])
                    mxs2[r][h] = mxs[r][h] if fast else _vmax(builder, mxs[r][h], arg)
                    ptr = builder.gep(erows[r], [builder.add(j, ir.Constant(_I64, h * _VW))], source_etype=_F)
                    builder.store(_emit_vexp(builder, arg, clamp=not fast), builder.bitcast(ptr, _V.as_pointer()),
                                  align=4)
            j2 = builder.add(j, ir.Constant(_I64, LANES))
            jend = builder.block
            builder.cbranch(builder.icmp_signed("<", j2, n), jloop, done)
            j.add_incoming(ir.Constant(_I64, 0), pre)
            j.add_incoming(j2, jend)
            for r in range(n_rows):
                for h in range(2):
                    mxs[r][h].add_incoming(_vc(-np.inf), pre)
                    mxs[r][h].add_incoming(mxs2[r][h], jend)
            builder.position_at_end(done)
            if not fast:
                fins = []
                for r in range(n_rows):
                    pair = []
                    for h in range(2):
                        phi = builder.phi(_V)
                        phi.add_incoming(_vc(-np.inf), pre)
                        phi.add_incoming(mxs2[r][h], jend)
                        pair.append(phi)
                    fins.append(pair)
                for r in range(n_rows):
                    top = _reduce(builder, fins[r], lambda a, b: _vmax(builder, a, b))
                    ptr = builder.gep(tdata, [ridx[r]], source_etype=_F)
                    old = builder.load(ptr)
                    builder.store(builder.select(builder.fcmp_ordered(">", top, old), top, old), ptr)
            return context.get_dummy_value()

        sig = types.none(y_tiles, types.int64, xa, types.int64, types.int64, types.int64, types.int64, mref, ebuf,
                         emax)
        return sig, codegen

    return rows


@intrinsic
def _lanes_sum(typingctx, ebuf, r, lo, n):
    """ebuf[r, lo] + ... + ebuf[r, lo + n - 1] (n a multiple of 16) in 16 lanes j mod 16 (two
    8-wide vectors), combined in the fixed tree of :func:`_reduce`."""
    if not _is_c32(ebuf, 2):
        return None

    def codegen(context, builder, signature, args):
        edata, (_, ew) = _c_array(context, builder, signature.args[0], args[0], 2)
        base = builder.gep(edata, [builder.add(builder.mul(args[1], ew), args[2])], source_etype=_F)
        n = args[3]
        fn = builder.function
        pre = builder.block
        loop = fn.append_basic_block("ls.loop")
        done = fn.append_basic_block("ls.done")
        builder.cbranch(builder.icmp_signed(">", n, ir.Constant(_I64, 0)), loop, done)
        builder.position_at_end(loop)
        j = builder.phi(_I64)
        accs = [builder.phi(_V) for _ in range(2)]
        nxt = [builder.fadd(accs[h], _load(builder, builder.gep(base, [builder.add(j, ir.Constant(_I64, h * _VW))],
                                                               source_etype=_F))) for h in range(2)]
        j2 = builder.add(j, ir.Constant(_I64, LANES))
        end = builder.block
        builder.cbranch(builder.icmp_signed("<", j2, n), loop, done)
        j.add_incoming(ir.Constant(_I64, 0), pre)
        j.add_incoming(j2, end)
        for h in range(2):
            accs[h].add_incoming(_vc(0.0), pre)
            accs[h].add_incoming(nxt[h], end)
        builder.position_at_end(done)
        fin = []
        for h in range(2):
            phi = builder.phi(_V)
            phi.add_incoming(_vc(0.0), pre)
            phi.add_incoming(nxt[h], end)
            fin.append(phi)
        return _reduce(builder, fin, builder.fadd)

    return types.float32(ebuf, types.int64, types.int64, types.int64), codegen


def _vector_registers() -> int:
    """Vector registers of the CPU Numba compiles for: 32 with AVX-512, else 16 (x86-64 AVX2 and below;
    other architectures are treated alike). ``NUMBA_CPU_NAME`` / ``NUMBA_CPU_FEATURES``, when set,
    name that CPU instead of the host (a named CPU without features is taken to have no AVX-512)."""
    from numba.core import config
    if config.CPU_NAME:
        features = config.CPU_FEATURES or ""
    else:
        import llvmlite.binding as llvm
        features = llvm.get_host_cpu_features().flatten()
    return 32 if "+avx512f" in features.split(",") else 16


#: rows per register block of the d > SMALL_D product (ROWS_BIG_D x 16 scores in 2 ROWS_BIG_D vectors):
#: 6 (12 accumulators, the two vectors of a negative's coordinate and a broadcast anchor value within
#: AVX2's 16 registers), 8 with AVX-512's 32, the largest block that does not spill (timings in
#: docs/performance.md, "Measurements behind code choices"). The result does not depend on it (each
#: score is formed in the same order whatever the blocking).
ROWS_BIG_D = 8 if _vector_registers() >= 32 else 6
_rows_exp = _make_rows_exp(ROWS_BIG_D, False)
_rows_exp_fast = _make_rows_exp(ROWS_BIG_D, True)
_row_exp = _make_rows_exp(1, False)
_row_exp_fast = _make_rows_exp(1, True)


_seg_body_small_d = _make_seg_body_small_d(False)
_seg_body_small_d_fast = _make_seg_body_small_d(True)


@intrinsic
def _vexp16_store(typingctx, a, n):
    """a[j] <- exp(a[j]) for j < n (n a multiple of 16), the 16-wide exponential (for tests)."""
    if not (isinstance(a, types.Array) and a.dtype == types.float32 and a.ndim == 1 and a.layout == "C"):
        return None

    def codegen(context, builder, signature, args):
        ary = context.make_array(signature.args[0])(context, builder, value=args[0])
        with cgutils.for_range_slice(builder, ir.Constant(_I64, 0), args[1], ir.Constant(_I64, LANES)) as (j, _):
            for h in range(LANES // _VW):
                p = builder.gep(ary.data, [builder.add(j, ir.Constant(_I64, h * _VW))], source_etype=_F)
                builder.store(_emit_vexp(builder, _load(builder, p)), builder.bitcast(p, _V.as_pointer()), align=4)
        return context.get_dummy_value()

    return types.none(a, types.int64), codegen


@njit(fastmath={"contract"}, cache=True)
def exp32_inplace(a):
    """a[j] <- exp(a[j]) for a 1-D float32 C array of arguments in [ARG_MIN, 88]: the kernel's two
    exponentials, 16-wide on a[:16 * (n // 16)] and scalar on the rest (for tests)."""
    n = a.shape[0]
    n16 = n - n % LANES
    _vexp16_store(a, n16)
    for j in range(n16, n):
        a[j] = _exp32(a[j])


# ----------------------------------------------------------------------------------------------
# the kernel


def tile_negatives32(y: np.ndarray) -> np.ndarray:
    """Negatives (K, d) as zero-padded, transposed float32 tiles (n_tiles, d, TILE_N)."""
    k, d = y.shape
    n_tiles = (k + TILE_N - 1) // TILE_N
    pad = np.zeros((n_tiles * TILE_N, d), dtype=np.float32)
    pad[:k] = y
    return np.ascontiguousarray(pad.reshape(n_tiles, TILE_N, d).transpose(0, 2, 1))


@njit(fastmath={"contract"}, inline="always")
def _score(xa, y_tiles, t, r, d, j):
    """Score of column j of tile t for row r: x0 y0, then one fused multiply-add per further
    coordinate, in order (the scores of the vector loops)."""
    s = xa[r, 0] * y_tiles[t, 0, j]
    for c in range(1, d):
        s = s + xa[r, c] * y_tiles[t, c, j]
    return s


@njit(inline="always")
def _aligned(lo, hi):
    """The 16-aligned middle [a, b) of [lo, hi) (tiles start at multiples of 16)."""
    a = min(hi, (lo + 15) & ~15)
    return a, a + ((hi - a) & ~15)


@njit(fastmath={"contract"}, inline="always")
def _seg_pass(xa, y_tiles, t, r, d, lo, hi, m, fast):
    """d <= SMALL_D: (sum of exp(s_j - m), max of s_j - m) over the columns [lo, hi) of tile t,
    row r: head (up to a multiple of 16) and tail in order, the aligned middle in 16 lanes.
    ``fast``: the middle without its clamp and maxima (the caller has bounded every argument to
    [ARG_MIN, ARG_HI]; the max returned then covers only the head and tail)."""
    a, b = _aligned(lo, hi)
    tot = _ZERO
    top = _NINF
    for j in range(lo, a):
        arg = _score(xa, y_tiles, t, r, d, j) - m
        top = max(top, arg)
        tot += _exp32(arg)
    if b > a:
        if fast:
            body, btop = _seg_body_small_d_fast(y_tiles, t, xa, r, a, b - a, m)
        else:
            body, btop = _seg_body_small_d(y_tiles, t, xa, r, a, b - a, m)
        tot += body
        top = max(top, btop)
    for j in range(b, hi):
        arg = _score(xa, y_tiles, t, r, d, j) - m
        top = max(top, arg)
        tot += _exp32(arg)
    return tot, top


@njit(fastmath={"contract"})
def _row_exp_store(xa, y_tiles, t, r, er, d, lo, hi, mref, ebuf, emax):
    """d > SMALL_D, one row: ebuf[er, j] = exp(s_j - mref[r]) for j in [lo, hi) (any lo), emax[r]
    raised to the largest s_j - mref[r]: 16-wide, then the last (hi - lo) mod 16 columns (the rare
    recomputations; not inlined)."""
    b = lo + ((hi - lo) & ~15)
    if b > lo:
        _row_exp(y_tiles, t, xa, r, er, lo, b - lo, mref, ebuf, emax)
    m = mref[r]
    for j in range(b, hi):
        arg = _score(xa, y_tiles, t, r, d, j) - m
        emax[r] = max(emax[r], arg)
        ebuf[er, j] = _exp32(arg)


@njit(fastmath={"contract"}, inline="always")
def _ebuf_sum(ebuf, r, lo, hi):
    """ebuf[r, lo:hi] summed: head (up to a multiple of 16) and tail in order, middle in 16 lanes."""
    a, b = _aligned(lo, hi)
    tot = _ZERO
    for j in range(lo, a):
        tot += ebuf[r, j]
    tot += _lanes_sum(ebuf, r, a, b - a)
    for j in range(b, hi):
        tot += ebuf[r, j]
    return tot


@njit(fastmath={"contract"})
def _seg_pass_full(xa, y_tiles, t, r, d, lo, hi, m):
    """:func:`_seg_pass` without ``fast``, not inlined (the rare recomputations)."""
    return _seg_pass(xa, y_tiles, t, r, d, lo, hi, m, False)


@njit(inline="always")
def _reference(s):
    """The multiple of M_STEP at or above s."""
    return np.float32(math.ceil(s * _INV_M_STEP)) * M_STEP


@njit(inline="always")
def _fast_ok(bound, m):
    """Every |s_j| <= bound, so s_j - m lies in [ARG_MIN, ARG_HI]."""
    mf = np.float64(m)
    return bound - mf <= ARG_HI and -bound - mf >= ARG_MIN


@njit(inline="always")
def _flush(r, m, part, fac_m, fac, acc, shift, a0, out, gq, log1p_out):
    """acc[r] += part * exp(m - shift) in float64 (the factor cached per row); out at grid points
    (its log1p with ``log1p_out``)."""
    if m != fac_m[r]:
        fac_m[r] = m
        fac[r] = math.exp(np.float64(m) - shift[a0 + r])
    acc[r] += np.float64(part) * fac[r]
    if gq >= 0:
        out[a0 + r, gq] = math.log1p(acc[r]) if log1p_out else acc[r]


@njit(parallel=True, fastmath={"contract"}, cache=True)
def prefix_sums32(x, y_tiles, n_neg, inv_tau, shift, k_grid, out, log1p_out=False):
    """out[i, g] = sum_{j < k_grid[g]} exp(x_i . y_j * inv_tau - shift[i]), scores in float32.

    x (B, d) float32 C-contiguous, 2 <= d; y_tiles float32 from :func:`tile_negatives32`;
    n_neg = K; inv_tau a float (x * inv_tau is formed in float64, then rounded to float32);
    shift (B,) float64, used in float64 only; k_grid (G,) int64, strictly increasing,
    k_grid[-1] <= K; out (B, G) float64. ``log1p_out``: out holds log1p of the sums (float64
    math.log1p, in the parallel loop). ``infonce_losses`` passes False and calls NumPy's vectorised
    log1p, which is cheaper than libm's where the CPU has AVX-512 (docs/performance.md).
    """
    b_total, d = x.shape
    n_tiles = y_tiles.shape[0]
    n_grid = k_grid.shape[0]
    k_last = k_grid[n_grid - 1]
    # largest norm of the negatives of each tile (float64, of their float32 values): with the
    # anchors' norms it bounds every score of a tile (Cauchy-Schwarz)
    y_norm = np.empty(n_tiles)
    for t in prange(n_tiles):
        sq = np.zeros(TILE_N)
        for c in range(d):
            for j in range(TILE_N):
                v = np.float64(y_tiles[t, c, j])
                sq[j] += v * v
        y_norm[t] = math.sqrt(np.max(sq))
    n_atiles = (b_total + TILE_A - 1) // TILE_A
    big = d > SMALL_D
    for at in prange(n_atiles):
        a0 = at * TILE_A
        na = min(b_total, a0 + TILE_A) - a0
        xa = np.zeros((TILE_A, d), dtype=np.float32)
        x_norm = np.zeros(TILE_A)
        for r in range(na):
            sq = 0.0
            for c in range(d):
                v = np.float32(np.float64(x[a0 + r, c]) * inv_tau)
                xa[r, c] = v
                sq += np.float64(v) * np.float64(v)
            # margin for the float32 rounding of the scores (<= (d + 1) 2**-24 sum_c |x_c y_c|)
            x_norm[r] = math.sqrt(sq) * (1.0 + 1e-5) + 1e-6
        acc = np.zeros(TILE_A)
        ref = np.full(TILE_A, np.nan, dtype=np.float32)  # each row's reference m (none yet)
        fac_m = np.full(TILE_A, np.nan, dtype=np.float32)  # the m of the cached factor
        fac = np.zeros(TILE_A)
        fast = np.zeros(TILE_A, dtype=np.bool_)
        # d > SMALL_D: the exponentials of one register block of rows over a tile (12-16 KB, in L1)
        ebuf = np.empty((ROWS_BIG_D, TILE_N), dtype=np.float32)
        emax = np.empty(TILE_A, dtype=np.float32)
        mseg = np.empty(TILE_A, dtype=np.float32)
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
            n_seg, g = tile_segments(j0, j1, k_grid, g, seg_lo, seg_hi, seg_g)
            for r in range(na):
                if np.isnan(ref[r]):
                    ref[r] = _reference(_score(xa, y_tiles, t, r, d, seg_lo[0] - j0))
                fast[r] = _fast_ok(x_norm[r] * y_norm[t], ref[r])
                emax[r] = _NINF
            if big:
                # register blocks of ROWS_BIG_D rows (the fast loop where all rows of a block allow
                # it): the tile's exponentials into ebuf, then the block's segment sums from it
                nj16 = nj & ~15
                r0 = 0
                while r0 < na:
                    nr = ROWS_BIG_D if r0 + ROWS_BIG_D <= na else 1
                    all_fast = True
                    for r in range(r0, r0 + nr):
                        all_fast = all_fast and fast[r]
                    if nj16 > 0:
                        if nr == ROWS_BIG_D:
                            if all_fast:
                                _rows_exp_fast(y_tiles, t, xa, r0, 0, 0, nj16, ref, ebuf, emax)
                            else:
                                _rows_exp(y_tiles, t, xa, r0, 0, 0, nj16, ref, ebuf, emax)
                        elif all_fast:
                            _row_exp_fast(y_tiles, t, xa, r0, 0, 0, nj16, ref, ebuf, emax)
                        else:
                            _row_exp(y_tiles, t, xa, r0, 0, 0, nj16, ref, ebuf, emax)
                    for r in range(r0, r0 + nr):
                        er = r - r0
                        m = ref[r]
                        for j in range(nj16, nj):
                            arg = _score(xa, y_tiles, t, r, d, j) - m
                            emax[r] = max(emax[r], arg)
                            ebuf[er, j] = _exp32(arg)
                        if not all_fast and not (emax[r] <= ARG_HI):
                            # an argument above ARG_HI: the row's tile again from its largest score
                            m = _reference(m + emax[r])
                            ref[r] = m
                            emax[r] = _NINF
                            _row_exp_store(xa, y_tiles, t, r, er, d, 0, nj, ref, ebuf, emax)
                        for q in range(n_seg):
                            lo = seg_lo[q] - j0
                            hi = seg_hi[q] - j0
                            part = _ebuf_sum(ebuf, er, lo, hi)
                            if part >= _EXP_ARG_LO:
                                _flush(r, m, part, fac_m, fac, acc, shift, a0, out, seg_g[q], log1p_out)
                                continue
                            # m far above this segment's scores: the segment again from its own
                            # largest score (columns of ebuf overwritten after their use)
                            mseg[r] = m
                            emax[r] = _NINF
                            _row_exp_store(xa, y_tiles, t, r, er, d, lo, hi, mseg, ebuf, emax)
                            mseg[r] = _reference(m + emax[r])
                            _row_exp_store(xa, y_tiles, t, r, er, d, lo, hi, mseg, ebuf, emax)
                            _flush(r, mseg[r], _ebuf_sum(ebuf, er, lo, hi), fac_m, fac, acc, shift, a0, out,
                                   seg_g[q], log1p_out)
                    r0 += nr
            else:
                for r in range(na):
                    m = ref[r]
                    for q in range(n_seg):
                        lo = seg_lo[q] - j0
                        hi = seg_hi[q] - j0
                        # m may have changed in an earlier segment: the bound is checked again
                        fast[r] = _fast_ok(x_norm[r] * y_norm[t], m)
                        part, top = _seg_pass(xa, y_tiles, t, r, d, lo, hi, m, fast[r])
                        if fast[r]:
                            ok = part >= _EXP_ARG_LO
                            if not ok:
                                part, top = _seg_pass_full(xa, y_tiles, t, r, d, lo, hi, m)
                        else:
                            ok = ARG_LO <= top <= ARG_HI
                        if not ok:
                            m = _reference(m + top)  # the segment's largest score, rounded up
                            part, top = _seg_pass_full(xa, y_tiles, t, r, d, lo, hi, m)
                        ref[r] = m
                        _flush(r, m, part, fac_m, fac, acc, shift, a0, out, seg_g[q], log1p_out)

