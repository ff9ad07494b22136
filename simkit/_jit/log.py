"""``log`` for Numba, bit for bit the C library's on the hosts simkit's datasets were made on.

Why: Wood's rejection loop in the von Mises--Fisher sampler (d >= 4) calls ``log`` twice per
proposal. A call into the C library goes through its error-handling wrapper and an ifunc-selected
entry and, because every vector register is caller-saved, makes the compiled loop spill and reload
its live values around each call. Its draws feed every committed dataset, so an inline ``log`` must
give the same bits, not merely the same accuracy.

The routine below is a transcription of the machine code of glibc 2.36's ``__ieee754_log_fma`` (the
variant its ifunc selects on every x86-64 host with FMA and AVX2; source
``sysdeps/ieee754/dbl-64/e_log.c``, the table-driven algorithm of Szabolcs Nagy from Arm's
optimized-routines, compiled with FMA contraction), operation for operation: the same constants
(its ``__log_data``: ln 2 in two parts, the two polynomials and the 128-entry (1/c, log c) table,
read out of ``libm.so.6`` with gdb), the same order, and an explicit fused multiply-add exactly
where that machine code has one. Arguments off the two arithmetic paths (zero, negative,
subnormal, inf, NaN) go to the C library's own ``log`` (``np.log``), so those bits are the C
library's by construction.

It is checked against the C library (``math.log``) on millions of arguments that cross every
branch, table cell and boundary, and against mpmath for accuracy, in ``tests/jit/test_log.py``.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from simkit._jit.log1p import _bits, _fma, _from_bits

__all__ = ["log"]


def _f64(*words):
    return np.array(words, dtype=np.uint64).view(np.float64)


_LN2HI, _LN2LO = _f64(0x3FE62E42FEFA3800, 0x3D2EF35793C76730)
# log1p(r) - r ~ r^2 (A0 + r A1 + r^2 A2 + r^3 A3 + r^4 A4) on |r| < 1/256 (the table path)
_A0, _A1, _A2, _A3, _A4 = _f64(0xBFE0000000000001, 0x3FD555555551305B, 0xBFCFFFFFFFEB4590, 0x3FC999B324F10111, 0xBFC55575E506C89F)
# log(1 + r) ~ r + r^2 B0 + r^3 (B1 + ...) near x = 1 (B0 = -0.5)
_B = _f64(0xBFE0000000000000, 0x3FD5555555555577, 0xBFCFFFFFFFFFFDCB, 0x3FC999999995DD0C, 0xBFC55555556745A7, 0x3FC24924A344DE30,
          0xBFBFFFFFA4423D65, 0x3FBC7184282AD6CA, 0xBFB999EB43B068FF, 0x3FB78182F7AFD085, 0xBFB5521375D145CD)
_B0, _B1, _B2, _B3, _B4, _B5, _B6, _B7, _B8, _B9, _B10 = (float(b) for b in _B)
_A0, _A1, _A2, _A3, _A4, _LN2HI, _LN2LO = (float(a) for a in (_A0, _A1, _A2, _A3, _A4, _LN2HI, _LN2LO))
_TWO27 = 134217728.0  # 0x1p27
# (1/c, log c) for the 128 subintervals of [0x3fe6000000000000, 2 * that) (z = x 2^-k in there)
_TAB = _f64(
    0x3ff734f0c3e0de9f, 0xbfd7cc7f79e69000, 0x3ff713786a2ce91f, 0xbfd76feec20d0000,
    0x3ff6f26008fab5a0, 0xbfd713e31351e000, 0x3ff6d1a61f138c7d, 0xbfd6b85b38287800,
    0x3ff6b1490bc5b4d1, 0xbfd65d5590807800, 0x3ff69147332f0cba, 0xbfd602d076180000,
    0x3ff6719f18224223, 0xbfd5a8ca86909000, 0x3ff6524f99a51ed9, 0xbfd54f4356035000,
    0x3ff63356aa8f24c4, 0xbfd4f637c36b4000, 0x3ff614b36b9ddc14, 0xbfd49da7fda85000,
    0x3ff5f66452c65c4c, 0xbfd445923989a800, 0x3ff5d867b5912c4f, 0xbfd3edf439b0b800,
    0x3ff5babccb5b90de, 0xbfd396ce448f7000, 0x3ff59d61f2d91a78, 0xbfd3401e17bda000,
    0x3ff5805612465687, 0xbfd2e9e2ef468000, 0x3ff56397cee76bd3, 0xbfd2941b3830e000,
    0x3ff54725e2a77f93, 0xbfd23ec58cda8800, 0x3ff52aff42064583, 0xbfd1e9e129279000,
    0x3ff50f22dbb2bddf, 0xbfd1956d2b48f800, 0x3ff4f38f4734ded7, 0xbfd141679ab9f800,
    0x3ff4d843cfde2840, 0xbfd0edd094ef9800, 0x3ff4bd3ec078a3c8, 0xbfd09aa518db1000,
    0x3ff4a27fc3e0258a, 0xbfd047e65263b800, 0x3ff4880524d48434, 0xbfcfeb224586f000,
    0x3ff46dce1b192d0b, 0xbfcf474a7517b000, 0x3ff453d9d3391854, 0xbfcea4443d103000,
    0x3ff43a2744b4845a, 0xbfce020d44e9b000, 0x3ff420b54115f8fb, 0xbfcd60a22977f000,
    0x3ff40782da3ef4b1, 0xbfccc00104959000, 0x3ff3ee8f5d57fe8f, 0xbfcc202956891000,
    0x3ff3d5d9a00b4ce9, 0xbfcb81178d811000, 0x3ff3bd60c010c12b, 0xbfcae2c9ccd3d000,
    0x3ff3a5242b75dab8, 0xbfca45402e129000, 0x3ff38d22cd9fd002, 0xbfc9a877681df000,
    0x3ff3755bc5847a1c, 0xbfc90c6d69483000, 0x3ff35dce49ad36e2, 0xbfc87120a645c000,
    0x3ff34679984dd440, 0xbfc7d68fb4143000, 0x3ff32f5cceffcb24, 0xbfc73cb83c627000,
    0x3ff3187775a10d49, 0xbfc6a39a9b376000, 0x3ff301c8373e3990, 0xbfc60b3154b7a000,
    0x3ff2eb4ebb95f841, 0xbfc5737d76243000, 0x3ff2d50a0219a9d1, 0xbfc4dc7b8fc23000,
    0x3ff2bef9a8b7fd2a, 0xbfc4462c51d20000, 0x3ff2a91c7a0c1bab, 0xbfc3b08abc830000,
    0x3ff293726014b530, 0xbfc31b996b490000, 0x3ff27dfa5757a1f5, 0xbfc2875490a44000,
    0x3ff268b39b1d3bbf, 0xbfc1f3b9f879a000, 0x3ff2539d838ff5bd, 0xbfc160c8252ca000,
    0x3ff23eb7aac9083b, 0xbfc0ce7f57f72000, 0x3ff22a012ba940b6, 0xbfc03cdc49fea000,
    0x3ff2157996cc4132, 0xbfbf57bdbc4b8000, 0x3ff201201dd2fc9b, 0xbfbe370896404000,
    0x3ff1ecf4494d480b, 0xbfbd17983ef94000, 0x3ff1d8f5528f6569, 0xbfbbf9674ed8a000,
    0x3ff1c52311577e7c, 0xbfbadc79202f6000, 0x3ff1b17c74cb26e9, 0xbfb9c0c3e7288000,
    0x3ff19e010c2c1ab6, 0xbfb8a646b372c000, 0x3ff18ab07bb670bd, 0xbfb78d01b3ac0000,
    0x3ff1778a25efbcb6, 0xbfb674f145380000, 0x3ff1648d354c31da, 0xbfb55e0e6d878000,
    0x3ff151b990275fdd, 0xbfb4485cdea1e000, 0x3ff13f0ea432d24c, 0xbfb333d94d6aa000,
    0x3ff12c8b7210f9da, 0xbfb22079f8c56000, 0x3ff11a3028ecb531, 0xbfb10e4698622000,
    0x3ff107fbda8434af, 0xbfaffa6c6ad20000, 0x3ff0f5ee0f4e6bb3, 0xbfadda8d4a774000,
    0x3ff0e4065d2a9fce, 0xbfabbcece4850000, 0x3ff0d244632ca521, 0xbfa9a1894012c000,
    0x3ff0c0a77ce2981a, 0xbfa788583302c000, 0x3ff0af2f83c636d1, 0xbfa5715e67d68000,
    0x3ff09ddb98a01339, 0xbfa35c8a49658000, 0x3ff08cabaf52e7df, 0xbfa149e364154000,
    0x3ff07b9f2f4e28fb, 0xbf9e72c082eb8000, 0x3ff06ab58c358f19, 0xbf9a55f152528000,
    0x3ff059eea5ecf92c, 0xbf963d62cf818000, 0x3ff04949cdd12c90, 0xbf9228fb8caa0000,
    0x3ff038c6c6f0ada9, 0xbf8c317b20f90000, 0x3ff02865137932a9, 0xbf8419355daa0000,
    0x3ff0182427ea7348, 0xbf781203c2ec0000, 0x3ff008040614b195, 0xbf60040979240000,
    0x3fefe01ff726fa1a, 0x3f6feff384900000, 0x3fefa11cc261ea74, 0x3f87dc41353d0000,
    0x3fef6310b081992e, 0x3f93cea3c4c28000, 0x3fef25f63ceeadcd, 0x3f9b9fc114890000,
    0x3feee9c8039113e7, 0x3fa1b0d8ce110000, 0x3feeae8078cbb1ab, 0x3fa58a5bd001c000,
    0x3fee741aa29d0c9b, 0x3fa95c8340d88000, 0x3fee3a91830a99b5, 0x3fad276aef578000,
    0x3fee01e009609a56, 0x3fb07598e598c000, 0x3fedca01e577bb98, 0x3fb253f5e30d2000,
    0x3fed92f20b7c9103, 0x3fb42edd8b380000, 0x3fed5cac66fb5cce, 0x3fb606598757c000,
    0x3fed272caa5ede9d, 0x3fb7da76356a0000, 0x3fecf26e3e6b2ccd, 0x3fb9ab434e1c6000,
    0x3fecbe6da2a77902, 0x3fbb78c7bb0d6000, 0x3fec8b266d37086d, 0x3fbd431332e72000,
    0x3fec5894bd5d5804, 0x3fbf0a3171de6000, 0x3fec26b533bb9f8c, 0x3fc067152b914000,
    0x3febf583eeece73f, 0x3fc147858292b000, 0x3febc4fd75db96c1, 0x3fc2266ecdca3000,
    0x3feb951e0c864a28, 0x3fc303d7a6c55000, 0x3feb65e2c5ef3e2c, 0x3fc3dfc33c331000,
    0x3feb374867c9888b, 0x3fc4ba366b7a8000, 0x3feb094b211d304a, 0x3fc5933928d1f000,
    0x3feadbe885f2ef7e, 0x3fc66acd2418f000, 0x3feaaf1d31603da2, 0x3fc740f8ec669000,
    0x3fea82e63fd358a7, 0x3fc815c0f51af000, 0x3fea5740ef09738b, 0x3fc8e92954f68000,
    0x3fea2c2a90ab4b27, 0x3fc9bb3602f84000, 0x3fea01a01393f2d1, 0x3fca8bed1c2c0000,
    0x3fe9d79f24db3c1b, 0x3fcb5b515c01d000, 0x3fe9ae2505c7b190, 0x3fcc2967ccbcc000,
    0x3fe9852ef297ce2f, 0x3fccf635d5486000, 0x3fe95cbaeea44b75, 0x3fcdc1bd3446c000,
    0x3fe934c69de74838, 0x3fce8c01b8cfe000, 0x3fe90d4f2f6752e6, 0x3fcf5509c0179000,
    0x3fe8e6528effd79d, 0x3fd00e6c121fb800, 0x3fe8bfce9fcc007c, 0x3fd071b80e93d000,
    0x3fe899c0dabec30e, 0x3fd0d46b9e867000, 0x3fe87427aa2317fb, 0x3fd13687334bd000,
    0x3fe84f00acb39a08, 0x3fd1980d67234800, 0x3fe82a49e8653e55, 0x3fd1f8ffe0cc8000,
    0x3fe8060195f40260, 0x3fd2595fd7636800, 0x3fe7e22563e0a329, 0x3fd2b9300914a800,
    0x3fe7beb377dcb5ad, 0x3fd3187210436000, 0x3fe79baa679725c2, 0x3fd377266dec1800,
    0x3fe77907f2170657, 0x3fd3d54ffbaf3000, 0x3fe756cadbd6130c, 0x3fd432eee32fe000,
).reshape(128, 2)
_INVC = np.ascontiguousarray(_TAB[:, 0])
_LOGC = np.ascontiguousarray(_TAB[:, 1])

_OFF = np.int64(0x3FE6000000000000)
_LO = np.int64(0x3FEE000000000000)  # bits of 1 - 2^-4
_NEAR1 = np.int64(0x0003090000000000)  # bits of 1 + 0x1.09p-4 minus _LO
_EXP_MASK = np.int64(-0x10000000000000)  # 0xfff0000000000000


@njit(inline="always", error_model="numpy")
def _near_one(x):
    """log(x) for 1 - 2^-4 <= x < 1 + 0x1.09p-4, x != 1 (glibc's polynomial path)."""
    r = x - 1.0
    a = _fma(r, _B2, _B1)
    b = _fma(r, _B5, _B4)
    r2 = r * r
    c = _fma(r, _B8, _B7)
    a = _fma(r2, _B3, a)
    b = _fma(r2, _B6, b)
    r3 = r * r2
    c = _fma(r2, _B9, c)
    c = _fma(r3, _B10, c)
    p = _fma(c, r3, b)
    p = _fma(p, r3, a)
    t = _fma(r, _TWO27, r)  # r + r 2^27 (w = r 2^27 with one rounding)
    rhi = _fma(-_TWO27, r, t)  # (r + w) - w
    rhi2 = rhi * rhi
    rlo = r - rhi
    hi = _fma(rhi2, _B0, r)
    lo = _fma(rhi2, _B0, r - hi)
    lo = _fma(_B0 * rlo, r + rhi, lo)
    return hi + _fma(p, r3, lo)


@njit(inline="always", error_model="numpy")
def log(x):
    """Natural logarithm, bit for bit glibc 2.36's ``__ieee754_log_fma``, for any float64 ``x``."""
    ix = _bits(x)
    if np.uint64(ix - _LO) < np.uint64(_NEAR1):
        if x == 1.0:
            return 0.0
        return _near_one(x)
    top = (ix >> np.int64(48)) & np.int64(0xFFFF)
    if np.uint64(top - np.int64(0x10)) > np.uint64(0x7FDF):
        return np.log(x)  # zero, negative, subnormal, inf, NaN: the C library itself
    tmp = ix - _OFF
    i = (tmp >> np.int64(45)) & np.int64(0x7F)
    k = tmp >> np.int64(52)  # arithmetic shift
    z = _from_bits(ix - (tmp & _EXP_MASK))
    kd = float(k)
    w = _fma(kd, _LN2HI, _LOGC[i])
    r = _fma(z, _INVC[i], -1.0)
    p1 = _fma(r, _A2, _A1)
    hi = r + w
    r2 = r * r
    lo = _fma(kd, _LN2LO, (w - hi) + r)
    r3 = r * r2
    q = _fma(r, _A4, _A3)
    lo = _fma(r2, _A0, lo)
    p = _fma(q, r2, p1)
    return _fma(r3, p, lo) + hi
