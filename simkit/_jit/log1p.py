"""``log1p`` for Numba, bit for bit the C library's on the hosts simkit's datasets were made on.

Why: the d = 3 von Mises--Fisher sampler spends about a third of its time in the C library's
scalar ``log1p`` (10 ns a call). Its draws feed every committed dataset, so a faster ``log1p`` must
give the same bits, not merely the same accuracy. The routine below is a transcription of the
machine code of glibc 2.36's ``__log1p_fma`` (the variant its ifunc selects on every x86-64 host
with FMA; source ``sysdeps/ieee754/dbl-64/s_log1p.c``, the fdlibm algorithm, compiled with FMA
contraction), operation for operation: the same constants, the same order, and an explicit fused
multiply-add exactly where that machine code has one. :func:`log1p_into` evaluates it branch-free
over an array, so that LLVM vectorises it, and finishes the rare lanes outside its main path
(|x| < 2**-29, x >= 0.41422, x <= -1, a reduced argument with a zero high fraction, NaN, inf)
with the scalar :func:`log1p`.

It is checked against the C library (``math.log1p``) on millions of arguments chosen to cross every
branch and boundary, and against mpmath for accuracy, in ``tests/jit/test_log1p.py``. ``llvm.fma`` is
a correctly rounded fused multiply-add on every target (in software where the processor has
none), so the bits no longer depend on which ``log1p`` variant the host's C library picks.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

__all__ = ["log1p", "log1p_into"]

_LN2_HI = 6.93147180369123816490e-01  # 0x3fe62e42fee00000
_LN2_LO = 1.90821492927058770002e-10  # 0x3dea39ef35793c76
_LP1 = 6.666666666666735130e-01
_LP2 = 3.999999999940941908e-01
_LP3 = 2.857142874366239149e-01
_LP4 = 2.222219843214978396e-01
_LP5 = 1.818357216161805012e-01
_LP6 = 1.531383769920937332e-01
_LP7 = 1.479819860511658591e-01
_TWO3 = 0.66666666666666666  # 0x3fe5555555555555, of the |f| < 2**-20 branch


@intrinsic
def _fma(typingctx, a, b, c):
    """a * b + c with one rounding (``llvm.fma.f64``)."""
    sig = types.float64(types.float64, types.float64, types.float64)

    def codegen(context, builder, signature, args):
        d = ir.DoubleType()
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(d, [d, d, d]), "llvm.fma.f64")
        return builder.call(fn, args)

    return sig, codegen


@intrinsic
def _bits(typingctx, x):
    """The IEEE-754 bits of a float64 as an int64."""
    sig = types.int64(types.float64)

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(64))

    return sig, codegen


@intrinsic
def _from_bits(typingctx, i):
    """The float64 whose bits are the int64 ``i``."""
    sig = types.float64(types.int64)

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.DoubleType())

    return sig, codegen


@njit(inline="always", error_model="numpy")
def _with_high(u, hi):
    """``u`` with its high 32 bits replaced by ``hi`` (glibc's SET_HIGH_WORD)."""
    return _from_bits((_bits(u) & np.int64(0xFFFFFFFF)) | (np.int64(hi) << np.int64(32)))


@njit(inline="always", error_model="numpy")
def _poly(f, hfsq):
    """s (hfsq + R(s^2)) with s = f / (2 + f): the fdlibm polynomial in glibc's evaluation order,
    with its fused multiply-adds."""
    s = f / (2.0 + f)
    z = s * s
    r2 = _fma(z, _LP3, _LP2)
    r3 = _fma(z, _LP5, _LP4)
    r4 = _fma(z, _LP7, _LP6)
    z2 = z * z
    z4 = z2 * z2
    z6 = z2 * z4
    r = _fma(z, _LP1, z2 * r2)
    r = _fma(z4, r3, r)
    r = _fma(z6, r4, r)
    w = (r + hfsq) * s
    return w


@njit(inline="always", error_model="numpy")
def _finish(f, c, k, hfsq):
    """The polynomial and the reconstruction, for a reduced argument with a nonzero high fraction."""
    w = _poly(f, hfsq)
    if k == 0:
        return f - (hfsq - w)
    dk = float(k)
    a = (hfsq - (_fma(dk, _LN2_LO, c) + w)) - f
    return _fma(dk, _LN2_HI, -a)


@njit(inline="always", error_model="numpy")
def _reduce(u, c, k, hu):
    """From ``u`` (1 + x, or x itself when huge), its correction ``c`` and exponent ``k``: the result."""
    hu = hu & 0xFFFFF
    if hu <= 0x6A09D:
        u = _with_high(u, hu | 0x3FF00000)
    else:
        k += 1
        u = _with_high(u, hu | 0x3FE00000)
        hu = (0x100000 - hu) >> 2
    f = u - 1.0
    hfsq = (f * 0.5) * f
    if hu != 0:
        return _finish(f, c, k, hfsq)
    if f == 0.0:
        if k == 0:
            return 0.0
        dk = float(k)
        return _fma(dk, _LN2_HI, _fma(dk, _LN2_LO, c))
    r = _fma(-f, _TWO3, 1.0) * hfsq
    if k == 0:
        return f - r
    dk = float(k)
    a = (r - _fma(dk, _LN2_LO, c)) - f
    return _fma(dk, _LN2_HI, -a)


@njit(inline="always", error_model="numpy")
def _via_one_plus(x):
    u = x + 1.0
    hu = _bits(u) >> 32
    k = (hu >> 20) - 1023
    if k > 0:
        c = 1.0 - (u - x)
    else:
        c = x - (u - 1.0)
    return _reduce(u, c / u, k, hu)


# forceinline given explicitly: a jitted callee that leaves it unset inherits its caller's (vmf_omw
# is forceinline), so its compiled form would depend on which kernel compiled it first
@njit(cache=True, error_model="numpy", forceinline=False)
def log1p(x):
    """log(1 + x), bit for bit glibc 2.36's ``__log1p_fma``, for any float64 ``x``."""
    hx = _bits(x) >> 32  # the high word, sign-extended: glibc's int32_t hx
    if hx > 0x3FDA8279:  # x >= 0.41422, +inf, NaN with the sign bit clear
        if hx > 0x7FEFFFFF:
            return x + x
        if hx > 0x433FFFFF:  # x >= 2**53: 1 + x is x
            return _reduce(x, 0.0, (hx >> 20) - 1023, hx)
        return _via_one_plus(x)
    ax = hx & 0x7FFFFFFF
    if ax > 0x3FEFFFFF:  # x <= -1, -inf, NaN with the sign bit set
        if x == -1.0:
            return -np.inf
        return np.nan
    if ax <= 0x3E1FFFFF:  # |x| < 2**-29
        if ax <= 0x3C8FFFFF:  # |x| < 2**-54
            return x
        return _fma(-(x * x), 0.5, x)
    if ((hx + 0x402D413C) & 0xFFFFFFFF) > 0x402D413C:  # -0.2929 < x < 0.41422: no reduction
        return _finish(x, 0.0, 0, (x * 0.5) * x)
    return _via_one_plus(x)


@njit(inline="always", error_model="numpy")
def _lane(x):
    """:func:`log1p` for an ``x`` on its main path, branch-free, and whether ``x`` was on it
    (where it was not, the value is garbage and the caller must use :func:`log1p`)."""
    hx = _bits(x) >> 32
    ax = hx & 0x7FFFFFFF
    plain = ((hx + 0x402D413C) & 0xFFFFFFFF) > 0x402D413C
    u = x + 1.0
    hu = _bits(u) >> 32
    k = (hu >> 20) - 1023
    c = (1.0 - (u - x)) if k > 0 else (x - (u - 1.0))
    c = c / u
    hu = hu & 0xFFFFF
    low = hu <= 0x6A09D
    k = k + (0 if low else 1)
    un = _with_high(u, (hu | 0x3FF00000) if low else (hu | 0x3FE00000))
    hu = hu if low else ((0x100000 - hu) >> 2)
    f = x if plain else un - 1.0
    k = 0 if plain else k
    hfsq = (f * 0.5) * f
    w = _poly(f, hfsq)
    dk = float(k)
    a = (hfsq - (_fma(dk, _LN2_LO, c) + w)) - f
    res_k = _fma(dk, _LN2_HI, -a)
    res_0 = f - (hfsq - w)
    res = res_0 if k == 0 else res_k
    special = (hx > 0x3FDA8279) | (ax > 0x3FEFFFFF) | (ax <= 0x3E1FFFFF) | ((not plain) & (hu == 0))
    return res, special


@njit(cache=True, error_model="numpy")
def log1p_into(x, out, n):
    """out[i] = :func:`log1p`(x[i]) for i < n; the bits of :func:`log1p`, in a loop LLVM vectorises.
    ``x`` and ``out`` must not overlap (the rare lanes off the main path are found again from ``x``)."""
    n_special = 0
    for i in range(n):
        r, sp = _lane(x[i])
        out[i] = r
        n_special += sp
    if n_special:
        for i in range(n):
            if _lane(x[i])[1]:
                out[i] = log1p(x[i])
