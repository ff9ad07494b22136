"""The float32 mode of ``infonce_losses`` (simkit._jit.infonce32).

* Losses against an independent brute-force float64 log-sum-exp (scipy) at d = 2, 3, 5, 8, 9, 32
  (both code paths: scores in the exponential's loop for d <= SMALL_D, register-blocked products
  for d > SMALL_D), K not a multiple of the tile, grids ending mid-tile, tau = 0.1 and 0.02, with
  a tolerance from a float32 error analysis (below); positives opposite their anchors, so that
  s_j - s0 reaches 2/tau (> 88, the float32 exp's overflow point, at tau = 0.02 and TAU_MIN).
* The kernel's contract with shifts far from the scores (the shift is applied in float64).
* The float32 exponential over its reduced range and over the kernel's whole argument range, in
  ulps of float32 against np.exp in float64; its polynomial in exact arithmetic; the 8-wide (LLVM
  IR) and scalar (Numba) exponentials agree bit for bit.
* Bit-identical output with 1 and 2 Numba threads; the dtype argument.

No test here can fail by chance: the inputs are fixed and every tolerance is a worst-case bound of
float32 rounding, 3.5x or more above the errors measured on these inputs.

Error analysis (eps = 2**-24, unit vectors, tau the temperature). A negative's score s_j = x.y_j/tau
is formed from x/tau and y_j rounded to float32 (2 eps relative each, on sum_c |x_c y_c| / tau <=
1/tau) and d - 1 fused multiply-adds (<= d eps / tau): |error| <= (d + 2) eps / tau. Its argument
s_j - m (|s_j - m| <= max(2/tau + M_STEP, -ARG_MIN)) is rounded once: <= (2/tau + 87) eps. The
exponential: <= 2 ulp = 4 eps relative (measured < 1 ulp below). Each segment's float32 sum adds
<= 32 terms per lane plus the 4-level tree and the head/tail: <= 37 eps relative; the float64 parts
are negligible. So every S_k = sum_{j<=k} e^{s_j - s0} has relative error <= eps ((d + 4)/tau + 128)
(first order), and l_k = log1p(S_k) has |error| <= S_k/(1 + S_k) times that:

    TOL(d, tau) = 1.1 * 2**-24 * ((d + 4) / tau + 128)  nats

(7.5e-6 at d = 3, tau = 0.1; 1.2e-4 at d = 32, tau = 0.02). A kernel that dropped a tile, a lane
(1/16 of a segment's terms) or a segment's head or tail, or used a wrong shift, is off by far more:
``test_detects_a_dropped_term`` shows that removing a single one of 1500 negatives moves the losses
by more than TOL.
"""

from __future__ import annotations

import mpmath
import numba
import numpy as np
import pytest
from scipy.special import logsumexp

from simkit._jit.infonce32 import (ARG_HI, ARG_MIN, EXP32_COEF, TILE_A, TILE_N, exp32_inplace,
                                   prefix_sums32, tile_negatives32)
from simkit.estimators.infonce import TAU_MIN, infonce_losses
# brute force in float64 (l_k = -s0 + logsumexp(s0, s_1..s_k), every score formed explicitly) and unit
# vectors: the helpers of the float64 path's tests
from estimators.test_infonce import _reference_losses, _unit  # tests/ is on sys.path (tests/conftest.py)

EPS = 2.0 ** -24


def tol(d, tau):
    """The float32 error bound of the module docstring, in nats."""
    return 1.1 * EPS * ((d + 4) / tau + 128)


# K = 1500: two full tiles of TILE_N = 512 and a partial one (476 columns, not a multiple of 16);
# B = 150: a full anchor tile of TILE_A = 128 and a partial one of 22 rows (register blocks of
# ROWS_BIG_D = 6 or 8 rows, then single rows, at d > SMALL_D); grid points on both sides of the 16-lane, tile
# and segment boundaries, the last one mid-tile
GRID = [1, 2, 3, 8, 9, 17, 100, 511, 512, 513, 1000, 1024, 1041, 1499]
N_ANCHORS, N_NEG = 150, 1500
assert N_NEG % TILE_N and N_ANCHORS > TILE_A and N_ANCHORS % TILE_A


