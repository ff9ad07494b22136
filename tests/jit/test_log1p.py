"""simkit._jit.log1p: the C library's log1p bit for bit (deterministic checks), and accurate (mpmath).

The bit-for-bit claim is what lets the vectorised log1p replace the C library's in the d = 3 vMF
sampler without changing a committed dataset. It is checked against ``math.log1p``, which calls the
C library, on arguments chosen to cross every branch and boundary of the fdlibm algorithm; the
comparison is of bits, so it detects any single rounding difference. Its positive control: the
same algorithm with its fused multiply-adds split into a multiply and an add (glibc's non-FMA
variant) differs from the C library on a measurable fraction of these arguments, so a
transcription that missed or misplaced one fused multiply-add would fail. Accuracy is checked
independently against mpmath: under one ulp on a sample.

The comparison with the C library only means something where that library is glibc's FMA variant
(``__log1p_fma``, chosen on x86-64 processors with FMA); elsewhere it is skipped, and simkit's
log1p (``llvm.fma``, correctly rounded everywhere) keeps the same bits.
"""

from __future__ import annotations

import math
import platform

import mpmath
import numpy as np
import pytest

from simkit._jit.log1p import log1p, log1p_into


def _glibc_fma():
    if platform.system() != "Linux" or platform.machine() != "x86_64" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        with open("/proc/cpuinfo") as fh:
            return " fma " in fh.read()
    except OSError:
        return False


glibc_fma = pytest.mark.skipif(not _glibc_fma(), reason="the C library's log1p is not glibc's FMA variant here")


