"""``simkit.diagnose``: the finite-k InfoNCE bias of a user's own embeddings of a finite data set.

The data distribution is the empirical one, π uniform over the N rows of ``embeddings`` (each row
normalised onto the unit sphere), and the score is ``s(x, y) = φ(x)·φ(y)/τ`` (docs/theory.md §1). The
positive kernel M is one of

* ``labels`` (length N): M(x_i, ·) uniform over the rows with x_i's label, x_i itself included;
* ``positives`` (N, m) row indices: M(x_i, ·) uniform over the m listed rows (with multiplicity);
* ``positive_embeddings`` (N, m, d): m sampled augmented views of each row; M is known only
  through these samples, so m1, CE, c1 and c2 are Monte Carlo over the views (with MCSE).

Quantities (docs/theory.md §2-3), per anchor x and then averaged over anchors:
``Z = mean_j e^{s(x, x_j)}``, ``Z2``, ``Z3`` (2s, 3s), ``m1 = E_{x+~M(x)} e^{s(x,x+)}``,
``CE = E[-s(x, x+) + log Z(x)]``, ``c1 = E[m1/Z - (Z2/Z^2 - 1)/2]`` and ``gap_k = R_k - log k - CE``.

Second-order constant (derived here, checked against the exact curve's limit ``k (k gap_k - c1)``
in tests/test_diagnose.py): with ``W = e^{s(x,y)}/Z``, y ~ π, and ``W0 = e^{s(x,x+)}/Z``,
``gap_k = c1/k + c2/k^2 + O(1/k^3)`` with, per anchor,
``c2 = -E[W0^2]/2 + κ3/3 + σ² E[W0] - 3σ⁴/4``, ``σ² = Z2/Z^2 - 1``, ``κ3 = Z3/Z^3 - 3 Z2/Z^2 + 2``
(the fourth-order Taylor expansion of ``E log(1 + ε + W0/k)``, ε the centred mean of k W's).

Scalability: scores are formed for a block of anchors against all N rows at a time (memory
O(block·N)); the N x N matrix never exists. Anchors are a uniform subsample without replacement
of ``n_anchors`` rows (all rows when N <= n_anchors: then CE, c1, c2, top1 and recall10 are exact
for the label and index kernels and their MCSE is 0); with a subsample, every per-anchor mean
carries the MCSE of simple random sampling with the finite-population correction.
"""

from __future__ import annotations

import datetime as _dt
import math
import sys
import types

import numpy as np
import xarray as xr
from numpy.typing import NDArray
from scipy.special import logsumexp

from simkit.runner.provenance import versions
from simkit._checks import check_int, check_rng, check_scalar
from simkit.stats.analysis import choose_k_min, fit_rate, mean_mcse
from simkit.exact.curve import expected_log_sum_parts

__all__ = ["diagnose", "DEFAULT_K_GRID"]

#: default grid of k for the gap curve: 1, 2, 4, ..., 1024
DEFAULT_K_GRID = tuple(2**i for i in range(11))

_REFERENCES = ("N. Whiteley (2026), Similarity search generalisation in contrastive learning with InfoNCE loss; "
               "simkit docs/theory.md (c1, c2 derived there and here)")


# ----------------------------------------------------------------------------------------------
# validation

def _as_array(name: str, x) -> np.ndarray:
    """``np.asarray`` of anything with ``__array__`` (NumPy, torch, ...) without importing its library."""
    try:
        return np.asarray(x)
    except Exception as exc:  # e.g. a tensor that requires grad, or on a GPU
        raise ValueError(f"'{name}' cannot be converted to a NumPy array ({type(exc).__name__}: "
                         f"{' '.join(str(exc).split())})") from None