def _inputs(d, seed):
    rng = np.random.default_rng(seed)
    x = _unit(rng, N_ANCHORS, d)
    xp = _unit(rng, N_ANCHORS, d)
    xp[:10] = x[:10]  # positives equal to their anchors: the largest positive score
    xp[10:20] = -x[10:20]  # opposite: s_j - s0 up to 2/tau (past float32 exp's overflow at tau = 0.02)
    y = _unit(rng, N_NEG, d)
    y[5] = x[0]  # a negative equal to an anchor: the largest negative score
    y[700] = x[12]
    return x, xp, y


@pytest.mark.deterministic(reason="fixed inputs against a worst-case float32 rounding bound, 3.5x or more above the measured error")
@pytest.mark.parametrize("d", [2, 3, 5, 8, 9, 32])
@pytest.mark.parametrize("tau", [0.1, 0.02])
def test_float32_losses_match_brute_force(d, tau):
    x, xp, y = _inputs(d, 4101 + d)
    got = infonce_losses(x, xp, y, tau, GRID, dtype=np.float32)
    want = _reference_losses(x, xp, y, tau, GRID)
    assert got.dtype == np.float64 and got.shape == (N_ANCHORS, len(GRID))
    err = np.abs(got - want)
    assert np.all(np.isfinite(got))
    assert err.max() <= tol(d, tau), f"max error {err.max():.3g} nats > {tol(d, tau):.3g}"
    # the anchors with opposite positives (s_j - s0 up to 2/tau) are among the rows checked, and at
    # tau = 0.02 their arguments do pass float32's exp overflow point
    s_gap = (x[10:20] @ y.T).max(axis=1) / tau - np.sum(x[10:20] * xp[10:20], axis=1) / tau
    assert tau > 0.05 or s_gap.max() > 89.0


@pytest.mark.deterministic(reason="fixed inputs against a worst-case float32 rounding bound")
@pytest.mark.parametrize("d", [3, 32])
def test_float32_losses_at_tau_min(d):
    """TAU_MIN: |s_j - s0| up to 400; every argument handled without overflow or underflow loss."""
    x, xp, y = _inputs(d, 4201 + d)
    got = infonce_losses(x, xp, y, TAU_MIN, GRID, dtype=np.float32)
    want = _reference_losses(x, xp, y, TAU_MIN, GRID)
    assert np.max(np.abs(got - want)) <= tol(d, TAU_MIN)


