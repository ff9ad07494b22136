"""Jitted samplers on the sphere S^{d-1} (points on the last axis).

The public classes in :mod:`simkit.distributions.sphere` and :mod:`simkit.distributions.kernels` validate their arguments
and call these unchecked routines. All routines fill a preallocated ``out`` of shape ``(n, d)``
chunk by chunk (see :mod:`simkit._jit.rng` for the stream layout), in parallel, with no per-sample
Python overhead.

Representation: the polar part of a vMF draw is kept as ``omw = 1 - mu.x`` rather than
``w = mu.x``, so that draws with ``kappa`` up to 1e6 keep full relative precision in
``sqrt(1 - w^2) = sqrt(omw (2 - omw))``.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from simkit._jit.log import log
from simkit._jit.log1p import log1p, log1p_into
from simkit._jit.rng import _S11, _TWO53, CHUNK, _next_reg, chunk_state, gamma_reg, normal, normals_into, uniform_pos
from simkit._jit.threads import run_chunks

__all__ = ["VMF_BLOCK", "vmf_params", "vmf_omw", "tangent_direction", "compose", "compose_at", "sample_vmf", "sample_uniform", "sample_walk", "tangent_step"]


# The helpers of the vMF kernel below are ``forceinline``, not ``inline="always"``: each compiles
# once, on its own, and LLVM inlines the machine-level code into the kernel (same operations, same
# bits; no fastmath anywhere here). Numba's IR-level inlining instead re-typed every inlined body
# inside the kernel, which made most of a cold start's compile time (docs/performance.md, "Cold
# start"). They stay plain callable jitted functions for the other samplers.
@njit(forceinline=True)
def vmf_params(d, kappa, par):
    """Per-kappa constants of :func:`vmf_omw`, stored in ``par`` (length 5)."""
    par[0] = kappa
    if d == 3:
        par[1] = np.expm1(-2.0 * kappa)
        par[2] = 1.0 / kappa if kappa >= 1e-12 else 0.0
        return
    m1 = d - 1.0
    b = m1 / (2.0 * kappa + np.sqrt(4.0 * kappa * kappa + m1 * m1))
    omx0 = 2.0 * b / (1.0 + b)  # 1 - x0, formed without cancellation
    par[1] = b
    par[2] = omx0
    par[3] = np.log(omx0) + np.log(2.0 - omx0)  # log(1 - x0^2)


@njit(forceinline=True)
def vmf_omw(s, d, par):
    """One draw of 1 - mu.x for x ~ vMF(mu, kappa) on S^{d-1}; ``par`` from :func:`vmf_params`.

    d == 3: exact inverse CDF, ``1 - w = -log1p((1 - u) expm1(-2 kappa)) (1 / kappa)``.
    Otherwise Wood's (1994) rejection sampler written in terms of 1 - w and 1 - x0 so that no
    difference of nearly equal numbers is formed, even for kappa = 1e6.
    """
    kappa = par[0]
    if d == 3:
        v = 1.0 - uniform_pos(s)  # in [0, 1)
        if kappa < 1e-12:
            return 2.0 * v
        return -log1p(v * par[1]) * par[2]
    # Wood's loop on the state held in registers (gamma_reg): the draws and the arithmetic of
    # beta(s, half, half) and uniform_pos(s), in the same order; the state is loaded and stored
    # once per call instead of at every draw; both logs are simkit._jit.log.log, inline, the C library's
    # bits without a call (which would spill the loop's live registers)
    m1 = d - 1.0
    b = par[1]
    omx0 = par[2]
    x0 = 1.0 - omx0
    log_1mx0sq = par[3]
    half = 0.5 * m1
    s0, s1, s2, s3 = s[0], s[1], s[2], s[3]
    while True:
        ga = 0.0
        gb = 0.0
        for h in range(2):  # ga then gb: one inlined copy of gamma_reg (its compile time is paid per copy)
            g, s0, s1, s2, s3 = gamma_reg(half, s0, s1, s2, s3)
            if h == 0:
                ga = g
            else:
                gb = g
        z = ga / (ga + gb)  # beta(half, half)
        omw = 2.0 * b * z / (1.0 - (1.0 - b) * z)
        t = kappa * (omx0 - omw) + m1 * (log(omx0 + x0 * omw) - log_1mx0sq)
        r, s0, s1, s2, s3 = _next_reg(s0, s1, s2, s3)
        if t >= log((float(np.int64(r >> _S11)) + 1.0) * _TWO53):  # uniform_pos
            s[0], s[1], s[2], s[3] = s0, s1, s2, s3
            return omw


@njit(inline="always")
def _tangent_raw(s, mus, r, work):
    """Fill ``work`` with a standard normal vector with its ``mus[r]``-component removed; return
    |work|^2 (used by :func:`tangent_direction`, the geodesic random walk's step).

    Two passes of Gram--Schmidt (one pass leaves a residual ~1e-9 in d = 2 when the draw is nearly
    parallel to mu); redrawn in the (probability-zero) case of a vanishing residual.
    """
    d = mus.shape[1]
    while True:
        for j in range(d):
            work[j] = normal(s)
        proj = 0.0
        for j in range(d):
            proj += work[j] * mus[r, j]
        for j in range(d):
            work[j] -= proj * mus[r, j]
        proj = 0.0  # second pass (the squared norm is only needed after it)
        for j in range(d):
            proj += work[j] * mus[r, j]
        nrm2 = 0.0
        for j in range(d):
            work[j] -= proj * mus[r, j]
            nrm2 += work[j] * work[j]
        if nrm2 > 1e-200:
            return nrm2


@njit(inline="always")
def tangent_direction(s, mu, work):
    """Fill ``work`` with a uniform unit vector orthogonal to the unit vector ``mu``."""
    d = mu.shape[0]
    inv = 1.0 / np.sqrt(_tangent_raw(s, mu.reshape((1, d)), 0, work))
    for j in range(d):
        work[j] *= inv


@njit(forceinline=True)
def _axis(mus, r):
    """(p, |mu_p|, sigma) for mu = mus[r]: p = argmax |mu_p| (first on ties), sigma = -sign(mu_p)."""
    d = mus.shape[1]
    p = 0
    amax = abs(mus[r, 0])
    for j in range(1, d):
        a = abs(mus[r, j])
        if a > amax:
            amax = a
            p = j
    sigma = -1.0 if mus[r, p] > 0.0 else 1.0
    return p, amax, sigma


@njit(forceinline=True)
def _compose_draw(s, p, work, off, d):
    """The random part of :func:`compose_at`: d - 1 standard normals off coordinate p into
    ``work[off:off + d]`` (redrawn in the probability-zero case of a vanishing norm); returns
    their |g|^2."""
    while True:
        nrm2 = normals_into(s, work, off, d, p)
        if nrm2 > 1e-200:
            return nrm2


@njit(forceinline=True)
def _compose_finish(mus, r, p, amax, sigma, omw, nrm2, work, off, out, i):
    """The deterministic part of :func:`compose_at`, from the normals in ``work[off:off + d]``
    (overwritten)."""
    d = mus.shape[1]
    sin_t = np.sqrt(max(omw * (2.0 - omw), 0.0))
    scale = sin_t / np.sqrt(nrm2)
    work[off + p] = 0.0
    if d == 3:  # the same operations in the same order, unrolled (1.4x faster per d = 3 draw)
        m0, m1, m2 = mus[r, 0], mus[r, 1], mus[r, 2]
        w0, w1, w2 = work[off] * scale, work[off + 1] * scale, work[off + 2] * scale
        dot = 0.0
        dot += m0 * w0
        dot += m1 * w1
        dot += m2 * w2
        wp = sigma * (1.0 - omw)
        up = mus[r, p] - sigma
        dot += up * wp
        c = dot / (1.0 + amax)
        out[i, 0] = w0 - c * m0
        out[i, 1] = w1 - c * m1
        out[i, 2] = w2 - c * m2
        out[i, p] = wp - c * up
        return
    dot = 0.0  # u . y: first the coordinates off p (work[p] = 0 here), then the p-th term
    for j in range(d):
        work[off + j] *= scale
        dot += mus[r, j] * work[off + j]
    w = 1.0 - omw
    wp = sigma * w
    up = mus[r, p] - sigma
    dot += up * wp
    c = dot / (1.0 + amax)
    for j in range(d):
        out[i, j] = work[off + j] - c * mus[r, j]
    out[i, p] = wp - c * up


@njit(forceinline=True)
def _compose_finish2(mus, ra, pa, amaxa, sigmaa, omwa, nrma, rb, pb, amaxb, sigmab, omwb, nrmb,
                     work, offa, offb, out, ia, ib):
    """:func:`_compose_finish` for two rows at once (d > 3): the same operations for each row, in
    the same order, interleaved so that the two rows' sequential sums overlap in the processor."""
    d = mus.shape[1]
    scalea = np.sqrt(max(omwa * (2.0 - omwa), 0.0)) / np.sqrt(nrma)
    scaleb = np.sqrt(max(omwb * (2.0 - omwb), 0.0)) / np.sqrt(nrmb)
    work[offa + pa] = 0.0
    work[offb + pb] = 0.0
    dota = 0.0
    dotb = 0.0
    for j in range(d):
        wa = work[offa + j] * scalea
        wb = work[offb + j] * scaleb
        work[offa + j] = wa
        work[offb + j] = wb
        dota += mus[ra, j] * wa
        dotb += mus[rb, j] * wb
    wpa = sigmaa * (1.0 - omwa)
    wpb = sigmab * (1.0 - omwb)
    upa = mus[ra, pa] - sigmaa
    upb = mus[rb, pb] - sigmab
    dota += upa * wpa
    dotb += upb * wpb
    ca = dota / (1.0 + amaxa)
    cb = dotb / (1.0 + amaxb)
    for j in range(d):
        out[ia, j] = work[offa + j] - ca * mus[ra, j]
        out[ib, j] = work[offb + j] - cb * mus[rb, j]
    out[ia, pa] = wpa - ca * upa
    out[ib, pb] = wpb - cb * upb


@njit(inline="always")
def compose_at(s, mus, r, omw, out, i, work):
    """out[i] = w mu + sqrt(1 - w^2) v with mu = mus[r], w = 1 - omw and v uniform on the unit
    sphere orthogonal to mu.

    The point is built around the axis ``sigma e_p`` (p = argmax |mu_p|, sigma = -sign(mu_p)):
    ``y = sigma w e_p + sin_t g / |g|`` with d - 1 standard normals g off coordinate p, then mapped
    to mu by the Householder reflection ``H = I - u u^T / (1 + |mu_p|)``, ``u = mu - sigma e_p``
    (|u|^2 = 2 (1 + |mu_p|) >= 2: no cancellation). H is orthogonal and H (sigma e_p) = mu, so
    ``mu . x = w`` and ``|x| = 1`` to rounding, and H g/|g| is uniform on the sphere orthogonal to mu.
    One normal and two reductions fewer per draw than Gram--Schmidt against mu.
    """
    d = mus.shape[1]
    p, amax, sigma = _axis(mus, r)
    nrm2 = _compose_draw(s, p, work, 0, d)
    _compose_finish(mus, r, p, amax, sigma, omw, nrm2, work, 0, out, i)


@njit(inline="always")
def compose(s, mu, omw, out_row, work):
    """out_row = w mu + sqrt(1 - w^2) v for one row (see :func:`compose_at`)."""
    d = mu.shape[0]
    compose_at(s, mu.reshape((1, d)), 0, omw, out_row.reshape((1, d)), 0, work)


#: rows per block of :func:`sample_vmf`: the draws of a block are made first, in stream order,
#: then its arithmetic (log1p, square roots, divisions, the reflection), where the rows are
#: independent and the processor overlaps them
VMF_BLOCK = 64


@njit(cache=True)
def _vmf_chunk(mus, kappas, key, out, c):
    """Chunk ``c`` of :func:`sample_vmf` (its rows ``c * CHUNK`` to ``(c + 1) * CHUNK``), from the
    chunk's own stream."""
    n, d = out.shape
    per_row = mus.shape[0] > 1
    state = np.empty(4, dtype=np.uint64)
    chunk_state(key, c, state)
    par = np.empty(5)
    par[0] = -1.0
    g = np.empty(VMF_BLOCK * d)
    bv = np.empty(VMF_BLOCK)  # d == 3: 1 - u of vmf_omw; otherwise omw itself
    bx = np.empty(VMF_BLOCK)  # d == 3: the argument of vmf_omw's log1p
    bl = np.empty(VMF_BLOCK)  # d == 3: its value
    bp1 = np.empty(VMF_BLOCK)
    bp2 = np.empty(VMF_BLOCK)
    bn = np.empty(VMF_BLOCK)
    bax = np.empty(VMF_BLOCK, dtype=np.int64)
    p, amax, sigma = _axis(mus, 0)
    i_end = min(n, (c + 1) * CHUNK)
    for b0 in range(c * CHUNK, i_end, VMF_BLOCK):
        b1 = min(i_end, b0 + VMF_BLOCK)
        for i in range(b0, b1):  # the draws, in stream order
            k = i - b0
            r = i if per_row else 0
            if kappas[r] != par[0]:
                vmf_params(d, kappas[r], par)
            if d == 3:
                bv[k] = 1.0 - uniform_pos(state)  # vmf_omw's draw; its log1p is deferred
                bp1[k] = par[1] if par[0] >= 1e-12 else np.nan
                bp2[k] = par[2]
            else:
                bv[k] = vmf_omw(state, d, par)
            if per_row:
                p, amax, sigma = _axis(mus, r)
            bax[k] = p
            bn[k] = _compose_draw(state, p, g, k * d, d)
        if d == 3:
            for k in range(b1 - b0):
                bx[k] = bv[k] * bp1[k]
            log1p_into(bx, bl, b1 - b0)  # vectorised; the bits of vmf_omw's scalar log1p
            for i in range(b0, b1):  # the arithmetic
                k = i - b0
                r = i if per_row else 0
                if np.isnan(bp1[k]):
                    omw = 2.0 * bv[k]
                else:
                    omw = -bl[k] * bp2[k]
                if per_row:
                    p, amax, sigma = _axis(mus, r)
                _compose_finish(mus, r, p, amax, sigma, omw, bn[k], g, k * d, out, i)
        else:
            i = b0
            while i + 1 < b1:  # two rows at a time
                k = i - b0
                ra = i if per_row else 0
                rb = i + 1 if per_row else 0
                pa, amaxa, sigmaa = p, amax, sigma
                pb, amaxb, sigmab = p, amax, sigma
                if per_row:
                    pa, amaxa, sigmaa = _axis(mus, ra)
                    pb, amaxb, sigmab = _axis(mus, rb)
                _compose_finish2(mus, ra, pa, amaxa, sigmaa, bv[k], bn[k],
                                 rb, pb, amaxb, sigmab, bv[k + 1], bn[k + 1],
                                 g, k * d, (k + 1) * d, out, i, i + 1)
                i += 2
            if i < b1:
                k = i - b0
                r = i if per_row else 0
                if per_row:
                    p, amax, sigma = _axis(mus, r)
                _compose_finish(mus, r, p, amax, sigma, bv[k], bn[k], g, k * d, out, i)


@njit(cache=True, nogil=True)
def _sample_vmf(mus, kappas, key, out, c0, c1):
    """Chunks ``c0`` to ``c1 - 1`` of :func:`sample_vmf`, run on threads by :func:`run_chunks`."""
    for c in range(c0, c1):
        _vmf_chunk(mus, kappas, key, out, c)


def _writable_c(a):
    """``a`` as a writable C-contiguous float64/uint64 array (a copy only when it is not one): one
    compiled specialisation of a kernel serves read-only and strided inputs too."""
    return np.require(a, requirements=("C", "W"))


def sample_vmf(mus, kappas, key, out):
    """Fill out[i] ~ vMF(mus[i or 0], kappas[i or 0]); mus (m, d) unit rows, kappas (m,), m in {1, n}.

    Bit for bit the same as calling ``vmf_omw`` then ``compose_at`` row after row: within a block
    of ``VMF_BLOCK`` rows the random draws are made row after row in that order, and the
    deterministic arithmetic that follows them (the same operations) is done in a second pass.
    Chunks (:func:`_vmf_chunk`) on threads (:func:`run_chunks`: no parallel compile). ``out`` (n, d)
    C-contiguous float64, filled in place.
    """
    run_chunks(_sample_vmf, (out.shape[0] + CHUNK - 1) // CHUNK,
               _writable_c(mus), _writable_c(kappas), _writable_c(key), out)


@njit(cache=True)
def _uniform_chunk(key, out, c):
    """Chunk ``c`` of :func:`sample_uniform` (out of line, as :func:`_vmf_chunk`)."""
    n, d = out.shape
    state = np.empty(4, dtype=np.uint64)
    chunk_state(key, c, state)
    for i in range(c * CHUNK, min(n, (c + 1) * CHUNK)):
        while True:
            nrm2 = 0.0
            for j in range(d):
                g = normal(state)
                out[i, j] = g
                nrm2 += g * g
            if nrm2 > 0.0:
                break
        inv = 1.0 / np.sqrt(nrm2)
        for j in range(d):
            out[i, j] *= inv


@njit(cache=True, nogil=True)
def _sample_uniform(key, out, c0, c1):
    """Chunks ``c0`` to ``c1 - 1`` of :func:`sample_uniform`, run on threads by :func:`run_chunks`."""
    for c in range(c0, c1):
        _uniform_chunk(key, out, c)


def sample_uniform(key, out):
    """Fill out with uniform points on S^{d-1}: normalised standard normal vectors. Chunks on
    threads (:func:`run_chunks`); ``out`` (n, d) C-contiguous float64, filled in place."""
    run_chunks(_sample_uniform, (out.shape[0] + CHUNK - 1) // CHUNK, key, out)


@njit(inline="always")
def tangent_step(s, x, step, work, out_row):
    """Move from unit vector x along a uniform random geodesic by angle ``step``."""
    d = x.shape[0]
    tangent_direction(s, x, work)
    c = np.cos(step)
    sn = np.sin(step)
    nrm2 = 0.0
    for j in range(d):
        v = c * x[j] + sn * work[j]
        out_row[j] = v
        nrm2 += v * v
    # renormalise so that rounding does not accumulate over many steps
    inv = 1.0 / np.sqrt(nrm2)
    for j in range(d):
        out_row[j] *= inv


@njit(parallel=True, cache=True)
def sample_walk(x, step, n_steps, key, out):
    """Geodesic random walk: n_steps moves of angle ``step`` in uniform tangent directions."""
    n, d = out.shape
    n_chunks = (n + CHUNK - 1) // CHUNK
    for c in prange(n_chunks):
        state = np.empty(4, dtype=np.uint64)
        chunk_state(key, c, state)
        work = np.empty(d)
        cur = np.empty(d)
        for i in range(c * CHUNK, min(n, (c + 1) * CHUNK)):
            for j in range(d):
                cur[j] = x[i, j]
            for _ in range(n_steps):
                tangent_step(state, cur, step, work, out[i])
                for j in range(d):
                    cur[j] = out[i, j]
            if n_steps == 0:
                for j in range(d):
                    out[i, j] = cur[j]
