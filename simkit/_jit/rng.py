"""Random-number primitives for simkit's Numba routines.

Every jitted sampler splits its rows into fixed-size chunks (``CHUNK`` rows) and gives each chunk
its own xoshiro256** stream, seeded by SplitMix64 from a 128-bit key drawn once from the caller's
``numpy.random.Generator`` and the chunk index. Chunks are processed with ``prange`` and never share
a stream, so the output is bit-identical for a given ``rng`` state whatever the number of threads
or their scheduling. The generator consumes exactly two 64-bit words of ``rng`` per call.

Algorithms: xoshiro256** (Blackman & Vigna 2018), SplitMix64 seeding (Steele, Lea & Flood 2014),
256-layer ziggurat for the standard normal (Marsaglia & Tsang 2000), Marsaglia--Tsang gamma (2000).
Each has a pure-NumPy counterpart in ``tests/reference.py`` checked for identical output.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["CHUNK", "draw_key", "chunk_state", "next_u64", "uniform", "uniform_pos", "normal",
           "normals_into", "gamma", "gamma_reg", "beta"]

CHUNK = 512  # rows per independent stream; a constant so results never depend on thread count

_U = np.uint64
_GOLDEN = _U(0x9E3779B97F4A7C15)
_M1 = _U(0xBF58476D1CE4E5B9)
_M2 = _U(0x94D049BB133111EB)
_TWO53 = 1.0 / 9007199254740992.0  # 2**-53


# uint64 shift counts and masks as constants: a call ``_U(11)`` inside a jitted function is typed
# at every inlined copy, constants are not (the samplers inline these helpers many times)
_S1, _S5, _S7, _S8, _S9, _S11, _S17 = _U(1), _U(5), _U(7), _U(8), _U(9), _U(11), _U(17)
_S19, _S27, _S30, _S31, _S45, _S57, _LOW8 = _U(19), _U(27), _U(30), _U(31), _U(45), _U(57), _U(0xFF)


def draw_key(rng: np.random.Generator) -> np.ndarray:
    """Two 64-bit words from ``rng`` that key every stream of one sampler call."""
    return rng.integers(0, np.iinfo(np.uint64).max, size=2, dtype=np.uint64, endpoint=True)


@njit(inline="always")
def _rotl7(x):
    return (x << _S7) | (x >> _S57)


@njit(inline="always")
def _rotl45(x):
    return (x << _S45) | (x >> _S19)


@njit(inline="always")
def _splitmix(z):
    z = (z ^ (z >> _S30)) * _M1
    z = (z ^ (z >> _S27)) * _M2
    return z ^ (z >> _S31)


@njit
def chunk_state(key, chunk, state):
    """Seed ``state`` (4 x uint64) for chunk number ``chunk`` of a call keyed by ``key``."""
    z = key[0] ^ _splitmix(key[1] + _U(chunk) * _GOLDEN)
    for j in range(4):
        z = z + _GOLDEN
        state[j] = _splitmix(z)


@njit(inline="always")
def next_u64(s):
    """xoshiro256**: next 64-bit output; advances the 4-word state ``s`` in place."""
    result = _rotl7(s[1] * _S5) * _S9
    t = s[1] << _S17
    s[2] ^= s[0]
    s[3] ^= s[1]
    s[1] ^= s[2]
    s[0] ^= s[3]
    s[2] ^= t
    s[3] = _rotl45(s[3])
    return result


@njit(inline="always")
def uniform(s):
    """Uniform on [0, 1) with 53 random bits."""
    return float(np.int64(next_u64(s) >> _S11)) * _TWO53


@njit(inline="always")
def uniform_pos(s):
    """Uniform on (0, 1] with 53 random bits (safe inside ``log``)."""
    return (float(np.int64(next_u64(s) >> _S11)) + 1.0) * _TWO53


def _ziggurat_tables(n_layers: int = 256):
    """Layer edges x[0..N] and f(x) for the standard-normal ziggurat (Marsaglia & Tsang 2000)."""
    r = 3.6541528853610088
    v = 0.00492867323399
    f = lambda t: np.exp(-0.5 * t * t)  # noqa: E731
    x = np.empty(n_layers + 1)
    x[0] = v / f(r)
    x[1] = r
    for i in range(2, n_layers):
        x[i] = np.sqrt(-2.0 * np.log(v / x[i - 1] + f(x[i - 1])))
    x[n_layers] = 0.0
    return x, f(x)


_ZX, _ZF = _ziggurat_tables()
_ZR = _ZX[1]


@njit(inline="always")
def normal(s):
    """Standard normal by the 256-layer ziggurat."""
    zx = _ZX
    zf = _ZF
    while True:
        u64 = next_u64(s)
        i = np.int64(u64 & _LOW8)
        neg = (u64 >> _S8) & _S1
        u = float(np.int64(u64 >> _S11)) * _TWO53
        z = u * zx[i]
        if z < zx[i + 1]:
            return -z if neg else z
        if i == 0:
            # tail beyond r (Marsaglia 1964)
            while True:
                a = -np.log(uniform_pos(s)) / _ZR
                b = -np.log(uniform_pos(s))
                if 2.0 * b > a * a:
                    z = _ZR + a
                    return -z if neg else z
        if zf[i + 1] + uniform(s) * (zf[i] - zf[i + 1]) < np.exp(-0.5 * z * z):
            return -z if neg else z


@njit(inline="always")
def _next_reg(s0, s1, s2, s3):
    """:func:`next_u64` on a state held in four scalars (registers): (output, new state)."""
    result = _rotl7(s1 * _S5) * _S9
    t = s1 << _S17
    s2 ^= s0
    s3 ^= s1
    s1 ^= s2
    s0 ^= s3
    s2 ^= t
    s3 = _rotl45(s3)
    return result, s0, s1, s2, s3


@njit(forceinline=True)
def _normal_slow(i, z, sgn, s0, s1, s2, s3):
    """The rest of :func:`normal` after a draw missed the ziggurat's fast test (layer ``i``,
    candidate ``z``, sign ``sgn``), on a state held in four scalars: the same draws in the same
    order, redrawing as :func:`normal` does until one is accepted. Returns (z, new state).

    Numba compiles it once, on its own, instead of re-typing it in every IR-inlined copy of the
    drawing loops (:func:`normals_into`, :func:`_normal_reg`); ``forceinline`` lets LLVM inline its
    machine code there, which measured faster than a call (docs/performance.md, "Cold start")."""
    zx = _ZX
    zf = _ZF
    while True:
        if i == 0:  # tail beyond r (Marsaglia 1964)
            while True:
                r, s0, s1, s2, s3 = _next_reg(s0, s1, s2, s3)
                a = -np.log((float(np.int64(r >> _S11)) + 1.0) * _TWO53) / _ZR
                r, s0, s1, s2, s3 = _next_reg(s0, s1, s2, s3)
                b = -np.log((float(np.int64(r >> _S11)) + 1.0) * _TWO53)
                if 2.0 * b > a * a:
                    return (_ZR + a) * sgn, s0, s1, s2, s3
        r, s0, s1, s2, s3 = _next_reg(s0, s1, s2, s3)
        if zf[i + 1] + float(np.int64(r >> _S11)) * _TWO53 * (zf[i] - zf[i + 1]) < np.exp(-0.5 * z * z):
            return z * sgn, s0, s1, s2, s3
        u64, s0, s1, s2, s3 = _next_reg(s0, s1, s2, s3)  # rejected: a fresh draw
        i = np.int64(u64 & _LOW8)
        sgn = 1.0 - 2.0 * float(np.int64((u64 >> _S8) & _S1))
        z = float(np.int64(u64 >> _S11)) * _TWO53 * zx[i]
        if z < zx[i + 1]:
            return z * sgn, s0, s1, s2, s3


@njit(inline="always")
def _normal_reg(s0, s1, s2, s3):
    """:func:`normal` on a state held in four scalars: the same draws, in the same order, with the
    sign applied by a multiplication by +-1 (exact) instead of a branch. Returns (z, new state).
    Only the fast test is inline; the rest is :func:`_normal_slow`."""
    u64, s0, s1, s2, s3 = _next_reg(s0, s1, s2, s3)
    i = np.int64(u64 & _LOW8)
    sgn = 1.0 - 2.0 * float(np.int64((u64 >> _S8) & _S1))
    z = float(np.int64(u64 >> _S11)) * _TWO53 * _ZX[i]
    if z < _ZX[i + 1]:
        return z * sgn, s0, s1, s2, s3
    return _normal_slow(i, z, sgn, s0, s1, s2, s3)


@njit(inline="always")
def normals_into(s, work, off, d, skip):
    """work[off + j] = normal(s) for j = 0, ..., d - 1 except j == skip (pass -1 to skip none), in
    that order; returns the sum of their squares. The draws are those of :func:`normal` in a loop,
    bit for bit, but the state lives in registers for the whole loop instead of being loaded
    from and stored to ``s`` at every draw (the compiler cannot tell ``s`` from ``work``), and the
    fast path of the ziggurat runs in an inner loop with no call (whose registers would be spilled
    around it)."""
    zx = _ZX
    s0, s1, s2, s3 = s[0], s[1], s[2], s[3]
    nrm2 = 0.0
    j = 0
    while j < d:
        while j < d:  # the fast path: no call in this loop
            if j == skip:
                j += 1
                continue
            u64, s0, s1, s2, s3 = _next_reg(s0, s1, s2, s3)
            i = np.int64(u64 & _LOW8)
            sgn = 1.0 - 2.0 * float(np.int64((u64 >> _S8) & _S1))
            z = float(np.int64(u64 >> _S11)) * _TWO53 * zx[i]
            if z < zx[i + 1]:
                g = z * sgn
                work[off + j] = g
                nrm2 += g * g
                j += 1
            else:
                break
        if j < d:
            g, s0, s1, s2, s3 = _normal_slow(i, z, sgn, s0, s1, s2, s3)
            work[off + j] = g
            nrm2 += g * g
            j += 1
    s[0], s[1], s[2], s[3] = s0, s1, s2, s3
    return nrm2


@njit(inline="always")
def _uniform_pos_reg(s0, s1, s2, s3):
    """:func:`uniform_pos` on a state held in four scalars: (u, new state)."""
    r, s0, s1, s2, s3 = _next_reg(s0, s1, s2, s3)
    return (float(np.int64(r >> _S11)) + 1.0) * _TWO53, s0, s1, s2, s3


@njit(inline="always")
def gamma_reg(alpha, s0, s1, s2, s3):
    """:func:`gamma` on a state held in four scalars (registers): the same draws in the same order
    and the same arithmetic, so the same value and the same new state. Returns (g, new state)."""
    boost = 1.0
    if alpha < 1.0:
        u, s0, s1, s2, s3 = _uniform_pos_reg(s0, s1, s2, s3)
        boost = u ** (1.0 / alpha)
        alpha = alpha + 1.0
    dd = alpha - 1.0 / 3.0
    c = 1.0 / np.sqrt(9.0 * dd)
    while True:
        z, s0, s1, s2, s3 = _normal_reg(s0, s1, s2, s3)
        v = 1.0 + c * z
        if v <= 0.0:
            continue
        v = v * v * v
        u, s0, s1, s2, s3 = _uniform_pos_reg(s0, s1, s2, s3)
        z2 = z * z
        if u < 1.0 - 0.0331 * z2 * z2:
            return dd * v * boost, s0, s1, s2, s3
        if np.log(u) < 0.5 * z2 + dd - dd * v + dd * np.log(v):
            return dd * v * boost, s0, s1, s2, s3


@njit
def gamma(s, alpha):
    """Gamma(alpha, 1) by Marsaglia & Tsang (2000); alpha < 1 via Gamma(alpha + 1) U^(1/alpha)."""
    boost = 1.0
    if alpha < 1.0:
        boost = uniform_pos(s) ** (1.0 / alpha)
        alpha = alpha + 1.0
    dd = alpha - 1.0 / 3.0
    c = 1.0 / np.sqrt(9.0 * dd)
    while True:
        z = normal(s)
        v = 1.0 + c * z
        if v <= 0.0:
            continue
        v = v * v * v
        u = uniform_pos(s)
        z2 = z * z
        # Marsaglia & Tsang's squeeze: implies the log test below, so it only skips two logs
        if u < 1.0 - 0.0331 * z2 * z2:
            return dd * v * boost
        if np.log(u) < 0.5 * z2 + dd - dd * v + dd * np.log(v):
            return dd * v * boost


@njit
def beta(s, a, b):
    """Beta(a, b) as G_a / (G_a + G_b)."""
    ga = gamma(s, a)
    gb = gamma(s, b)
    return ga / (ga + gb)
