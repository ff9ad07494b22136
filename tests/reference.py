"""Pure-Python / NumPy references for simkit's jitted routines (HOUSE.md: "Keep a small pure-NumPy
reference for every jitted routine; test that both agree"). No numba here.

Covered, with the agreement :mod:`tests.test_reference` checks:

* :mod:`simkit._jit.rng` -- SplitMix64 chunk seeding, xoshiro256** (``next_u64``, ``uniform``,
  ``uniform_pos``), the 256-layer ziggurat ``normal``, Marsaglia--Tsang ``gamma`` and ``beta``:
  **bit for bit**.
* :mod:`simkit._jit.sampling` -- ``vmf_params`` / ``vmf_omw``, ``tangent_direction`` / ``compose``,
  ``tangent_step`` and the chunked samplers ``sample_vmf``, ``sample_uniform``, ``sample_walk``:
  **bit for bit**. The jitted code is compiled without fastmath, so every floating-point operation
  below is the same IEEE operation in the same order; reductions are written as sequential Python
  loops (never ``np.dot`` / ``np.sum``, whose pairwise or BLAS order differs), and transcendental
  functions come from :mod:`math`, which calls the same C library (``exp``, ``log``, ``log1p``,
  ``expm1``, ``pow``, ``sin``, ``cos``) that Numba's LLVM intrinsics resolve to.
* :mod:`simkit._jit.infonce` -- ``prefix_sums``: **to rtol 1e-13, not bitwise**. The jitted
  version uses BLAS (d > 8) or FMA-contracted loops for the scores, a hand-vectorised ``exp``
  (2 ulp) and 8-lane partial sums. The reference here is evaluated in ``np.longdouble`` (80-bit on
  x86-64), so its own error (~K * 1e-19) is negligible and the comparison measures the jitted
  routine's error: relative ~ eps * (|x.y| inv_tau + |shift|) per term from the argument of exp,
  plus ~2 eps from exp and ~sqrt(K) eps from the summation -- below 1e-13 for |argument| <= 100.

RNG state is a list of four Python ints (each < 2**64); every 64-bit operation is masked.
"""

from __future__ import annotations

import math

import numpy as np

from simkit._jit.rng import _ZF, _ZX, CHUNK

__all__ = ["splitmix64", "chunk_state", "next_u64", "uniform", "uniform_pos", "normal", "gamma",
           "beta", "vmf_params", "vmf_omw", "tangent_direction", "compose", "tangent_step",
           "sample_vmf", "sample_uniform", "sample_walk", "prefix_sums"]

MASK = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
M1 = 0xBF58476D1CE4E5B9
M2 = 0x94D049BB133111EB
TWO53 = 1.0 / 9007199254740992.0  # 2**-53

# ziggurat tables as Python floats (the tables themselves are checked in test_reference.py)
ZX = [float(v) for v in _ZX]
ZF = [float(v) for v in _ZF]
ZR = ZX[1]


# --------------------------------------------------------------------------------------------
# RNG layer (simkit._jit.rng)
# --------------------------------------------------------------------------------------------

def splitmix64(z: int) -> int:
    """SplitMix64 finaliser (Steele, Lea & Flood 2014) of a 64-bit word."""
    z = ((z ^ (z >> 30)) * M1) & MASK
    z = ((z ^ (z >> 27)) * M2) & MASK
    return z ^ (z >> 31)


def chunk_state(key, chunk: int) -> list[int]:
    """xoshiro256** state of chunk ``chunk`` for the 2-word ``key`` (uint64 array or ints)."""
    k0, k1 = int(key[0]), int(key[1])
    z = k0 ^ splitmix64((k1 + chunk * GOLDEN) & MASK)
    state = []
    for _ in range(4):
        z = (z + GOLDEN) & MASK
        state.append(splitmix64(z))
    return state


def _rotl(x: int, k: int) -> int:
    return ((x << k) | (x >> (64 - k))) & MASK


def next_u64(s: list[int]) -> int:
    """xoshiro256** (Blackman & Vigna 2018): next output; advances ``s`` in place."""
    result = (_rotl((s[1] * 5) & MASK, 7) * 9) & MASK
    t = (s[1] << 17) & MASK
    s[2] ^= s[0]
    s[3] ^= s[1]
    s[1] ^= s[2]
    s[0] ^= s[3]
    s[2] ^= t
    s[3] = _rotl(s[3], 45)
    return result


def uniform(s: list[int]) -> float:
    """Uniform on [0, 1): top 53 bits times 2**-53 (exact)."""
    return float(next_u64(s) >> 11) * TWO53


def uniform_pos(s: list[int]) -> float:
    """Uniform on (0, 1]."""
    return (float(next_u64(s) >> 11) + 1.0) * TWO53


