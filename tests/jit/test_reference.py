"""The jitted routines agree with the pure-Python / NumPy references of ``tests/reference.py``.

RNG layer and samplers: **bit for bit** (``np.testing.assert_array_equal`` on float64 arrays, and
the final xoshiro state, so both consumed the same number of 64-bit words). InfoNCE prefix sums:
rtol 1e-13 against an extended-precision reference (see ``reference.py`` for why not bitwise).
All tests are deterministic (fixed seeds, no statistical tolerance).
"""

from __future__ import annotations

import math

import numba
import numpy as np
import pytest

import reference as ref
from simkit import GeodesicRandomWalk, Uniform, VonMisesFisher
from simkit._jit.infonce import TILE_N, prefix_sums, tile_negatives
from simkit._jit.rng import (_ZF, _ZX, CHUNK, _splitmix, beta, chunk_state, draw_key, gamma, gamma_reg,
                         next_u64, normal, uniform, uniform_pos)
from simkit._jit.sampling import (compose, sample_uniform, sample_vmf, sample_walk,
                              tangent_direction, vmf_omw, vmf_params)

SEED = 20240917


def key_from(*spawn) -> np.ndarray:
    return draw_key(np.random.default_rng([SEED, *spawn]))


def unit(rng: np.random.Generator, d: int) -> np.ndarray:
    g = rng.standard_normal(d)
    return g / np.linalg.norm(g)


def ints(a) -> list[int]:
    return [int(v) for v in a]


# --------------------------------------------------------------------------------------------
# Thin jitted drivers: the routines under test are inline njit functions on a state array.
# --------------------------------------------------------------------------------------------

@numba.njit
def _jit_splitmix(z):
    out = np.empty_like(z)
    for i in range(z.shape[0]):
        out[i] = _splitmix(z[i])
    return out


@numba.njit
def _jit_chunk_state(key, chunk):
    s = np.empty(4, dtype=np.uint64)
    chunk_state(key, chunk, s)
    return s


@numba.njit
def _jit_u64(s, n):
    out = np.empty(n, dtype=np.uint64)
    for i in range(n):
        out[i] = next_u64(s)
    return out


@numba.njit
def _jit_float(s, n, kind, a, b):
    """kind 0 uniform, 1 uniform_pos, 2 normal, 3 gamma(a), 4 beta(a, b)."""
    out = np.empty(n)
    for i in range(n):
        if kind == 0:
            out[i] = uniform(s)
        elif kind == 1:
            out[i] = uniform_pos(s)
        elif kind == 2:
            out[i] = normal(s)
        elif kind == 3:
            out[i] = gamma(s, a)
        else:
            out[i] = beta(s, a, b)
    return out


@numba.njit
def _jit_gamma_reg(s, n, a):
    out = np.empty(n)
    s0, s1, s2, s3 = s[0], s[1], s[2], s[3]
    for i in range(n):
        out[i], s0, s1, s2, s3 = gamma_reg(a, s0, s1, s2, s3)
    s[0], s[1], s[2], s[3] = s0, s1, s2, s3
    return out


@numba.njit
def _jit_vmf_omw(s, d, kappa, n):
    par = np.empty(5)
    vmf_params(d, kappa, par)
    out = np.empty(n)
    for i in range(n):
        out[i] = vmf_omw(s, d, par)
    return out


@numba.njit
def _jit_tangent(s, mu, n):
    out = np.empty((n, mu.shape[0]))
    for i in range(n):
        tangent_direction(s, mu, out[i])
    return out


@numba.njit
def _jit_compose(s, mu, omw):
    n = omw.shape[0]
    out = np.empty((n, mu.shape[0]))
    work = np.empty(mu.shape[0])
    for i in range(n):
        compose(s, mu, omw[i], out[i], work)
    return out


def _state(*spawn) -> np.ndarray:
    return _jit_chunk_state(key_from(*spawn), 3)


_KIND = {"uniform": (0, ref.uniform), "uniform_pos": (1, ref.uniform_pos), "normal": (2, ref.normal)}


# --------------------------------------------------------------------------------------------
# RNG layer
# --------------------------------------------------------------------------------------------