def _arguments(seed=20261204, n=200_000):
    """Arguments crossing every branch: each range of the algorithm, its thresholds +- a few ulps,
    1 + x near powers of two (the |f| < 2**-20 branch), and the special values."""
    rng = np.random.default_rng(seed)
    parts = [
        -rng.random(n),  # (-1, 0]: the sampler's domain (x = (1 - u) expm1(-2 kappa))
        rng.uniform(-0.2929, 0.41422, n),  # no reduction (k = 0)
        -np.exp(-rng.uniform(0, 45, n)),  # small negative, down past 2**-54
        np.exp(-rng.uniform(0, 45, n)),  # small positive
        np.exp(rng.uniform(-1, 40, n)),  # 0.37 .. 2e17, past 2**53
        np.exp(rng.uniform(40, 709, n // 10)),  # huge
    ]
    thresholds = [0.41421356, -0.29289321, 2.0**-29, -(2.0**-29), 2.0**-54, -(2.0**-54), 2.0**53, -1.0]
    # 1 + x = 2**j (1 + tiny): the |f| < 2**-20 branch, with k > 0 and k < 0
    for j in range(-20, 60):
        thresholds.append(2.0**j - 1.0)
    # the high-fraction split of the reduction (hu = 0x6a09e): 1 + x = 2**j * 1.4142...
    for j in range(-10, 20):
        thresholds.append(2.0**j * math.sqrt(2.0) - 1.0)
    near = []
    for t in thresholds:
        if t == 0.0:
            continue
        v = np.float64(t)
        steps = np.arange(-40, 41)
        near.append(v + steps * np.spacing(v))
        near.append(t * (1.0 + rng.uniform(-1e-6, 1e-6, 2000)))
    specials = np.array([0.0, -0.0, -1.0, -1.5, -np.inf, np.inf, np.nan, 1e-310, -1e-310, 5e-324,
                         np.finfo(float).max, -np.nextafter(1.0, 0.0), np.nextafter(-1.0, -2.0)])
    return np.concatenate(parts + near + [specials])


def _reference(x):
    out = np.empty_like(x)
    for i, v in enumerate(x.tolist()):
        if v < -1.0 or v != v:
            out[i] = np.nan
        elif v == -1.0:
            out[i] = -np.inf
        else:
            out[i] = math.log1p(v)
    return out


def _bit_mismatches(a, b):
    same = (a.view(np.int64) == b.view(np.int64)) | (np.isnan(a) & np.isnan(b))
    return np.flatnonzero(~same)


@glibc_fma
@pytest.mark.deterministic(reason="fixed arguments from a fixed seed; an exact property (bits) or a bound the algorithm guarantees")
def test_vector_log1p_is_the_c_librarys_bit_for_bit():
    x = _arguments()
    out = np.empty_like(x)
    log1p_into(x, out, x.size)
    bad = _bit_mismatches(out, _reference(x))
    assert bad.size == 0, f"{bad.size} of {x.size} differ, first at x = {x[bad[:5]]!r}"


@glibc_fma
@pytest.mark.deterministic(reason="fixed arguments from a fixed seed; an exact property (bits) or a bound the algorithm guarantees")
def test_scalar_log1p_is_the_c_librarys_bit_for_bit():
    x = _arguments(seed=7, n=20_000)
    got = np.array([log1p(v) for v in x])
    bad = _bit_mismatches(got, _reference(x))
    assert bad.size == 0, f"{bad.size} of {x.size} differ, first at x = {x[bad[:5]]!r}"


@pytest.mark.deterministic(reason="fixed arguments from a fixed seed; an exact property (bits) or a bound the algorithm guarantees")
def test_vector_and_scalar_agree_bit_for_bit():
    """Host-independent: the branch-free lanes and the scalar routine are the same function."""
    x = _arguments(seed=11, n=50_000)
    out = np.empty_like(x)
    log1p_into(x, out, x.size)
    got = np.array([log1p(v) for v in x])
    assert _bit_mismatches(out, got).size == 0


def test_partial_length_leaves_the_rest():
    x = np.linspace(-0.9, 0.9, 10)
    out = np.full(10, 7.0)
    log1p_into(x, out, 6)
    assert np.all(out[6:] == 7.0)
    assert np.all(out[:6] == [log1p(v) for v in x[:6]])


@pytest.mark.deterministic(reason="fixed arguments from a fixed seed; an exact property (bits) or a bound the algorithm guarantees")
def test_accuracy_against_mpmath_under_one_ulp():
    """Independent truth: |log1p(x) - log(1 + x)| < 1 ulp of the result (fdlibm's bound), the
    exact value from mpmath at 60 digits."""
    rng = np.random.default_rng(3)
    x = np.concatenate([-rng.random(3000), rng.uniform(-0.29, 0.41, 3000), np.exp(rng.uniform(-40, 40, 3000))])
    out = np.empty_like(x)
    log1p_into(x, out, x.size)
    worst = _worst_ulps(x, out, mpmath.log1p)
    assert worst < 1.0, worst


def _worst_ulps(x, out, exact_fn):
    """Largest |out - exact_fn(x)| in ulps of the result, the exact value from mpmath at 60 digits."""
    worst = 0.0
    with mpmath.workdps(60):
        for v, r in zip(x.tolist(), out.tolist()):
            exact = exact_fn(mpmath.mpf(v))
            err = abs(mpmath.mpf(r) - exact) / mpmath.mpf(np.spacing(abs(r)))
            worst = max(worst, float(err))
    return worst


def _log1p_no_fma(x):
    """Positive control: the same algorithm in plain Python floats, every fused multiply-add split
    into a multiply and an add (each rounded), as glibc's non-FMA variant computes it."""
    if not (-0.2929 < x < 0.41422) or abs(x) < 2.0**-29:
        return math.log1p(x)  # only the unreduced branch is re-implemented
    f = x
    hfsq = (f * 0.5) * f
    s = f / (2.0 + f)
    z = s * s
    lp = (6.666666666666735130e-01, 3.999999999940941908e-01, 2.857142874366239149e-01,
          2.222219843214978396e-01, 1.818357216161805012e-01, 1.531383769920937332e-01,
          1.479819860511658591e-01)
    r2 = z * lp[2] + lp[1]
    r3 = z * lp[4] + lp[3]
    r4 = z * lp[6] + lp[5]
    z2 = z * z
    z4 = z2 * z2
    z6 = z2 * z4
    r = z * lp[0] + z2 * r2
    r = z4 * r3 + r
    r = z6 * r4 + r
    w = (r + hfsq) * s
    return f - (hfsq - w)


@glibc_fma
@pytest.mark.deterministic(reason="fixed arguments from a fixed seed; an exact property (bits) or a bound the algorithm guarantees")
def test_positive_control_without_fma_differs_from_the_c_library():
    rng = np.random.default_rng(5)
    x = rng.uniform(-0.2929, 0.41422, 100_000)
    x = x[np.abs(x) >= 2.0**-29]
    ctl = np.array([_log1p_no_fma(v) for v in x.tolist()])
    ref = _reference(x)
    n_bad = _bit_mismatches(ctl, ref).size
    # the comparison above is sharp enough to see the difference one rounding makes
    assert n_bad >= 10, n_bad