def normal(s: list[int]) -> float:
    """Standard normal, 256-layer ziggurat (Marsaglia & Tsang 2000), tail by Marsaglia (1964).

    Low 8 bits: layer; bit 8: sign; top 53 bits: the uniform (bits 8..10 are shared, as in
    the jitted version).
    """
    while True:
        u64 = next_u64(s)
        i = u64 & 0xFF
        neg = (u64 >> 8) & 1
        z = (float(u64 >> 11) * TWO53) * ZX[i]
        if z < ZX[i + 1]:
            return -z if neg else z
        if i == 0:
            while True:
                a = -math.log(uniform_pos(s)) / ZR
                b = -math.log(uniform_pos(s))
                if 2.0 * b > a * a:
                    z = ZR + a
                    return -z if neg else z
        if ZF[i + 1] + uniform(s) * (ZF[i] - ZF[i + 1]) < math.exp(-0.5 * z * z):
            return -z if neg else z


def gamma(s: list[int], alpha: float) -> float:
    """Gamma(alpha, 1), Marsaglia & Tsang (2000); alpha < 1 as Gamma(alpha + 1) U^(1/alpha)."""
    boost = 1.0
    if alpha < 1.0:
        boost = uniform_pos(s) ** (1.0 / alpha)
        alpha = alpha + 1.0
    dd = alpha - 1.0 / 3.0
    c = 1.0 / math.sqrt(9.0 * dd)
    while True:
        z = normal(s)
        v = 1.0 + c * z
        if v <= 0.0:
            continue
        v = v * v * v
        u = uniform_pos(s)
        if math.log(u) < 0.5 * z * z + dd - dd * v + dd * math.log(v):
            return dd * v * boost


def beta(s: list[int], a: float, b: float) -> float:
    """Beta(a, b) = G_a / (G_a + G_b)."""
    ga = gamma(s, a)
    gb = gamma(s, b)
    return ga / (ga + gb)


# --------------------------------------------------------------------------------------------
# Samplers (simkit._jit.sampling)
# --------------------------------------------------------------------------------------------

def vmf_params(d: int, kappa: float) -> list[float]:
    """Per-kappa constants [kappa, b, 1 - x0, log(1 - x0^2)] (d != 3) or [kappa, expm1(-2 kappa), 1/kappa]."""
    kappa = float(kappa)
    if d == 3:
        return [kappa, math.expm1(-2.0 * kappa), 1.0 / kappa if kappa >= 1e-12 else 0.0]
    m1 = d - 1.0
    b = m1 / (2.0 * kappa + math.sqrt(4.0 * kappa * kappa + m1 * m1))
    omx0 = 2.0 * b / (1.0 + b)
    return [kappa, b, omx0, math.log(omx0) + math.log(2.0 - omx0)]


def vmf_omw(s: list[int], d: int, par: list[float]) -> float:
    """One draw of 1 - mu.x, x ~ vMF(mu, kappa) on S^{d-1}: inverse CDF for d = 3, else Wood (1994)."""
    kappa = par[0]
    if d == 3:
        v = 1.0 - uniform_pos(s)
        if kappa < 1e-12:
            return 2.0 * v
        return -math.log1p(v * par[1]) * par[2]
    m1 = d - 1.0
    b, omx0, log_1mx0sq = par[1], par[2], par[3]
    x0 = 1.0 - omx0
    half = 0.5 * m1
    while True:
        z = beta(s, half, half)
        omw = 2.0 * b * z / (1.0 - (1.0 - b) * z)
        t = kappa * (omx0 - omw) + m1 * (math.log(omx0 + x0 * omw) - log_1mx0sq)
        if t >= math.log(uniform_pos(s)):
            return omw


def tangent_direction(s: list[int], mu) -> list[float]:
    """Uniform unit vector orthogonal to unit ``mu``: Gaussian, two Gram--Schmidt passes, normalised."""
    mu = [float(m) for m in mu]
    d = len(mu)
    while True:
        work = [normal(s) for _ in range(d)]
        nrm2 = 0.0
        for _ in range(2):
            proj = 0.0
            for j in range(d):
                proj += work[j] * mu[j]
            nrm2 = 0.0
            for j in range(d):
                work[j] -= proj * mu[j]
                nrm2 += work[j] * work[j]
        if nrm2 > 1e-200:
            break
    inv = 1.0 / math.sqrt(nrm2)
    return [w * inv for w in work]


