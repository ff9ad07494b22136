"""Jitted samplers on the sphere S^{d-1} (points on the last axis).

The public classes in :mod:`simkit.sphere` and :mod:`simkit.kernels` validate their arguments
and call these unchecked routines. All routines fill a preallocated ``out`` of shape ``(n, d)``
chunk by chunk (see :mod:`simkit._rng` for the stream layout), in parallel, with no per-sample
Python overhead.

Representation: the polar part of a vMF draw is kept as ``omw = 1 - mu.x`` rather than
``w = mu.x``, so that draws with ``kappa`` up to 1e6 keep full relative precision in
``sqrt(1 - w^2) = sqrt(omw (2 - omw))``.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from simkit._rng import CHUNK, beta, chunk_state, normal, uniform_pos

__all__ = ["vmf_params", "vmf_omw", "tangent_direction", "compose", "compose_at", "sample_vmf", "sample_uniform", "sample_walk", "tangent_step"]


@njit(inline="always")
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


@njit(inline="always")
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
        return -np.log1p(v * par[1]) * par[2]
    m1 = d - 1.0
    b = par[1]
    omx0 = par[2]
    x0 = 1.0 - omx0
    log_1mx0sq = par[3]
    half = 0.5 * m1
    while True:
        z = beta(s, half, half)
        omw = 2.0 * b * z / (1.0 - (1.0 - b) * z)
        t = kappa * (omx0 - omw) + m1 * (np.log(omx0 + x0 * omw) - log_1mx0sq)
        if t >= np.log(uniform_pos(s)):
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
    p = 0
    amax = abs(mus[r, 0])
    for j in range(1, d):
        a = abs(mus[r, j])
        if a > amax:
            amax = a
            p = j
    sigma = -1.0 if mus[r, p] > 0.0 else 1.0
    while True:
        nrm2 = 0.0
        for j in range(d):
            if j != p:
                g = normal(s)
                work[j] = g
                nrm2 += g * g
        if nrm2 > 1e-200:
            break
    sin_t = np.sqrt(max(omw * (2.0 - omw), 0.0))
    scale = sin_t / np.sqrt(nrm2)
    work[p] = 0.0
    dot = 0.0  # u . y: first the coordinates off p (work[p] = 0 here), then the p-th term
    for j in range(d):
        work[j] *= scale
        dot += mus[r, j] * work[j]
    w = 1.0 - omw
    work[p] = sigma * w
    up = mus[r, p] - sigma
    dot += up * work[p]
    c = dot / (1.0 + amax)
    for j in range(d):
        out[i, j] = work[j] - c * mus[r, j]
    out[i, p] = work[p] - c * up


@njit(inline="always")
def compose(s, mu, omw, out_row, work):
    """out_row = w mu + sqrt(1 - w^2) v for one row (see :func:`compose_at`)."""
    d = mu.shape[0]
    compose_at(s, mu.reshape((1, d)), 0, omw, out_row.reshape((1, d)), 0, work)


@njit(parallel=True, cache=True)
def sample_vmf(mus, kappas, key, out):
    """Fill out[i] ~ vMF(mus[i or 0], kappas[i or 0]); mus (m, d) unit rows, kappas (m,), m in {1, n}."""
    n, d = out.shape
    n_chunks = (n + CHUNK - 1) // CHUNK
    per_row = mus.shape[0] > 1
    for c in prange(n_chunks):
        state = np.empty(4, dtype=np.uint64)
        chunk_state(key, c, state)
        work = np.empty(d)
        par = np.empty(5)
        par[0] = -1.0
        for i in range(c * CHUNK, min(n, (c + 1) * CHUNK)):
            r = i if per_row else 0
            if kappas[r] != par[0]:
                vmf_params(d, kappas[r], par)
            omw = vmf_omw(state, d, par)
            compose_at(state, mus, r, omw, out, i, work)


@njit(parallel=True, cache=True)
def sample_uniform(key, out):
    """Fill out with uniform points on S^{d-1}: normalised standard normal vectors."""
    n, d = out.shape
    n_chunks = (n + CHUNK - 1) // CHUNK
    for c in prange(n_chunks):
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