def test_published_vectors():
    """Independent anchors: xoshiro256** from state (1, 2, 3, 4) (Blackman & Vigna's reference
    output, as in rand_xoshiro) and the SplitMix64 sequence from state 0 (Steele et al.)."""
    expected = [11520, 0, 1509978240, 1215971899390074240, 1216172134540287360,
                607988272756665600, 16172922978634559625, 8476171486693032832,
                10595114339597558777, 2904607092377533576]
    s = np.array([1, 2, 3, 4], dtype=np.uint64)
    assert ints(_jit_u64(s, 10)) == expected
    sr = [1, 2, 3, 4]
    assert [ref.next_u64(sr) for _ in range(10)] == expected
    sm = [0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4, 0x06C45D188009454F, 0xF88BB8A8724C81EC]
    zs = [(k * ref.GOLDEN) & ref.MASK for k in range(1, 5)]
    assert [ref.splitmix64(z) for z in zs] == sm
    assert ints(_jit_splitmix(np.array(zs, dtype=np.uint64))) == sm


def test_chunk_state():
    """Seeding of chunk c from the 2-word key, including keys near 2**64 (wrap-around) and
    large chunk indices (c * golden overflows)."""
    keys = [key_from(1), np.array([2**64 - 1, 2**64 - 1], dtype=np.uint64),
            np.array([0, 0], dtype=np.uint64), np.array([1, 2**63], dtype=np.uint64)]
    for key in keys:
        for c in [0, 1, 2, 511, 2**31 + 5, 2**40 + 3]:
            assert ints(_jit_chunk_state(key, c)) == ref.chunk_state(key, c), (ints(key), c)


def test_next_u64():
    s = _state(2)
    sr = ints(s)
    got = _jit_u64(s, 10_000)
    assert ints(got) == [ref.next_u64(sr) for _ in range(10_000)]
    assert ints(s) == sr


@pytest.mark.parametrize("kind", ["uniform", "uniform_pos", "normal"])
def test_uniform_and_normal(kind):
    """10^4 uniforms; 10^5 normals (so that the tail branch, rate ~2.6e-4, and the wedge
    rejections are exercised: both are counted)."""
    code, fn = _KIND[kind]
    n = 100_000 if kind == "normal" else 10_000
    s = _state(3, code)
    sr = ints(s)
    got = _jit_float(s, n, code, 0.0, 0.0)
    want = np.array([fn(sr) for _ in range(n)])
    np.testing.assert_array_equal(got, want)
    assert ints(s) == sr  # same number of words consumed
    if kind == "normal":
        assert np.sum(np.abs(want) > ref.ZR) >= 5  # tail draws
    elif kind == "uniform":
        assert want.min() >= 0.0 and want.max() < 1.0
    else:
        assert want.min() > 0.0 and want.max() <= 1.0


def test_ziggurat_tables():
    """The tables the reference shares with the library are a valid ziggurat (an independent
    check of the constants r, v): f = exp(-x^2/2), decreasing edges, every layer of area v,
    including the top one (which closes at x = 0 only if r and v are consistent), and the base
    strip r f(r) plus the Gaussian tail also of area v."""
    x, f = np.asarray(_ZX), np.asarray(_ZF)
    v, r = 0.00492867323399, x[1]
    assert x.shape == (257,) and x[256] == 0.0
    assert np.all(np.diff(x[1:]) < 0) and x[0] > x[1]
    np.testing.assert_allclose(f, np.exp(-0.5 * x * x), rtol=1e-15)
    layers = x[1:256] * (f[2:257] - f[1:256])  # layer i = 1..255: x[i] (f[i+1] - f[i])
    np.testing.assert_allclose(layers, v, rtol=2e-9)  # top layer: 9.9e-10 (v has 12 digits)
    base = r * f[1] + math.sqrt(math.pi / 2) * math.erfc(r / math.sqrt(2))
    np.testing.assert_allclose(base, v, rtol=1e-11)
    np.testing.assert_allclose(x[0] * f[1], v, rtol=1e-15)