def compose(s: list[int], mu, omw: float) -> list[float]:
    """w mu + sqrt(1 - w^2) v, w = 1 - omw: a point built around sigma e_p (p = first argmax |mu_p|,
    sigma = -sign(mu_p)) from d - 1 normals, reflected onto mu by the Householder map
    I - u u^T / (1 + |mu_p|), u = mu - sigma e_p."""
    mu = [float(m) for m in mu]
    d = len(mu)
    p = max(range(d), key=lambda j: (abs(mu[j]), -j))
    amax = abs(mu[p])
    sigma = -1.0 if mu[p] > 0.0 else 1.0
    while True:
        y = [0.0] * d
        nrm2 = 0.0
        for j in range(d):
            if j != p:
                y[j] = normal(s)
                nrm2 += y[j] * y[j]
        if nrm2 > 1e-200:
            break
    sin_t = math.sqrt(max(omw * (2.0 - omw), 0.0))
    scale = sin_t / math.sqrt(nrm2)
    dot = 0.0
    for j in range(d):
        y[j] *= scale
        dot += mu[j] * y[j]
    y[p] = sigma * (1.0 - omw)
    up = mu[p] - sigma
    dot += up * y[p]
    c = dot / (1.0 + amax)
    x = [y[j] - c * mu[j] for j in range(d)]
    x[p] = y[p] - c * up
    return x


def tangent_step(s: list[int], x, step: float) -> list[float]:
    """Move unit ``x`` by angle ``step`` along a uniform random geodesic, then renormalise."""
    x = [float(v) for v in x]
    work = tangent_direction(s, x)
    c = math.cos(step)
    sn = math.sin(step)
    row = []
    nrm2 = 0.0
    for j in range(len(x)):
        v = c * x[j] + sn * work[j]
        row.append(v)
        nrm2 += v * v
    inv = 1.0 / math.sqrt(nrm2)
    return [v * inv for v in row]


def _chunks(n: int):
    for c in range((n + CHUNK - 1) // CHUNK):
        yield c, range(c * CHUNK, min(n, (c + 1) * CHUNK))


def sample_vmf(mus, kappas, key, n: int, d: int) -> np.ndarray:
    """(n, d) vMF draws; mus (m, d), kappas (m,), m in {1, n}; chunk c uses ``chunk_state(key, c)``."""
    mus = np.asarray(mus, dtype=float)
    kappas = np.asarray(kappas, dtype=float)
    per_row = mus.shape[0] > 1
    out = np.empty((n, d))
    for c, rows in _chunks(n):
        s = chunk_state(key, c)
        par = [-1.0]
        for i in rows:
            r = i if per_row else 0
            if float(kappas[r]) != par[0]:
                par = vmf_params(d, kappas[r])
            omw = vmf_omw(s, d, par)
            out[i] = compose(s, mus[r], omw)
    return out


def sample_uniform(key, n: int, d: int) -> np.ndarray:
    """(n, d) uniform points on S^{d-1}: normalised Gaussian vectors, chunked streams."""
    out = np.empty((n, d))
    for c, rows in _chunks(n):
        s = chunk_state(key, c)
        for i in rows:
            while True:
                g = [normal(s) for _ in range(d)]
                nrm2 = 0.0
                for v in g:
                    nrm2 += v * v
                if nrm2 > 0.0:
                    break
            inv = 1.0 / math.sqrt(nrm2)
            out[i] = [v * inv for v in g]
    return out


def sample_walk(x, step: float, n_steps: int, key) -> np.ndarray:
    """Geodesic random walk from each row of x (n, d): n_steps moves of angle ``step``."""
    x = np.asarray(x, dtype=float)
    n, _ = x.shape
    out = np.empty_like(x)
    for c, rows in _chunks(n):
        s = chunk_state(key, c)
        for i in rows:
            cur = [float(v) for v in x[i]]
            for _ in range(n_steps):
                cur = tangent_step(s, cur, step)
            out[i] = cur
    return out


# --------------------------------------------------------------------------------------------
# InfoNCE prefix sums (simkit._jit.infonce)
# --------------------------------------------------------------------------------------------

def prefix_sums(x, y, inv_tau: float, shift, k_grid) -> np.ndarray:
    """out[i, g] = sum_{j < k_grid[g]} exp(x_i . y_j * inv_tau - shift_i), in extended precision.

    x (B, d), y (K, d) the negatives (untiled), shift (B,), k_grid (G,) increasing, 1 <= k <= K.
    Returns float64 (B, G).
    """
    ld = np.longdouble
    x = np.asarray(x, dtype=ld)
    y = np.asarray(y, dtype=ld)
    shift = np.asarray(shift, dtype=ld)
    k_grid = np.asarray(k_grid, dtype=np.int64)
    e = np.exp((x @ y.T) * ld(inv_tau) - shift[:, None])
    return np.cumsum(e, axis=1)[:, k_grid - 1].astype(np.float64)