def _check_real(name: str, x, ndim: int) -> NDArray[np.float64]:
    arr = _as_array(name, x)
    if arr.dtype.kind not in "iuf":
        raise ValueError(f"'{name}' must be an array of real numbers, got dtype {arr.dtype}")
    if arr.ndim != ndim:
        raise ValueError(f"'{name}' must be a {ndim}-D array, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"'{name}' must be finite (no NaN or inf)")
    return arr


def _normalise(name: str, x: NDArray) -> NDArray[np.float64]:
    """Rows of ``x`` scaled to unit norm, as a new float64 array (the caller's array is not modified)."""
    out = np.array(x, dtype=np.float64)  # one copy (float32 input: the float64 version)
    norm = np.sqrt(np.einsum("...d,...d->...", out, out))
    if np.any(norm == 0):
        where = np.argwhere(norm == 0)[0]
        raise ValueError(f"'{name}' must have no zero rows (a zero row has no direction), "
                         f"found one at index {tuple(int(i) for i in where)}")
    out /= norm[..., None]
    return out


def _check_labels(labels, n: int) -> NDArray[np.intp]:
    arr = _as_array("labels", labels)
    if arr.ndim != 1 or arr.shape[0] != n:
        raise ValueError(f"'labels' must have shape ({n},) (one label per row of 'embeddings'), got shape {arr.shape}")
    if arr.dtype.kind == "f":
        if not np.all(np.isfinite(arr)) or np.any(arr != np.round(arr)):
            raise ValueError("'labels' must be integers or strings, got non-integral floats")
    elif arr.dtype.kind not in "iuUSb":
        raise ValueError(f"'labels' must be integers or strings, got dtype {arr.dtype}")
    _, inverse = np.unique(arr, return_inverse=True)
    return inverse.reshape(-1).astype(np.intp)


def _check_positives(positives, n: int) -> NDArray[np.intp]:
    arr = _as_array("positives", positives)
    if arr.dtype.kind not in "iu":
        raise ValueError(f"'positives' must be an integer array of row indices, got dtype {arr.dtype}")
    if arr.ndim != 2 or arr.shape[0] != n or arr.shape[1] < 1:
        raise ValueError(f"'positives' must have shape ({n}, m) with m >= 1, got shape {arr.shape}")
    if arr.size and (arr.min() < 0 or arr.max() >= n):
        bad = arr.min() if arr.min() < 0 else arr.max()
        raise ValueError(f"'positives' must hold row indices in [0, {n - 1}], got {int(bad)}")
    return arr.astype(np.intp)


def _check_grid(k_grid) -> NDArray[np.int64]:
    arr = _as_array("k_grid", k_grid)
    if (arr.ndim != 1 or arr.size < 4 or arr.dtype.kind not in "iuf" or not np.all(np.isfinite(arr))
            or np.any(arr != np.round(arr)) or np.any(arr < 1) or np.any(np.diff(arr) <= 0)):
        raise ValueError(f"'k_grid' must be at least 4 increasing integers >= 1, got {k_grid!r}")
    if arr.max() > 2**20:
        raise ValueError(f"'k_grid' must be <= 2**20, got {int(arr.max())}")
    return arr.astype(np.int64)


# ----------------------------------------------------------------------------------------------
# helpers

def _srs_mcse(values: NDArray, n_pop: int, within_var: NDArray | None = None) -> tuple[float, float]:
    """Mean of per-anchor values over a simple random sample (without replacement) of n of n_pop
    anchors and its standard error: ``sqrt((1 - f) s^2/n + f mean(within)/n)``, f = n/n_pop, where
    ``within`` is each value's own Monte Carlo variance (0 for exact per-anchor values). At f = 1
    (every anchor) only the within-anchor Monte Carlo error remains."""
    v = np.asarray(values, dtype=float)
    n = v.size
    mean = float(v.mean())
    f = n / n_pop
    s2 = float(v.var(ddof=1)) if n >= 2 else 0.0
    w = 0.0 if within_var is None else float(np.mean(within_var))
    if np.isnan(w):  # within-anchor variance unknown (one view per row): s^2/n bounds the variance above
        var = s2 / n
    else:
        var = max(1.0 - f, 0.0) * s2 / n + f * w / n
    if n < 2 and f < 1.0:
        return mean, float("nan")
    return mean, float(math.sqrt(max(var, 0.0)))


def _k_for_bias(c1: float, c2: float, eps: float) -> float:
    """Smallest integer k >= 1 with |c1/k' + c2/k'^2| <= eps for every k' >= k (NaN if c1 is NaN)."""
    if not np.isfinite(c1):
        return float("nan")
    c2 = 0.0 if not np.isfinite(c2) else c2
    # |c1 k + c2| > eps k^2 <=> eps k^2 - c1 k - c2 < 0 or eps k^2 + c1 k + c2 < 0: largest root
    roots = [0.0]
    for b, c in ((-c1, -c2), (c1, c2)):
        disc = b * b - 4.0 * eps * c
        if disc >= 0:
            roots.append((-b + math.sqrt(disc)) / (2.0 * eps))
    k = max(1, int(math.floor(max(roots))))
    f = lambda kk: abs(c1 / kk + c2 / kk**2)  # noqa: E731
    while k > 1 and f(k - 1) <= eps:  # the floor can overshoot by one
        k -= 1
    while f(k) > eps:
        k += 1
    return float(k)


def _attrs(long_name: str, units: str, description: str) -> dict:
    return {"long_name": long_name, "units": units, "description": description}


# ----------------------------------------------------------------------------------------------
# the diagnosis

def diagnose(embeddings, *, labels=None, positives=None, positive_embeddings=None, tau, k=None, eps=0.01,
             k_grid=DEFAULT_K_GRID, n_anchors: int = 2048, n_tuples: int = 1 << 15, n_exact_anchors: int | None = None,
             n_blocks: int = 16, block_size: int | None = None, rng=0) -> xr.Dataset:
    """How many negatives does InfoNCE need on these embeddings? The C1 bias curve of a finite data set.

    Parameters
    ----------
    embeddings : array_like (NumPy, or anything with ``__array__`` such as a torch tensor), shape (N, d)
        φ(x_i) for the N rows of the data set; each row is normalised onto the unit sphere (a zero
        row is an error). π is uniform over the rows.
    labels : array_like, shape (N,), optional
        Integer or string labels: M(x_i, ·) uniform over the rows with x_i's label (x_i included).
    positives : array_like of int, shape (N, m), optional
        Row indices: M(x_i, ·) uniform over ``positives[i]`` (repeated indices count repeatedly).
    positive_embeddings : array_like, shape (N, m, d), optional
        m sampled positives (augmented views) of each row, embedded and normalised like the rows.
        With m = 1 the views' own sampling error cannot be separated from the spread between
        anchors, and the MCSE uses the latter, an upper bound (m >= 2 gives the exact split).
        Exactly one of ``labels``, ``positives`` and ``positive_embeddings`` must be given.
    tau : float > 0
        Temperature.
    k : int >= 1, optional
        The number of negatives used in training: ``bias_at_k`` is the predicted bias there.
    eps : float > 0
        Tolerated bias in nats for ``k_for_bias``.
    k_grid : sequence of int
        Grid of k for the gap curve (at least 4 increasing integers; default 1, 2, ..., 1024).
    n_anchors : int
        Anchors used for every per-anchor quantity: a uniform subsample without replacement of
        the rows, all rows when N <= n_anchors (default 2048).
    n_tuples : int
        InfoNCE tuples (anchor, positive, k_max negatives) of the Monte Carlo gap, spread evenly over
        the anchors (at least one per anchor).
    n_exact_anchors : int, optional
        Anchors (a random subset of the anchor sample) whose exact gap curve is computed; its cost
        is ~40 microseconds per row per anchor (simkit.exact.curve; ~4 s per anchor at N = 10^5).
        Default ``min(n_anchors, max(3, 2**16 // N))`` (every anchor for N <= 256), and 0 (no exact
        curve; ``gap_exact`` NaN) when one (nodes x N) array of simkit.exact.curve would exceed 32
        MiB (~3.6 such arrays at its peak), nodes ~ 8 (2/tau + 25 + log k_max): at N = 10^5 an
        anchor costs 4-10 s there (measured, 2 shared vCPUs) and the call's traced peak grew from
        0.45 to 1.27 GB with 3 such anchors, beyond the O(N d + block N) memory bound (pass
        ``n_exact_anchors`` to have it anyway). The mean over these anchors uses the per-anchor
        prediction c1/k + c2/k^2, known at every anchor, as a control variate (two-phase sampling)
        wherever that reduces the spread.
    n_blocks : int
        Independent blocks of the Monte Carlo gap (a random partition of the anchor subsample; when
        every row is an anchor, a partition of each anchor's tuples); its MCSE and the slope's
        jackknife interval come from them.
    block_size : int, optional
        Anchors per score block (memory ~ 2 * 8 * block_size * N bytes); default 2**23 // N, >= 1.
    rng : seed or numpy.random.Generator
        Randomness of the anchor subsample, the block partition and the tuples (default seed 0:
        the diagnosis is reproducible).

    Returns
    -------
    xarray.Dataset
        CF-1.11 attributes on every variable. Scalars: ``ce``, ``ce_mcse``, ``c1``, ``c1_mcse``,
        ``c2``, ``c2_mcse``, ``slope``, ``slope_se``, ``slope_ci_low``, ``slope_ci_high``,
        ``slope_p_half`` (H0: slope = -1/2, the 1/√k alternative), ``slope_p_one``, ``slope_k_min``,
        ``bias_at_k`` (predicted), ``gap_at_k``, ``gap_at_k_mcse`` (measured; the user's k joins
        the grid when it is within it), ``k_for_bias``, ``expansion_scale``; for the label and index kernels ``top1``,
        ``recall10`` and their MCSE. On the dimension ``k``: ``gap``, ``gap_mcse`` (Monte Carlo),
        ``gap_exact``, ``gap_exact_mcse`` (exact per anchor; MCSE from anchor subsampling only),
        ``gap_predicted`` (c1/k + c2/k^2), ``risk``, ``risk_mcse`` (Monte Carlo R_k).

    Notes
    -----
    * ``top1``: the share of anchors whose highest-scoring row *other than the anchor itself* is a
      positive (the anchor always scores highest, s = 1/τ, and is itself a positive of the label
      kernel, so counting it would make top1 trivially 1). ``recall10``: the share of anchors with
      at least one positive among their 10 highest-scoring other rows (Recall@10 of metric
      learning). Anchors with no positive other than themselves are left out of both (their
      number is ``attrs['n_anchors_no_other_positive']``).
    * The Monte Carlo gap uses the control variate ``-s(x, x+) + log Z(x)`` (mean CE exactly): per
      tuple ``log((e^{s(x,x+)} + sum_{i<=k} e^{s(x,x_i^-)}) / (k Z(x)))``, k_max negatives drawn
      uniformly with replacement from the rows (the anchor may be among them, as under π) and
      nested over the grid (common random numbers). When every row is an anchor, each block holds
      an equal share of every anchor's tuples (the MCSE is then the Monte Carlo error of the
      tuples alone); with an anchor subsample, the blocks are a random partition of the anchors
      (the MCSE includes anchor sampling, without the finite-population correction: conservative).
    * The slope is the WLS slope of log gap (of log(-gap) if the gap is negative over the whole fit
      range, as when c1 < 0) on log k with a 1/k term (simkit.stats.analysis.fit_rate) over
      k >= ``slope_k_min`` (16 times the expansion scale max(E Z2/Z^2, E m1/Z), or the 4 largest
      grid points if the grid does not reach it: then ``attrs['slope_pre_asymptotic'] = 1``).
    * ``positive_embeddings``: the exact curve treats M(x_i, ·) as uniform over the m given views
      (exact for that empirical kernel); ``gap_mcse`` and ``gap_exact_mcse`` add the views' own
      sampling error to first order in 1/k (its part in E[W0]/k), CE, c1 and c2 carry theirs
      exactly (they are linear in the view averages).
    * ``k_for_bias`` is the smallest k from which on the predicted bias c1/k + c2/k^2 stays within
      eps (point estimates of c1, c2; a prediction of the expansion, reliable beyond the
      expansion scale).
    """
    # ---------------------------------------------------------------- validation
    given = [n for n, v in (("labels", labels), ("positives", positives),
                            ("positive_embeddings", positive_embeddings)) if v is not None]
    if len(given) != 1:
        raise ValueError("exactly one of 'labels', 'positives', 'positive_embeddings' must be given, got "
                         + (", ".join(repr(g) for g in given) if given else "none"))
    kind = given[0]
    emb = _check_real("embeddings", embeddings, 2)
    n, d = emb.shape
    if n < 2 or d < 1:
        raise ValueError(f"'embeddings' must have shape (N, d) with N >= 2 and d >= 1, got {emb.shape}")
    phi = _normalise("embeddings", emb)
    del emb
    tau = check_scalar("tau", tau, low=0, low_inclusive=False)
    eps = check_scalar("eps", eps, low=0, low_inclusive=False)
    if k is not None:
        k = check_int("k", k, low=1)
    ks = _check_grid(k_grid)
    if k is not None and k <= ks[-1] and k not in ks:  # the gap is measured at the user's k too
        ks = np.sort(np.append(ks, k))
    n_anchors = check_int("n_anchors", n_anchors, low=2)
    n_tuples = check_int("n_tuples", n_tuples, low=1)
    n_blocks = check_int("n_blocks", n_blocks, low=3)
    if n_exact_anchors is not None:
        n_exact_anchors = check_int("n_exact_anchors", n_exact_anchors, low=0)
    if block_size is not None:
        block_size = check_int("block_size", block_size, low=1)
    gen = check_rng(rng)
    lab = pos = views = None
    if kind == "labels":
        lab = _check_labels(labels, n)
        order = np.argsort(lab, kind="stable")
        counts = np.bincount(lab)
        starts = np.concatenate([[0], np.cumsum(counts)])
        members = lambda c: order[starts[c]:starts[c + 1]]  # noqa: E731
    elif kind == "positives":
        pos = _check_positives(positives, n)
    else:
        v = _check_real("positive_embeddings", positive_embeddings, 3)
        if v.shape[0] != n or v.shape[1] < 1 or v.shape[2] != d:
            raise ValueError(f"'positive_embeddings' must have shape ({n}, m, {d}) with m >= 1, got shape {v.shape}")
        views = _normalise("positive_embeddings", v)
        del v

    # ---------------------------------------------------------------- anchors and blocks
    n_a = min(n_anchors, n)
    anchors = np.arange(n) if n_a == n else np.sort(gen.choice(n, size=n_a, replace=False))
    if n_exact_anchors is None:
        # simkit.exact.curve holds (nodes x N) arrays per anchor, nodes ~ 8 (score range + 25 + log k_max):
        # (~3.6 of them at its peak): by default only while one stays within 32 MiB (N <~ 12,500 at tau = 0.2)
        nodes = 8.0 * (2.0 / tau + 25.0 + math.log(float(ks[-1])))
        n_ex = min(n_a, max(3, (1 << 16) // n)) if n * nodes <= (1 << 22) else 0
    else:
        n_ex = min(n_exact_anchors, n_a)
    exact_set = np.zeros(n_a, dtype=bool)
    exact_set[gen.choice(n_a, size=n_ex, replace=False)] = True
    census = n_a == n
    if census:  # every row is an anchor: the blocks partition the tuples of each anchor
        per_anchor = max(n_blocks, -(-n_tuples // n_a))
        block_of = None
    else:  # a random partition of the anchor subsample
        n_blocks = min(n_blocks, n_a)
        block_of = gen.permutation(np.arange(n_a) % n_blocks)
        per_anchor = max(1, -(-n_tuples // n_a))
    k_max = int(ks[-1])
    bs = block_size or max(1, (1 << 23) // n)
    log_n = math.log(n)
    seg_edges = np.concatenate([[0], ks])  # negatives [edges[g], edges[g+1]) complete grid point g

    # per-anchor outputs
    log_z = np.empty(n_a)
    ratio2 = np.empty(n_a)  # Z2/Z^2
    ratio3 = np.empty(n_a)  # Z3/Z^3
    mu0 = np.empty(n_a)  # m1/Z (estimate for views)
    nu0 = np.empty(n_a)  # E W0^2
    ms = np.empty(n_a)  # E s(x, x+)
    var_mu0 = np.zeros(n_a)  # within-anchor MC variance of the view means (views only)
    var_nu0 = np.zeros(n_a)
    var_ms = np.zeros(n_a)
    cov_mu_nu = np.zeros(n_a)
    top1 = np.full(n_a, np.nan)
    rec10 = np.full(n_a, np.nan)
    gap_mc = np.zeros((n_blocks, ks.size))
    risk_mc = np.zeros((n_blocks, ks.size))
    cnt_mc = np.zeros(n_blocks)
    gap_ex = np.full((n_a, ks.size), np.nan)
    n_top = min(10, n - 1)

    for b0 in range(0, n_a, bs):
        idx = anchors[b0:b0 + bs]
        rows = np.arange(idx.size)
        s = phi[idx] @ phi.T
        s /= tau  # (B, N) scores
        smax = s.max(axis=1)  # = s(x, x) = 1/tau up to rounding
        e = np.subtract(s, smax[:, None])
        np.exp(e, out=e)
        z1 = e.sum(axis=1)
        z2 = np.einsum("ij,ij->i", e, e)  # no (B, N) temporaries
        z3 = np.einsum("ij,ij,ij->i", e, e, e)
        log_z[b0:b0 + idx.size] = np.log(z1) + smax - log_n
        ratio2[b0:b0 + idx.size] = n * z2 / z1**2
        ratio3[b0:b0 + idx.size] = n * n * z3 / z1**3
        zbar = z1 / n  # Z e^{-smax}
        # positives: scores, weights (for the exact curve) and W0 moments
        pos_scores, pos_weights = [], []
        for r, a in enumerate(idx):
            i = b0 + r
            if kind == "labels":
                mem = members(lab[a])
                ps, pw = s[r, mem], np.full(mem.size, 1.0 / mem.size)
                w0 = e[r, mem] / zbar[r]
            elif kind == "positives":
                ps, pw = s[r, pos[a]], np.full(pos.shape[1], 1.0 / pos.shape[1])
                w0 = e[r, pos[a]] / zbar[r]
            else:
                ps = (views[a] @ phi[a]) / tau
                pw = np.full(ps.size, 1.0 / ps.size)
                w0 = np.exp(ps - smax[r]) / zbar[r]
                m = ps.size
                if m >= 2:
                    var_mu0[i] = w0.var(ddof=1) / m
                    var_nu0[i] = (w0 * w0).var(ddof=1) / m
                    var_ms[i] = ps.var(ddof=1) / m
                    cov_mu_nu[i] = np.cov(w0, w0 * w0, ddof=1)[0, 1] / m
                else:
                    var_mu0[i] = var_nu0[i] = var_ms[i] = np.nan
            mu0[i] = w0.mean()
            nu0[i] = (w0 * w0).mean()
            ms[i] = ps.mean()
            pos_scores.append(ps)
            pos_weights.append(pw)
        # exact gap curve of the chosen anchors
        sel = np.flatnonzero(exact_set[b0:b0 + idx.size])
        if sel.size:
            width = max(pos_scores[r].size for r in sel)
            p_s = np.zeros((sel.size, width))
            p_w = np.zeros((sel.size, width))
            for j, r in enumerate(sel):
                p_s[j, :pos_scores[r].size] = pos_scores[r]
                p_s[j, pos_scores[r].size:] = pos_scores[r][0]  # zero-weight padding
                p_w[j, :pos_weights[r].size] = pos_weights[r]
            # gap_k = E log(Y_k / (k Z)) = log(E Y_k / (k Z)) + E log(Y_k / E Y_k)
            #       = log1p(m1 / (k Z)) + centred (no cancellation between large terms)
            _, centred = expected_log_sum_parts(p_s, p_w, s[sel], np.full(n, 1.0 / n), ks)
            gap_ex[b0 + sel] = np.log1p(mu0[b0 + sel][:, None] / ks[None, :]) + centred
        # Monte Carlo InfoNCE tuples, in chunks of at most ~2**21 negative scores (anchors x reps x k_max)
        rb = max(1, (1 << 21) // k_max)
        for q0 in range(0, idx.size, rb):
            q = slice(q0, min(idx.size, q0 + rb))
            nq = q.stop - q.start
            chunk = max(1, (1 << 21) // (nq * k_max))
            for r0 in range(0, per_anchor, chunk):
                nr = min(chunk, per_anchor - r0)
                neg = gen.integers(0, n, size=(nq, nr * k_max), dtype=np.int32 if n < 2**31 else np.int64)
                s_neg = np.take_along_axis(s[q], neg, axis=1).reshape(nq, nr, k_max)
                del neg
                s_pos = np.empty((nq, nr))
                for r in range(nq):
                    ps = pos_scores[q0 + r]
                    s_pos[r] = ps[gen.integers(0, ps.size, size=nr)]  # the weights are uniform
                sh = smax[q, None, None]
                with np.errstate(divide="ignore"):  # log 0 is caught below
                    cum = np.log(np.cumsum(np.add.reduceat(np.exp(s_neg - sh), seg_edges[:-1], axis=2), axis=2)) + sh
                if not np.all(np.isfinite(cum)):  # e^{s - s_max} underflowed (tau < ~0.003): segment-wise
                    seg = np.stack([logsumexp(s_neg[:, :, seg_edges[g]:seg_edges[g + 1]], axis=2)
                                    for g in range(ks.size)], axis=2)
                    cum = np.logaddexp.accumulate(seg, axis=2)
                del s_neg
                lse = np.logaddexp(cum, s_pos[:, :, None])  # log(e^{s+} + sum_{i<=k} e^{s_i}), (nq, nr, K)
                g_t = lse - np.log(ks)[None, None, :] - log_z[b0 + q0:b0 + q0 + nq][:, None, None]
                l_t = lse - s_pos[:, :, None]
                if census:  # blocks of tuples: block of tuple rep j is j mod n_blocks
                    blk = np.broadcast_to((r0 + np.arange(nr)) % n_blocks, (nq, nr))
                else:  # blocks of anchors
                    blk = np.broadcast_to(block_of[b0 + q0:b0 + q0 + nq, None], (nq, nr))
                np.add.at(gap_mc, blk.ravel(), g_t.reshape(-1, ks.size))
                np.add.at(risk_mc, blk.ravel(), l_t.reshape(-1, ks.size))
                np.add.at(cnt_mc, blk.ravel(), 1.0)
        # retrieval agreement (label and index kernels)
        if kind != "positive_embeddings":
            s[rows, idx] = -np.inf  # exclude the anchor itself
            top = np.argpartition(s, -n_top, axis=1)[:, -n_top:]
            best = top[rows, np.argmax(s[rows[:, None], top], axis=1)]  # the highest of the top n_top
            for r, a in enumerate(idx):
                i = b0 + r
                if kind == "labels":
                    others = counts[lab[a]] > 1
                    is_pos_best = lab[best[r]] == lab[a]
                    is_pos_top = np.any(lab[top[r]] == lab[a])
                else:
                    plist = pos[a][pos[a] != a]
                    others = plist.size > 0
                    is_pos_best = bool(np.isin(best[r], plist))
                    is_pos_top = bool(np.any(np.isin(top[r], plist)))
                if others:
                    top1[i] = float(is_pos_best)
                    rec10[i] = float(is_pos_top)
        del s, e

    # ---------------------------------------------------------------- summaries
    sig2 = ratio2 - 1.0
    kap3 = ratio3 - 3.0 * ratio2 + 2.0
    c1_a = mu0 - 0.5 * sig2
    c2_a = -0.5 * nu0 + kap3 / 3.0 + sig2 * mu0 - 0.75 * sig2**2
    ce_a = log_z - ms
    if kind == "positive_embeddings":
        w_ce, w_c1 = var_ms, var_mu0
        w_c2 = 0.25 * var_nu0 + sig2**2 * var_mu0 - sig2 * cov_mu_nu
    else:
        w_ce = w_c1 = w_c2 = None
    ce, ce_se = _srs_mcse(ce_a, n, w_ce)
    c1, c1_se = _srs_mcse(c1_a, n, w_c1)
    c2, c2_se = _srs_mcse(c2_a, n, w_c2)
    gap_blocks = gap_mc / cnt_mc[:, None]
    risk_blocks = risk_mc / cnt_mc[:, None]
    gap, gap_se = mean_mcse(gap_blocks)
    risk, risk_se = mean_mcse(risk_blocks)
    # exact curve: two-phase sampling (all anchors -> the exact-curve anchors) with the per-anchor
    # prediction c1_a/k + c2_a/k^2 (known at every anchor) as control variate where it reduces the
    # spread of the exact anchors (a regression estimator with coefficient 1)
    ex_rows = gap_ex[exact_set]
    n_e = ex_rows.shape[0]
    kf = ks.astype(float)
    pred_a = c1_a[:, None] / kf[None, :] + c2_a[:, None] / kf[None, :] ** 2
    if n_e == 0:
        gex = gex_se = np.full(ks.size, np.nan)
    elif n_e == n_a:  # every anchor has its exact curve
        gex = ex_rows.mean(axis=0)
        gex_se = (np.sqrt(max(1.0 - n_a / n, 0.0) * ex_rows.var(axis=0, ddof=1) / n_a) if n_a >= 2
                  else np.full(ks.size, np.nan))
    elif n_e == 1:
        gex, gex_se = ex_rows[0] - pred_a[exact_set][0] + pred_a.mean(axis=0), np.full(ks.size, np.nan)
    else:
        resid = ex_rows - pred_a[exact_set]
        s2_g = ex_rows.var(axis=0, ddof=1)
        s2_r = resid.var(axis=0, ddof=1)
        use_cv = s2_r < s2_g
        gex = np.where(use_cv, pred_a.mean(axis=0) + resid.mean(axis=0), ex_rows.mean(axis=0))
        # Var = (1 - n_a/N) S_g^2 / n_a + (1/n_e - 1/n_a) S_r^2 (double sampling); plain: (1 - n_e/N) S_g^2 / n_e
        var_cv = max(1.0 - n_a / n, 0.0) * s2_g / n_a + (1.0 / n_e - 1.0 / n_a) * s2_r
        var_plain = max(1.0 - n_e / n, 0.0) * s2_g / n_e
        gex_se = np.sqrt(np.where(use_cv, var_cv, var_plain))
    if kind == "positive_embeddings":
        # the views are a sample of the augmentation kernel: add their error, to first order in 1/k
        # (gap_k ~ E[W0]/k + ...), with the weight f = n_a/N of _srs_mcse. With an anchor subsample
        # the Monte Carlo blocks are anchors, whose spread already contains it.
        w_mu0 = np.mean(var_mu0)
        if np.isnan(w_mu0):  # one view per row: bounded above by the spread of E[W0] over the anchors
            w_mu0 = float(mu0.var(ddof=1)) if n_a >= 2 else float("nan")
        view_var = w_mu0 / n_a / kf**2
        if census:
            gap_se = np.sqrt(gap_se**2 + view_var)
        gex_se = np.sqrt(gex_se**2 + (n_a / n) * view_var)
    scale = float(max(np.mean(ratio2), np.mean(mu0)))
    k_min = choose_k_min(ks, scale)
    pre_asymptotic = int(np.sum(ks >= k_min) < 4 or k_min < 16 * scale)
    if np.sum(ks >= k_min) < 4:
        k_min = int(ks[-4])
    sel = ks >= k_min
    sign = -1.0 if np.all(gap[sel] < 0) else 1.0  # a negative gap (c1 < 0): the slope of log|gap|
    fit = fit_rate(ks, sign * gap_blocks, k_min, with_inverse=True)
    if np.isfinite(fit.slope):
        slope_note = "fitted to log gap" if sign > 0 else "fitted to log(-gap): the gap is negative at k >= k_min"
    elif np.any(gap[sel] <= 0):
        slope_note = (f"the Monte Carlo gap is not positive at some k >= {k_min} (log scale impossible): "
                      "more tuples (n_tuples) or a smaller k grid")
    else:
        slope_note = "too few blocks or no Monte Carlo variation for the jackknife"
    predicted = c1 / kf + c2 / kf**2
    bias_at_k = float(c1 / k + c2 / k**2) if k is not None else float("nan")
    on_grid = np.flatnonzero(ks == k) if k is not None else np.array([], dtype=int)
    gap_at_k = float(gap[on_grid[0]]) if on_grid.size else float("nan")
    gap_at_k_se = float(gap_se[on_grid[0]]) if on_grid.size else float("nan")
    k_for = _k_for_bias(c1, c2, eps)

    nats = "dimensionless (nats)"
    mc_note = "Monte Carlo standard error"
    data = {
        "gap": (("k",), gap, _attrs("finite-k InfoNCE gap R_k - log k - CE in nats", "1",
                                      "Monte Carlo estimate (control variate -s(x,x+) + log Z(x)); " + nats)),
        "gap_mcse": (("k",), gap_se, _attrs("MCSE of gap in nats", "1", "between-block " + mc_note)),
        "gap_exact": (("k",), gex, _attrs("exact finite-k gap in nats", "1",
                                          "exact per-anchor gap (simkit.exact.curve, Laplace-integral identity) "
                                          "averaged over the exact-curve anchors (two-phase estimator with the "
                                          "prediction as control variate); exact when every row has its curve; "
                                          + nats)),
        "gap_exact_mcse": (("k",), gex_se, _attrs("MCSE of gap_exact in nats", "1",
                                                  "standard error from anchor subsampling only (0 with every row)")),
        "gap_predicted": (("k",), predicted, _attrs("predicted gap c1/k + c2/k^2 in nats", "1",
                                                    "second-order expansion of the gap; " + nats)),
        "risk": (("k",), risk, _attrs("InfoNCE risk R_k in nats", "1", "Monte Carlo estimate; " + nats)),
        "risk_mcse": (("k",), risk_se, _attrs("MCSE of risk in nats", "1", "between-block " + mc_note)),
        "ce": ((), ce, _attrs("cross-entropy CE(M, Q) in nats", "1",
                              "-E s(x,x+) + E log Z(x); exact for label and index kernels over all rows; " + nats)),
        "ce_mcse": ((), ce_se, _attrs("MCSE of ce in nats", "1", "anchor subsampling and views; 0 where exact")),
        "c1": ((), c1, _attrs("first-order bias constant c1 in nats", "1",
                              "E[m1/Z - (Z2/Z^2 - 1)/2]: gap_k = c1/k + O(1/k^2); " + nats)),
        "c1_mcse": ((), c1_se, _attrs("MCSE of c1 in nats", "1", "anchor subsampling and views; 0 where exact")),
        "c2": ((), c2, _attrs("second-order bias constant c2 in nats", "1",
                              "E[-E W0^2/2 + kappa3/3 + sigma^2 E W0 - 3 sigma^4/4] (derived in simkit.diagnose): "
                              "gap_k = c1/k + c2/k^2 + O(1/k^3); " + nats)),
        "c2_mcse": ((), c2_se, _attrs("MCSE of c2 in nats", "1", "anchor subsampling and views; 0 where exact")),
        "slope": ((), fit.slope, _attrs("slope of log |gap| on log k", "1",
                                         "WLS with a 1/k term over k >= slope_k_min (of log(-gap) where the gap is "
                                         "negative there, attrs slope_note); -1 under C1, -1/2 under the "
                                         "1/sqrt(k) alternative")),
        "slope_se": ((), fit.slope_se, _attrs("jackknife standard error of slope", "1", "delete-one-block jackknife")),
        "slope_ci_low": ((), fit.ci_low, _attrs("lower end of the 95% interval of slope", "1", "Student t, blocks - 1 df")),
        "slope_ci_high": ((), fit.ci_high, _attrs("upper end of the 95% interval of slope", "1", "Student t, blocks - 1 df")),
        "slope_p_half": ((), fit.p_half, _attrs("p-value of slope = -1/2", "1",
                                                "two-sided t test of the 1/sqrt(k) alternative")),
        "slope_p_one": ((), fit.p_one, _attrs("p-value of slope = -1", "1", "two-sided t test of the 1/k rate")),
        "slope_k_min": ((), float(k_min), _attrs("smallest k in the slope fit", "1",
                                                 "16 x expansion_scale or the 4 largest grid points")),
        "expansion_scale": ((), scale, _attrs("expansion scale max(E Z2/Z^2, E m1/Z)", "1",
                                              "the expansion in 1/k is accurate for k well above it")),
        "gap_at_k": ((), gap_at_k, _attrs("Monte Carlo gap at the given k in nats", "1",
                                          "gap on the grid at k (k is added to the grid when <= its largest "
                                          "point); NaN when no k was given or k is beyond the grid; " + nats)),
        "gap_at_k_mcse": ((), gap_at_k_se, _attrs("MCSE of gap_at_k in nats", "1", "between-block " + mc_note)),
        "bias_at_k": ((), bias_at_k, _attrs("predicted bias c1/k + c2/k^2 at the given k in nats", "1",
                                            "NaN when no k was given; " + nats)),
        "k_for_bias": ((), k_for, _attrs("negatives needed for a predicted bias within eps", "1",
                                         f"smallest k with |c1/k' + c2/k'^2| <= eps = {eps:g} nats for all k' >= k")),
    }
    if kind != "positive_embeddings":
        for name, vals, what in (("top1", top1, "top-1 retrieved row (anchor excluded) is a positive"),
                                 ("recall10", rec10, "a positive among the 10 top retrieved rows (anchor excluded)")):
            ok = np.isfinite(vals)
            if ok.any():
                m, se = _srs_mcse(vals[ok], max(int(round(ok.sum() * n / n_a)), int(ok.sum())))
            else:
                m, se = float("nan"), float("nan")
            data[name] = ((), m, _attrs(f"share of anchors whose {what}", "1",
                                        "softmax retrieval Q against M; anchors without another positive left out"))
            data[f"{name}_mcse"] = ((), se, _attrs(f"MCSE of {name}", "1", "anchor subsampling; 0 with every row"))
        n_no_other = int(np.sum(~np.isfinite(top1)))
    else:
        n_no_other = -1
    ds = xr.Dataset({name: (dims, np.asarray(val, dtype=float), a) for name, (dims, val, a) in data.items()},
                    coords={"k": ("k", ks, _attrs("number of negatives", "1", "grid of k for the gap curve"))})
    now = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    __version__ = versions()["simkit"]
    ds.attrs = {
        "Conventions": "CF-1.11",
        "title": "simkit diagnose: finite-k InfoNCE bias of user embeddings",
        "history": f"{now} simkit.diagnose(N={n}, d={d}, kernel={kind}, tau={tau:g})",
        "source": f"simkit {__version__} simkit.diagnose",
        "references": _REFERENCES,
        "kernel": kind,
        "n_rows": n,
        "dim": d,
        "tau": tau,
        "eps": eps,
        "k": -1 if k is None else k,
        "n_anchors": n_a,
        "n_exact_anchors": int(n_ex),
        "n_blocks": int(n_blocks),
        "tuples_per_anchor": int(per_anchor),
        "exact_curve": "simkit.exact.curve.expected_log_sum_parts",
        "slope_pre_asymptotic": pre_asymptotic,
        "slope_note": slope_note,
        "n_anchors_no_other_positive": n_no_other,
        "n_positives_per_row": (int(views.shape[1]) if views is not None else int(pos.shape[1]) if pos is not None
                                else -1),
    }
    return ds


class _CallableModule(types.ModuleType):
    """``simkit.diagnose`` names both this module and its function: importing the module first
    (``from simkit.diagnose import ...``) makes the package attribute the module, so the module
    calls the function."""

    def __call__(self, *args, **kwargs):
        return diagnose(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