@pytest.mark.parametrize("alpha", [0.5, 1.0, 7.5])
@pytest.mark.deterministic(reason="bit equality of the same seed's draws")
def test_gamma(alpha):
    s = _state(4, int(alpha * 10))
    sr = ints(s)
    got = _jit_float(s, 1000, 3, alpha, 0.0)
    np.testing.assert_array_equal(got, [ref.gamma(sr, alpha) for _ in range(1000)])
    assert ints(s) == sr


@pytest.mark.parametrize("alpha", [0.5, 1.0, 7.5, 63.5])
@pytest.mark.deterministic(reason="bit equality of the same seed's draws")
def test_gamma_reg(alpha):
    """The register-state gamma (Wood's loop uses it) is the reference's, draws and state alike."""
    s = _state(4, int(alpha * 10), 1)
    sr = ints(s)
    got = _jit_gamma_reg(s, 1000, alpha)
    np.testing.assert_array_equal(got, [ref.gamma(sr, alpha) for _ in range(1000)])
    assert ints(s) == sr


@pytest.mark.parametrize("a, b", [(0.5, 0.5), (2.0, 2.0), (7.5, 7.5), (0.3, 4.0)])
def test_beta(a, b):
    s = _state(5, int(a * 10), int(b * 10))
    sr = ints(s)
    got = _jit_float(s, 1000, 4, a, b)
    np.testing.assert_array_equal(got, [ref.beta(sr, a, b) for _ in range(1000)])
    assert ints(s) == sr


# --------------------------------------------------------------------------------------------
# Samplers
# --------------------------------------------------------------------------------------------

DS = [2, 3, 5, 16]
KAPPAS = [0.0, 0.5, 50.0, 1e5]


@pytest.mark.parametrize("d", DS)
@pytest.mark.parametrize("kappa", KAPPAS)
def test_vmf_omw(d, kappa):
    s = _state(6, d, int(kappa))
    sr = ints(s)
    got = _jit_vmf_omw(s, d, kappa, 1000)
    par = ref.vmf_params(d, kappa)
    np.testing.assert_array_equal(got, [ref.vmf_omw(sr, d, par) for _ in range(1000)])
    assert ints(s) == sr


@pytest.mark.parametrize("d", DS)
def test_tangent_direction_and_compose(d):
    """tangent_direction (1000 draws; around a generic mu and around an axis) and compose
    (with 1 - mu.x spanning (0, 2], incl. 1e-12 and exactly 2)."""
    rng = np.random.default_rng([SEED, 7, d])
    for mu in [unit(rng, d), np.eye(d)[d - 1]]:
        s = _state(7, d)
        sr = ints(s)
        got = _jit_tangent(s, mu, 1000)
        np.testing.assert_array_equal(got, [ref.tangent_direction(sr, mu) for _ in range(1000)])
        assert ints(s) == sr
    mu = unit(rng, d)
    omw = np.concatenate([[1e-12, 2.0, 1.0], 2.0 * rng.random(297)])
    s = _state(8, d)
    sr = ints(s)
    got = _jit_compose(s, mu, omw)
    np.testing.assert_array_equal(got, [ref.compose(sr, mu, w) for w in omw])
    assert ints(s) == sr


@pytest.mark.parametrize("d", DS)
@pytest.mark.parametrize("kappa", KAPPAS)
def test_sample_vmf(d, kappa):
    """10^3 draws (two chunks, the second partial) around one generic mean direction."""
    rng = np.random.default_rng([SEED, 9, d])
    mu = unit(rng, d)
    key = key_from(9, d, int(kappa))
    out = np.empty((1000, d))
    sample_vmf(mu[None, :], np.array([kappa]), key, out)
    np.testing.assert_array_equal(out, ref.sample_vmf(mu[None, :], [kappa], key, 1000, d))


