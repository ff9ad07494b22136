"""Jitted core of the empirical InfoNCE risk: value and analytic gradient in the parameters.

Embedding families (``fam``; flat parameter vector ``theta``, row-major): 0, linear, ``h = W x``,
``theta = W.ravel()``, W (d, p); 1, two-layer, ``h = W2 tanh(W1 x + b1)``,
``theta = [W1.ravel(), b1, W2.ravel()]``, W1 (m, p), b1 (m,), W2 (d, m); ``phi = h / |h|`` in both.
NumPy references (tests check agreement): :class:`simkit.embeddings.embedding.Embedding`
(``__call__``, ``vjp``) and ``simkit.embeddings.training._reference_value_and_grad`` (whole risk).

Gradient: ``dl/du = ((p_0 - 1) v + sum_j p_j w_j)/tau``, ``dl/dv = (p_0 - 1) u / tau``,
``dl/dw_j = p_j u / tau`` (softmax weights p_j; derivation in docs/design.md,
"simkit.embeddings.training: the gradient"), each pulled back through phi by its family's VJP.

Stability: scores are shifted by their maximum and the loss is ``(max - s_0) + log1p(rest)``
(full relative accuracy when the positive dominates); ``p_0 - 1 = -sum_{j>=1} p_j`` is formed
without cancellation. No exponential exceeds 1, so any tau > 0 is safe.

Speed: the forward pass reads transposed copies of the weights (``aux``), so that every inner loop
is an axpy over a contiguous output (vectorised without reassociating sums); ``exp`` and ``tanh``
(as ``1 - 2/(e^{2a} + 1)``, ~2e-16 absolute) use the vectorised exponential of
:mod:`simkit._jit.infonce` (timings in docs/performance.md).

Reproducibility: fixed chunks of ``CHUNK`` tuples in parallel, each writing its own partial
gradient row, summed in a fixed order by the caller: bit-identical whatever the number of threads.
Errors: ``error_model="numpy"`` (no raising inside a thread); each routine returns per-chunk
minima of ``|h|`` and the caller raises ``ValueError`` if one is at or below the embedding's floor.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from simkit._jit.infonce import vexp_inplace

__all__ = ["CHUNK", "n_chunks", "transposed_weights", "embed_points", "risk_independent",
           "risk_shared_anchors", "risk_shared_negatives"]

CHUNK = 32  # tuples (or shared negatives) per partial-gradient row: fixed, never thread-dependent

_OPTS = dict(cache=True, error_model="numpy", fastmath={"contract"})


def n_chunks(n: int) -> int:
    return (n + CHUNK - 1) // CHUNK


def transposed_weights(fam: int, theta: np.ndarray, p: int, d: int, m: int) -> np.ndarray:
    """``aux`` for the forward pass: W^T (p, d) raveled (linear); [W1^T (p, m), W2^T (m, d)] (two-layer)."""
    if fam == 0:
        return np.ascontiguousarray(theta.reshape(d, p).T).ravel()
    w1 = theta[:m * p].reshape(m, p)
    w2 = theta[m * p + m:].reshape(d, m)
    return np.concatenate([w1.T.ravel(), w2.T.ravel()])


@njit(**_OPTS)
def _forward(fam, theta, aux, p, d, m, x, phi, t, tbuf):
    """phi <- h(x)/|h(x)|, t <- tanh(W1 x + b1) (two-layer); returns |h(x)|."""
    for r in range(d):
        phi[r] = 0.0
    if fam == 0:
        for c in range(p):
            xc = x[c]
            base = c * d
            for r in range(d):
                phi[r] += aux[base + r] * xc
    else:
        for q in range(m):
            t[q] = theta[m * p + q]
        for c in range(p):
            xc = x[c]
            base = c * m
            for q in range(m):
                t[q] += aux[base + q] * xc
        # tanh(a) = 1 - 2 / (e^{2a} + 1): exact limits +-1 (the exponent is clamped), no branch
        vexp_inplace(t, m, 2.0, 0.0, tbuf)
        for q in range(m):
            t[q] = 1.0 - 2.0 / (t[q] + 1.0)
        base = m * p
        for q in range(m):
            tq = t[q]
            b = base + q * d
            for r in range(d):
                phi[r] += aux[b + r] * tq
    nrm = 0.0
    for r in range(d):
        nrm += phi[r] * phi[r]
    nrm = math.sqrt(nrm)
    inv = 1.0 / nrm
    for r in range(d):
        phi[r] *= inv
    return nrm


@njit(**_OPTS)
def _backward(fam, theta, p, d, m, x, phi, nrm, t, g, scale, gacc, gh, gr):
    """gacc += (d phi(x)/d theta)^T (scale * g), in the accumulation layout (see _to_params).

    g_h = (g - (phi.g) phi)/|h| (projection onto the tangent space of the sphere at phi), then
    linear: dW += g_h x^T; two-layer: dW2 += g_h t^T, g_a = (W2^T g_h) * (1 - t^2), dW1 += g_a x^T,
    db1 += g_a.
    """
    dot = 0.0
    for r in range(d):
        dot += phi[r] * g[r]
    f = scale / nrm
    for r in range(d):
        gh[r] = f * (g[r] - dot * phi[r])
    if fam == 0:
        for c in range(p):  # dW^T[c, :] += x_c g_h
            xc = x[c]
            base = c * d
            for r in range(d):
                gacc[base + r] += xc * gh[r]
    else:
        off = m * p + m
        for q in range(m):
            gr[q] = 0.0
        for r in range(d):
            ghr = gh[r]
            base = off + r * m
            for q in range(m):
                gacc[base + q] += ghr * t[q]
                gr[q] += theta[base + q] * ghr
        for q in range(m):
            ga = gr[q] * (1.0 - t[q] * t[q])
            gr[q] = ga
            gacc[m * p + q] += ga
        for c in range(p):  # dW1^T[c, :] += x_c g_a
            xc = x[c]
            base = c * m
            for q in range(m):
                gacc[base + q] += xc * gr[q]


@njit(**_OPTS)
def _to_params(fam, p, d, m, gacc, out):
    """Accumulation layout -> parameter layout (W or W1 transposed back, the rest copied)."""
    if fam == 0:
        for r in range(d):
            for c in range(p):
                out[r * p + c] = gacc[c * d + r]
    else:
        for q in range(m):
            for c in range(p):
                out[q * p + c] = gacc[c * m + q]
        for j in range(m * p, out.shape[0]):
            out[j] = gacc[j]


@njit(**_OPTS)
def _dot(a, b, d):
    acc = 0.0
    for r in range(d):
        acc += a[r] * b[r]
    return acc


@njit(**_OPTS)
def _softmax_terms(e, k, s0, mx, jmax, tbuf):
    """e[j] <- exp(e[j] - mx) in place (e holds the negatives' scores). Returns (rest, negsum):
    rest = sum of exp(s - mx) over the k + 1 terms except the maximum (which is exactly 1),
    negsum = sum over the negatives."""
    vexp_inplace(e, k, 1.0, mx, tbuf)
    negsum = 0.0
    for j in range(k):
        negsum += e[j]
    if jmax < 0:  # the positive is the maximum
        return negsum, negsum
    rest = math.exp(s0 - mx)
    for j in range(k):
        if j != jmax:
            rest += e[j]
    return rest, negsum


@njit(parallel=True, **_OPTS)
def embed_points(fam, theta, aux, p, d, m, y, out_phi, out_norm, out_t, minnorm):
    """out_phi[j] = phi(y[j]), out_norm[j] = |h(y[j])|, out_t[j] = hidden activations (two-layer)."""
    n = y.shape[0]
    mm = max(m, 1)
    for c in prange((n + CHUNK - 1) // CHUNK):
        j0 = c * CHUNK
        j1 = min(n, j0 + CHUNK)
        tbuf = np.empty(mm)
        mn = np.inf
        for j in range(j0, j1):
            out_norm[j] = _forward(fam, theta, aux, p, d, m, y[j], out_phi[j], out_t[j], tbuf)
            mn = min(mn, out_norm[j])
        minnorm[c] = mn


@njit(parallel=True, **_OPTS)
def risk_independent(fam, theta, aux, p, d, m, x, xp, y, inv_tau, wts, want_grad, losses, gparts, minnorm):
    """Per-tuple losses and per-chunk gradient sums; negatives y (n, k, p), one set per tuple.

    losses (n,) <- l_k of each tuple; gparts (n_chunks, n_params) <- sum over the chunk's tuples of
    wts_i d l_i / d theta (if want_grad; otherwise gparts is a dummy (n_chunks, 1) array); minnorm
    (n_chunks,) <- smallest |h| met.
    """
    n = x.shape[0]
    k = y.shape[1]
    mm = max(m, 1)
    npar = theta.shape[0]
    for c in prange((n + CHUNK - 1) // CHUNK):
        i0 = c * CHUNK
        i1 = min(n, i0 + CHUNK)
        u = np.empty(d)
        v = np.empty(d)
        tu = np.empty(mm)
        tv = np.empty(mm)
        w = np.empty((k, d))
        tw = np.empty((k, mm))
        nw = np.empty(k)
        e = np.empty(k)
        tbuf = np.empty(max(k, mm))
        gu = np.empty(d)
        gh = np.empty(d)
        gr = np.empty(mm)
        gacc = np.zeros(npar if want_grad else 1)
        mn = np.inf
        for i in range(i0, i1):
            nu = _forward(fam, theta, aux, p, d, m, x[i], u, tu, tbuf)
            nv = _forward(fam, theta, aux, p, d, m, xp[i], v, tv, tbuf)
            mn = min(mn, min(nu, nv))
            s0 = _dot(u, v, d) * inv_tau
            mx = s0
            jmax = -1
            for j in range(k):
                nw[j] = _forward(fam, theta, aux, p, d, m, y[i, j], w[j], tw[j], tbuf)
                mn = min(mn, nw[j])
                s = _dot(u, w[j], d) * inv_tau
                e[j] = s
                if s > mx:
                    mx = s
                    jmax = j
            rest, negsum = _softmax_terms(e, k, s0, mx, jmax, tbuf)
            losses[i] = (mx - s0) + math.log1p(rest)
            if want_grad:
                inv_total = 1.0 / (1.0 + rest)
                a0 = -negsum * inv_total  # p_0 - 1, no cancellation
                sw = inv_tau * wts[i]
                for r in range(d):
                    gu[r] = a0 * v[r]
                for j in range(k):
                    pj = e[j] * inv_total
                    wj = w[j]
                    for r in range(d):
                        gu[r] += pj * wj[r]
                    # dl/dw_j = p_j u / tau
                    _backward(fam, theta, p, d, m, y[i, j], wj, nw[j], tw[j], u, pj * sw, gacc, gh, gr)
                _backward(fam, theta, p, d, m, x[i], u, nu, tu, gu, sw, gacc, gh, gr)
                _backward(fam, theta, p, d, m, xp[i], v, nv, tv, u, a0 * sw, gacc, gh, gr)
        if want_grad:
            _to_params(fam, p, d, m, gacc, gparts[c])
        minnorm[c] = mn


@njit(parallel=True, **_OPTS)
def risk_shared_anchors(fam, theta, aux, p, d, m, x, xp, wphi, inv_tau, wts, want_grad, losses, lse, uphi,
                        gparts, minnorm):
    """Shared negatives, anchor side: negatives already embedded, wphi (k, d).

    losses (n,); lse (n,) <- log sum_{j=0..k} e^{s_j} (for the softmax weights of the negative
    side); uphi (n, d) <- phi(x_i); gparts (n_chunks, n_params) <- the anchors' and positives'
    gradient contributions.
    """
    n = x.shape[0]
    k = wphi.shape[0]
    mm = max(m, 1)
    npar = theta.shape[0]
    for c in prange((n + CHUNK - 1) // CHUNK):
        i0 = c * CHUNK
        i1 = min(n, i0 + CHUNK)
        v = np.empty(d)
        tu = np.empty(mm)
        tv = np.empty(mm)
        e = np.empty(k)
        tbuf = np.empty(max(k, mm))
        gu = np.empty(d)
        gh = np.empty(d)
        gr = np.empty(mm)
        gacc = np.zeros(npar if want_grad else 1)
        mn = np.inf
        for i in range(i0, i1):
            u = uphi[i]
            nu = _forward(fam, theta, aux, p, d, m, x[i], u, tu, tbuf)
            nv = _forward(fam, theta, aux, p, d, m, xp[i], v, tv, tbuf)
            mn = min(mn, min(nu, nv))
            s0 = _dot(u, v, d) * inv_tau
            mx = s0
            jmax = -1
            for j in range(k):
                s = _dot(u, wphi[j], d) * inv_tau
                e[j] = s
                if s > mx:
                    mx = s
                    jmax = j
            rest, negsum = _softmax_terms(e, k, s0, mx, jmax, tbuf)
            lp = math.log1p(rest)
            losses[i] = (mx - s0) + lp
            lse[i] = mx + lp
            if want_grad:
                inv_total = 1.0 / (1.0 + rest)
                a0 = -negsum * inv_total
                for r in range(d):
                    gu[r] = a0 * v[r]
                for j in range(k):
                    pj = e[j] * inv_total
                    wj = wphi[j]
                    for r in range(d):
                        gu[r] += pj * wj[r]
                sw = inv_tau * wts[i]
                _backward(fam, theta, p, d, m, x[i], u, nu, tu, gu, sw, gacc, gh, gr)
                _backward(fam, theta, p, d, m, xp[i], v, nv, tv, u, a0 * sw, gacc, gh, gr)
        if want_grad:
            _to_params(fam, p, d, m, gacc, gparts[c])
        minnorm[c] = mn


@njit(parallel=True, **_OPTS)
def risk_shared_negatives(fam, theta, p, d, m, y, wphi, wnorm, wt, uphi, lse, inv_tau, wts, gparts):
    """Shared negatives, negative side: gparts (n_chunks(k), n_params) <- for each chunk of
    negatives, sum_j (d phi(y_j)/d theta)^T (sum_i wts_i p_ij u_i / tau), p_ij = e^{s_ij - lse_i}
    (the sum over tuples i in a fixed order)."""
    k = y.shape[0]
    n = uphi.shape[0]
    mm = max(m, 1)
    npar = theta.shape[0]
    for c in prange((k + CHUNK - 1) // CHUNK):
        j0 = c * CHUNK
        j1 = min(k, j0 + CHUNK)
        g = np.empty(d)
        gh = np.empty(d)
        gr = np.empty(mm)
        sc = np.empty(n)
        tbuf = np.empty(n)
        gacc = np.zeros(npar)
        for j in range(j0, j1):
            wj = wphi[j]
            for i in range(n):
                sc[i] = _dot(uphi[i], wj, d) * inv_tau - lse[i]
            vexp_inplace(sc, n, 1.0, 0.0, tbuf)  # p_ij <= 1
            for r in range(d):
                g[r] = 0.0
            for i in range(n):
                pij = sc[i] * wts[i]
                ui = uphi[i]
                for r in range(d):
                    g[r] += pij * ui[r]
            _backward(fam, theta, p, d, m, y[j], wj, wnorm[j], wt[j], g, inv_tau, gacc, gh, gr)
        _to_params(fam, p, d, m, gacc, gparts[c])
