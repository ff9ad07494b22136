"""simkit._jit.log: the C library's log bit for bit (deterministic checks), and accurate (mpmath).

The bit-for-bit claim is what lets the inline log replace the C library's in Wood's vMF loop
without changing a committed dataset. It is checked against ``math.log``, which calls the C
library, on arguments that cross every path of the algorithm: each of the 128 table cells at many
exponents, the near-1 polynomial path and both of its edges +- a few ulps, 1 itself, the
subnormals and the special values; the comparison is of bits, so it detects any single rounding
difference. Positive control: the same algorithm with its fused multiply-adds split into a
multiply and an add (each rounded) differs from the C library on a measurable fraction of these
arguments, so a transcription that missed or misplaced one fused multiply-add would fail.
Accuracy is checked independently against mpmath: under one ulp on a sample.

The comparison with the C library only means something where that library is glibc's FMA variant
(``__ieee754_log_fma``, chosen on x86-64 processors with FMA and AVX2); elsewhere it is skipped,
and simkit's log (``llvm.fma``, correctly rounded everywhere) keeps the same bits.
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from numba import njit

from simkit._jit.log import _A0, _A1, _A2, _A3, _A4, _INVC, _LN2HI, _LN2LO, _LOGC, log
from test_log1p import _bit_mismatches, _worst_ulps, glibc_fma

pytestmark = pytest.mark.deterministic(reason="fixed arguments from a fixed seed; an exact property (bits) or a bound the algorithm guarantees")


@njit
def _log_all(x, out):
    for i in range(x.size):
        out[i] = log(x[i])


def _ours(x):
    out = np.empty_like(x)
    _log_all(x, out)
    return out


def _reference(x):
    out = np.empty_like(x)
    for i, v in enumerate(x.tolist()):
        if v != v or v < 0.0:
            out[i] = np.nan
        elif v == 0.0:
            out[i] = -np.inf
        else:
            out[i] = math.log(v)
    return out


def _arguments(seed=20261205, n=100_000):
    """Arguments crossing every path: uniforms (the sampler's log(u)), every table cell at
    exponents from the subnormal edge to the largest, the near-1 path and its edges, specials."""
    rng = np.random.default_rng(seed)
    parts = [
        rng.random(n),  # Wood's acceptance uniform
        rng.uniform(0.05, 1.2, n),  # Wood's log(1 - x0 w) range
        rng.uniform(0.93, 1.07, n),  # the near-1 polynomial path
        np.exp(rng.uniform(-744, 709, n)),  # every exponent, subnormals included
    ]
    # every one of the 128 cells, at a spread of exponents: z in [0x3fe6.., 2 * 0x3fe6..)
    base = np.int64(0x3FE6000000000000)
    cells = base + (np.arange(128, dtype=np.int64) << np.int64(45))
    frac = rng.integers(0, 1 << 45, size=(128, 40), dtype=np.int64)
    z = (cells[:, None] + frac).ravel()
    for k in (-1021, -200, -3, -1, 0, 1, 2, 60, 1000):
        parts.append((z + (np.int64(k) << np.int64(52))).view(np.float64))
    edges = [1.0 - 2.0**-4, 1.0 + float.fromhex("0x1.09p-4"), 1.0, 2.0**-1022, 0.5, 2.0, float.fromhex("0x1.6p-1")]
    for t in edges:
        steps = np.arange(-40, 41)
        parts.append(np.float64(t) + steps * np.spacing(np.float64(t)))
    specials = np.array([0.0, -0.0, -1.0, -np.inf, np.inf, np.nan, 5e-324, 1e-310,
                         np.finfo(float).max, np.finfo(float).tiny, -1e-310])
    return np.concatenate(parts + [specials])


@glibc_fma
def test_log_is_the_c_librarys_bit_for_bit():
    x = _arguments()
    bad = _bit_mismatches(_ours(x), _reference(x))
    assert bad.size == 0, f"{bad.size} of {x.size} differ, first at x = {x[bad[:5]]!r}"


def test_special_values():
    """Host-independent: the values IEEE 754 fixes."""
    got = _ours(np.array([1.0, 0.0, -0.0, np.inf, -1.0, np.nan, -np.inf]))
    assert got[0] == 0.0 and not np.signbit(got[0])
    assert got[1] == -np.inf and got[2] == -np.inf and got[3] == np.inf
    assert np.all(np.isnan(got[4:]))


def test_accuracy_against_mpmath_under_one_ulp():
    """Independent truth: |log(x) - ln x| < 1 ulp of the result (the algorithm's bound is about
    0.52 ulp), the exact value from mpmath at 60 digits; near 1 and away from it."""
    rng = np.random.default_rng(3)
    x = np.concatenate([rng.random(3000), rng.uniform(0.93, 1.07, 3000), np.exp(rng.uniform(-700, 700, 3000))])
    x = x[x != 1.0]
    worst = _worst_ulps(x, _ours(x), mpmath.log)
    assert worst < 1.0, worst


def _log_no_fma(x):
    """Positive control: the table path in plain Python floats with every fused multiply-add split
    into a multiply and an add (each rounded)."""
    ix = int(np.float64(x).view(np.int64))
    tmp = ix - 0x3FE6000000000000
    i = (tmp >> 45) & 0x7F
    k = tmp >> 52
    z = float(np.int64(ix - (tmp & ~((1 << 52) - 1))).view(np.float64))
    kd = float(k)
    invc, logc = float(_INVC[i]), float(_LOGC[i])
    w = kd * _LN2HI + logc
    r = z * invc - 1.0
    hi = r + w
    r2 = r * r
    lo = kd * _LN2LO + ((w - hi) + r)
    r3 = r * r2
    p = (r * _A4 + _A3) * r2 + (r * _A2 + _A1)
    lo = r2 * _A0 + lo
    return (r3 * p + lo) + hi


@glibc_fma
def test_positive_control_without_fma_differs_from_the_c_library():
    rng = np.random.default_rng(5)
    x = np.concatenate([rng.uniform(0.01, 0.93, 50_000), rng.uniform(1.07, 50.0, 50_000)])
    ctl = np.array([_log_no_fma(v) for v in x.tolist()])
    ref = _reference(x)
    n_bad = _bit_mismatches(ctl, ref).size
    # the comparison is sharp enough to see the difference one rounding makes
    assert n_bad >= 10, n_bad
    # and the control computes the same function (without FMA the reduction r = z / c - 1 loses
    # a few bits, so it is within a few ulps, not one): a sharp test, not a different function
    assert np.all(np.abs(ctl - ref) <= 16 * np.spacing(np.abs(ref)))