@pytest.mark.deterministic(reason="fixed inputs against a worst-case float32 rounding bound")
@pytest.mark.parametrize("d", [3, 9, 32])
@pytest.mark.parametrize("n_neg", [1, 7, 16, 21])
def test_float32_losses_few_negatives(d, n_neg):
    """K below one 16-lane block (only the scalar heads and tails) or just above it; B = 7 (one
    register block of rows and a single row at d > SMALL_D)."""
    rng = np.random.default_rng(4151 + 100 * d + n_neg)
    x, xp, y = _unit(rng, 7, d), _unit(rng, 7, d), _unit(rng, n_neg, d)
    ks = sorted({1, max(1, n_neg // 2), n_neg})
    got = infonce_losses(x, xp, y, 0.05, ks, dtype=np.float32)
    assert np.max(np.abs(got - _reference_losses(x, xp, y, 0.05, ks))) <= tol(d, 0.05)


@pytest.mark.deterministic(reason="fixed inputs; the effect of one dropped term is compared with the bound, not with a sampling error")
@pytest.mark.parametrize("d, tau", [(3, 0.1), (32, 0.1), (3, 0.02)])
def test_detects_a_dropped_term(d, tau):
    """The tolerance of the tests above is tight: leaving out one negative (column 1100, inside the
    third tile, in a lane's aligned middle) moves the largest loss difference at K = 1499 by more
    than tol(d, tau), so a kernel that skipped a lane, a tile or a tail would fail them."""
    x, xp, y = _inputs(d, 4101 + d)
    full = _reference_losses(x, xp, y, tau, [1499])
    dropped = _reference_losses(x, xp, np.delete(y, 1100, axis=0), tau, [1498])
    assert np.max(np.abs(full - dropped)) > 3 * tol(d, tau)


@pytest.mark.deterministic(reason="fixed inputs against a worst-case float32 rounding bound")
@pytest.mark.parametrize("d", [3, 32])
@pytest.mark.parametrize("shift_kind", ["zero", "minus_300", "plus_300", "mixed"])
def test_kernel_shift_is_applied_in_float64(d, shift_kind):
    """out[i, g] = sum_{j < k_g} exp(x_i . y_j / tau - c_i) for shifts far outside float32's exp
    range (e^{+-300}): relative error within the bound, for any c_i."""
    rng = np.random.default_rng(4301 + d)
    tau = 0.05
    x, y = _unit(rng, 40, d), _unit(rng, 1100, d)
    c = {"zero": np.zeros(40), "minus_300": np.full(40, -300.0), "plus_300": np.full(40, 300.0),
         "mixed": rng.uniform(-300.0, 300.0, 40)}[shift_kind]
    grid = np.array([1, 5, 16, 600, 1024, 1100])
    out = np.empty((40, grid.size))
    prefix_sums32(x.astype(np.float32), tile_negatives32(y), 1100, 1.0 / tau, c, grid, out)
    s = (x @ y.T) / tau - c[:, None]
    want = np.column_stack([np.exp(logsumexp(s[:, :k], axis=1)) for k in grid])
    assert np.all(np.isfinite(out)) and np.all(out > 0)
    np.testing.assert_allclose(out, want, rtol=tol(d, tau), atol=0)


# ----------------------------------------------------------------------------------------------
# the float32 exponential


def _ulp_error(got32, s):
    """|exp32(s) - exp(s)| in units of the float32 ulp at exp(s) (exp(s) computed in float64)."""
    want = np.exp(s.astype(np.float64))
    ulp = np.spacing(want.astype(np.float32)).astype(np.float64)  # ulp of float32 at the true value
    return np.abs(got32.astype(np.float64) - want) / ulp


def test_exp32_polynomial_in_exact_arithmetic():
    """The degree-6 coefficients (float32) approximate exp on [-ln2/2, ln2/2] to 6.9e-9 relative
    (0.06 ulp) in 50-digit arithmetic: the float32 evaluation, not the fit, sets the accuracy."""
    def horner(coef, r):  # c0 + r (c1 + r (c2 + ...)), coefficients in ascending order
        acc = mpmath.mpf(0)
        for c in reversed(coef):
            acc = acc * r + c
        return acc

    with mpmath.workdps(50):  # local precision (mpmath's polyval warns on descending coefficients)
        coef = [mpmath.mpf(float(np.float32(c))) for c in EXP32_COEF]
        half = float(mpmath.log(2) / 2)
        worst = max(abs(horner(coef, mpmath.mpf(r)) / mpmath.exp(mpmath.mpf(r)) - 1)
                    for r in np.linspace(-half, half, 2001))
    assert worst < 7e-9


def test_exp32_reduced_range_within_one_ulp():
    """Over the reduced range (n = 0: the polynomial alone in float32 Horner evaluation) on 2**21 + 1
    points, and on every float32 in [0.33, ln2/2], the largest error is < 1 ulp of float32."""
    half = np.float32(np.log(2.0) / 2)
    grid = np.linspace(-half, half, (1 << 21) + 1, dtype=np.float32)
    top = np.arange(np.float32(0.33).view(np.int32), half.view(np.int32) + 1, dtype=np.int32).view(np.float32)
    for s in (grid, top, -top):
        got = s.copy()
        exp32_inplace(got)
        assert _ulp_error(got, s).max() < 1.0


def test_exp32_whole_range_within_one_ulp():
    """Over the kernel's arguments [ARG_MIN, ARG_HI] (4e6 points; every n = round(s / ln 2) of the
    range): < 1 ulp of float32, and arguments below ARG_MIN give exp(ARG_MIN) (the clamp)."""
    s = np.linspace(ARG_MIN, ARG_HI, 4_000_001, dtype=np.float32)
    got = s.copy()
    exp32_inplace(got)
    assert _ulp_error(got, s).max() < 1.0
    low = np.array([-88.0, -100.0, -1e4, -np.inf] * 4 + [ARG_MIN], dtype=np.float32)  # 16 + 1: both paths
    exp32_inplace(low)
    np.testing.assert_array_equal(low, np.full(17, low[-1]))
    assert _ulp_error(low[-1:], np.array([ARG_MIN])).max() < 1.0


@pytest.mark.deterministic(reason="equality of two implementations on the same fixed arguments; no tolerance")
def test_exp32_vector_and_scalar_agree_bitwise():
    """exp32_inplace runs the 8-wide LLVM-IR exponential on a[:16 (n // 16)] and the scalar Numba one
    on the rest: the same 15 arguments through both give the same bits (the kernel's aligned
    middles and its segment heads and tails use these two)."""
    rng = np.random.default_rng(4401)
    vals = rng.uniform(ARG_MIN, ARG_HI, 15 * 64).astype(np.float32)
    for blk in vals.reshape(64, 15):
        vec = np.concatenate([blk, blk[:1]])  # 16: all vector
        sca = np.concatenate([np.zeros(16, np.float32), blk])  # 31: the last 15 scalar
        exp32_inplace(vec)
        exp32_inplace(sca)
        np.testing.assert_array_equal(vec[:15].view(np.int32), sca[16:].view(np.int32))


# ----------------------------------------------------------------------------------------------
# determinism and the dtype argument


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="needs at least 2 Numba threads")
@pytest.mark.deterministic(reason="bitwise equality of the same inputs under two thread counts; no tolerance")
@pytest.mark.parametrize("d", [3, 32])
def test_float32_thread_count_invariance(d):
    """Bit-identical losses with 1 and 2 Numba threads (anchor tiles are spread differently)."""
    rng = np.random.default_rng(4501 + d)
    x, xp, y = _unit(rng, 3 * TILE_A + 7, d), _unit(rng, 3 * TILE_A + 7, d), _unit(rng, 1500, d)
    before = numba.get_num_threads()
    try:
        out = {}
        for n in (1, 2):
            numba.set_num_threads(n)
            out[n] = infonce_losses(x, xp, y, 0.05, GRID, dtype=np.float32)
    finally:
        numba.set_num_threads(before)
    np.testing.assert_array_equal(out[1], out[2])


@pytest.fixture(scope="module")
def small():
    rng = np.random.default_rng(4601)
    return _unit(rng, 6, 3), _unit(rng, 6, 3), _unit(rng, 40, 3)


@pytest.mark.deterministic(reason="equality of one computation requested in equivalent spellings; no tolerance")
def test_dtype_spellings(small):
    x, xp, y = small
    ref = infonce_losses(x, xp, y, 0.3, [1, 7, 40], dtype=np.float32)
    for spelling in ("float32", np.dtype(np.float32), "f4"):
        np.testing.assert_array_equal(infonce_losses(x, xp, y, 0.3, [1, 7, 40], dtype=spelling), ref)
    # the default is float64, bit for bit the call without the argument
    f64 = infonce_losses(x, xp, y, 0.3, [1, 7, 40])
    for spelling in (np.float64, "float64", float):
        np.testing.assert_array_equal(infonce_losses(x, xp, y, 0.3, [1, 7, 40], dtype=spelling), f64)
    assert not np.array_equal(ref, f64)  # really another computation


@pytest.mark.deterministic(reason="argument checks on fixed inputs")
@pytest.mark.parametrize("bad", [np.float16, np.int32, "float16", "complex64", np.longdouble, None, True, "single-ish", object])
def test_bad_dtype_rejected(small, bad):
    x, xp, y = small
    with pytest.raises(ValueError, match=r"'dtype' must be np.float64 \(the default\) or np.float32"):
        infonce_losses(x, xp, y, 0.3, [1, 2], dtype=bad)



@pytest.mark.deterministic(reason="a pure function of Numba's target settings")
def test_register_block_follows_the_target_cpu(monkeypatch):
    """8-row register blocks only where the target CPU has AVX-512's 32 vector registers: a named
    CPU's features decide, not the host's (a cache built for a named CPU must not assume more)."""
    from numba.core import config

    from simkit._jit.infonce32 import _vector_registers
    monkeypatch.setattr(config, "CPU_NAME", "skylake-avx512")
    monkeypatch.setattr(config, "CPU_FEATURES", "+avx2,+fma,+avx512f")
    assert _vector_registers() == 32
    monkeypatch.setattr(config, "CPU_FEATURES", "+avx2,+fma,-avx512f")
    assert _vector_registers() == 16
    monkeypatch.setattr(config, "CPU_NAME", "generic")
    monkeypatch.setattr(config, "CPU_FEATURES", None)
    assert _vector_registers() == 16