@pytest.mark.parametrize("d", [3, 5])
def test_sample_vmf_per_row(d):
    """One (mu, kappa) per row (the kernel / mixture path), kappas in runs so that the cached
    per-kappa constants are both reused and recomputed, also across a chunk boundary."""
    rng = np.random.default_rng([SEED, 10, d])
    n = 2 * CHUNK + 37
    mus = np.stack([unit(rng, d) for _ in range(n)])
    kappas = np.repeat(rng.choice(KAPPAS, size=n // 7 + 1), 7)[:n]
    key = key_from(10, d)
    out = np.empty((n, d))
    sample_vmf(mus, kappas, key, out)
    np.testing.assert_array_equal(out, ref.sample_vmf(mus, kappas, key, n, d))


@pytest.mark.parametrize("d", [2, 3, 16])
def test_sample_uniform(d):
    n = 2 * CHUNK + 37
    key = key_from(11, d)
    out = np.empty((n, d))
    sample_uniform(key, out)
    np.testing.assert_array_equal(out, ref.sample_uniform(key, n, d))


@pytest.mark.parametrize("d, step, n_steps", [(2, 1.5, 1), (3, 0.3, 3), (16, 1e-6, 2),
                                               (5, math.pi, 1), (3, 0.5, 0)])
def test_sample_walk(d, step, n_steps):
    n = 2 * CHUNK + 37
    rng = np.random.default_rng([SEED, 12, d])
    x = np.stack([unit(rng, d) for _ in range(n)])
    key = key_from(12, d, n_steps)
    out = np.empty_like(x)
    sample_walk(x, step, n_steps, key, out)
    np.testing.assert_array_equal(out, ref.sample_walk(x, step, n_steps, key))


def test_public_api_uses_the_reference_stream():
    """rvs / sample draw exactly two words of ``rng`` for the key and then follow the reference
    (the kernel first renormalises its input rows, so the reference gets the renormalised rows)."""
    d, n, seed = 5, CHUNK + 3, 123
    mu = unit(np.random.default_rng([SEED, 13]), d)
    dist = VonMisesFisher(mu, 2.5)
    np.testing.assert_array_equal(
        dist.rvs(n, rng=seed),
        ref.sample_vmf(dist.mu[None, :], [2.5], draw_key(np.random.default_rng(seed)), n, d))
    np.testing.assert_array_equal(
        Uniform(d).rvs(n, rng=seed), ref.sample_uniform(draw_key(np.random.default_rng(seed)), n, d))
    x = Uniform(d).rvs(n, rng=1)
    x_unit = x / np.sqrt(np.sum(x * x, axis=1, keepdims=True))  # as MarkovKernel.sample does
    np.testing.assert_array_equal(
        GeodesicRandomWalk(0.4, 2).sample(x, rng=seed),
        ref.sample_walk(x_unit, 0.4, 2, draw_key(np.random.default_rng(seed))))


# --------------------------------------------------------------------------------------------
# InfoNCE prefix sums
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("d", [3, 32])  # d = 3: explicit loops; d = 32 > SMALL_D: BLAS dgemm
@pytest.mark.parametrize("k, grid", [
    (1300, [1, 7, 100, 511, 512, 513, 1000, 1024, 1299, 1300]),  # K not a multiple of 512
    (1300, [3, 600, 1100]),                                       # stops before the last tile ends
    (1536, [1536]),                                               # whole tiles, single grid point
    (777, [5, 6, 7, 776]),                                        # consecutive grid points
])
def test_prefix_sums(d, k, grid):
    """rtol 1e-13 (hand-vectorised exp, 8-lane sums and BLAS/FMA scores in the jitted version;
    extended-precision reference). B = 45 anchors: one full and one partial anchor tile."""
    rng = np.random.default_rng([SEED, 14, d, k, len(grid)])
    b, inv_tau = 45, 1.0 / 0.07
    x = np.stack([unit(rng, d) for _ in range(b)])
    y = np.stack([unit(rng, d) for _ in range(k)])
    shift = np.einsum("ij,ij->i", x, y[:b]) * inv_tau  # the positive's score, as the estimator does
    k_grid = np.asarray(grid, dtype=np.int64)
    out = np.full((b, k_grid.shape[0]), np.nan)
    prefix_sums(x, tile_negatives(y), k, inv_tau, shift, k_grid, out)
    want = ref.prefix_sums(x, y, inv_tau, shift, k_grid)
    assert TILE_N == 512
    np.testing.assert_allclose(out, want, rtol=1e-13, atol=0)
