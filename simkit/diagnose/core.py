"""``simkit.diagnose``: how many negatives InfoNCE needs on a user's own embeddings of a finite set.

The data distribution is the empirical one over the N rows of ``embeddings`` (each row normalised onto
the unit sphere); the score is ``s(x, y) = φ(x)·φ(y)/τ`` (docs/theory.md §1). For an anchor x_a:

* negatives are i.i.d. uniform over a set of rows fixed by ``convention``: ``"exclude_anchor"``
  (default; the other N - 1 rows, as SimCLR's NT-Xent and in-batch losses do), ``"include_anchor"``
  (all N rows: π itself, docs/theory.md's setting) or ``"exclude_same_label"`` (rows of other labels,
  supervised-contrastive style);
* the positive law M(x_a, ·) is uniform over the rows sharing x_a's label (``labels``), over the listed
  rows (``positives``, with multiplicity) or over the given views (``positive_embeddings``); under every
  convention but ``"include_anchor"`` the anchor is not its own positive (rows then left without a
  positive are not anchors).

Per anchor, with Z, Z2, Z3 the means of e^{s}, e^{2s}, e^{3s} over the negative law, W0 = e^{s(x,x+)}/Z:
``CE = E[-s(x,x+) + log Z]``, ``c1 = E[E W0 - (Z2/Z^2 - 1)/2]``, ``c2`` as in docs/diagnose.md, and the
exact gap ``gap_k = E log((e^{s+} + sum_{i<=k} e^{s_i}) / (k Z))`` at every integer ``k <= k_max``
(:mod:`simkit.diagnose._exact`). Anchors are a sample of the rows (systematic in label order where
labels exist: implicit stratification), with the sampling error as MCSE.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

from simkit.diagnose._exact import AnchorCurves
from simkit.diagnose._inputs import (K_CAP, as_array, check_convention, check_int, check_labels, check_positives,
                                     check_real, check_rng, check_scalar, check_views, negatives_for, normalise)
from simkit.diagnose._sampling import systematic_sample
from simkit.diagnose.batch import BATCH_SCHEMES, batch_anchor_constants
from simkit.diagnose.result import Diagnosis

__all__ = ["diagnose", "negatives_for"]

#: smallest temperature: scores span up to 2/τ nats and e^{-2/τ} must stay a normal double
TAU_MIN = 2.0 / 700.0
#: smallest tolerated bias: the exact curve is accurate to ~1e-13 nats
EPS_MIN = 1e-12
#: default largest k of the exact curve
K_MAX_DEFAULT = 2**20
#: largest k of the Monte Carlo gap (its cost is tuples x k)
MC_K_MAX = 1024
# work of the exact curve per anchor ~ N x nodes atom evaluations; the default anchor count keeps the
# total near this many (a few seconds on two cores; docs/diagnose.md has the measurements)
_EXACT_WORK = 3e9


def _nodes(tau: float, k_max: int) -> float:
    return 8.0 * (2.0 / tau + 24.0 + math.log(k_max))


def diagnose(embeddings, *, labels=None, positives=None, positive_embeddings=None, tau, k=None, batch_size=None,
             symmetric: bool = False, scheme: str | None = None, queue=None, eps: float = 0.01, convention: str = "exclude_anchor",
             k_max: int | None = None, k_grid=None, n_anchors: int = 2048, n_exact_anchors: int | None = None,
             n_tuples: int = 1 << 15, n_blocks: int = 16, mc_k_max: int = MC_K_MAX, block_size: int | None = None,
             rng=0, progress=None):
    """How many negatives does InfoNCE need on these embeddings? The exact finite-k bias of a finite set.

    Parameters
    ----------
    embeddings : array_like, shape (N, d)
        φ(x_i) for the N rows: NumPy, a PyTorch tensor (detached; torch is not imported) or a pandas
        DataFrame. Each row is normalised onto the unit sphere (zero rows are an error).
    labels : array_like, shape (N,), optional
        Integers, strings or an object array of strings (floats only when every value is integral).
    positives : array_like of int, shape (N, m), optional
        Row indices of each row's positives (uniform, with multiplicity).
    positive_embeddings : array_like, shape (N, m, d), optional
        m augmented views of each row. Exactly one of the three positive specifications is required.
    tau : float
        Temperature, >= 2/700.
    k, batch_size, symmetric, queue
        The training set-up, at most one of: ``k`` negatives; a batch of B (k = B - 1, or 2B - 2 with
        ``symmetric`` NT-Xent); a MoCo queue of K (k = K). ``Diagnosis.bias_at()`` answers there.
    scheme : {"ntxent", "clip"}, optional
        With ``batch_size`` (labels or positives): the in-batch scheme whose own constant c1 (docs/theory.md
        §16) gives ``Diagnosis.batch`` (default "ntxent" with ``symmetric``, else "clip"; "ntxent" means
        k = 2B - 2).
    eps : float
        Tolerated |bias| in nats for ``Diagnosis.k_needed()`` (>= 1e-12).
    convention : {"exclude_anchor", "include_anchor", "exclude_same_label"}
        Which rows are an anchor's negatives and positives (module docstring).
    k_max : int, optional
        Largest k of the exact curve (default 2^20, or k when larger; at most 2^40).
    k_grid : sequence of int, optional
        k values tabulated in ``to_xarray()`` (default powers of two up to k_max, and k).
    n_anchors : int
        Anchors of CE, c1, c2 and retrieval (all rows when N is smaller).
    n_exact_anchors : int, optional
        Anchors of the exact curve; default as many as fit 3e9 atom-node evaluations, at
        least 16, all rows when that covers them.
    n_tuples, n_blocks, mc_k_max
        Monte Carlo InfoNCE tuples (k up to ``mc_k_max``) in independent blocks, the check of the
        exact curve and the data of the slope test.
    block_size : int, optional
        Anchors per score block (memory ~ 16 block_size N bytes).
    rng : seed or numpy.random.Generator
        Anchor samples and Monte Carlo (default seed 0: reproducible).
    progress : callable, optional
        ``progress(stage, done, total)``, called as work proceeds.

    Returns
    -------
    Diagnosis
    """
    given = [name for name, v in (("labels", labels), ("positives", positives),
                                  ("positive_embeddings", positive_embeddings)) if v is not None]
    if len(given) != 1:
        raise ValueError("exactly one of 'labels', 'positives', 'positive_embeddings' must be given, got "
                         + (", ".join(repr(g) for g in given) if given else "none"))
    kind = given[0]
    emb = check_real("embeddings", embeddings, 2)
    n, d = emb.shape
    if n < 3 or d < 1:
        raise ValueError(f"'embeddings' must have shape (N, d) with N >= 3 and d >= 1, got {emb.shape}")
    phi = normalise("embeddings", emb)
    del emb
    tau = check_scalar("tau", tau, low=0, low_inclusive=False)
    if tau < TAU_MIN:
        raise ValueError(f"'tau' must be >= {TAU_MIN:.6g} (scores span up to 2/tau nats and e^(-2/tau) must "
                         f"stay a normal double), got {tau!r}")
    eps = check_scalar("eps", eps, low=0, low_inclusive=False)
    if eps < EPS_MIN:
        raise ValueError(f"'eps' must be >= {EPS_MIN:g} nats (the exact curve is accurate to ~1e-13), got {eps!r}")
    convention = check_convention(convention)
    if scheme is not None:
        if scheme not in BATCH_SCHEMES:
            raise ValueError(f"'scheme' must be one of {', '.join(BATCH_SCHEMES)}, got {scheme!r}")
        if batch_size is None:
            raise ValueError("'scheme' applies to 'batch_size' only: give 'batch_size' with it")
        if symmetric and scheme != "ntxent":
            raise ValueError(f"'symmetric' is NT-Xent: it needs 'scheme' 'ntxent', got {scheme!r}")
    elif batch_size is not None:
        scheme = "ntxent" if symmetric else "clip"
    k_user, k_how = negatives_for(k=k, batch_size=batch_size, symmetric=bool(symmetric) or scheme == "ntxent",
                                  queue=queue)
    if k_max is None:
        k_max = max(K_MAX_DEFAULT, k_user or 1)
    else:
        k_max = check_int("k_max", k_max, low=16, high=K_CAP)
        if k_user is not None and k_user > k_max:
            raise ValueError(f"'k_max' must be >= the k of the training set-up ({k_user}), got {k_max}")
    grid = _grid(k_grid, k_max, k_user)
    n_anchors = check_int("n_anchors", n_anchors, low=2)
    n_tuples = check_int("n_tuples", n_tuples, low=1)
    n_blocks = check_int("n_blocks", n_blocks, low=3)
    mc_k_max = check_int("mc_k_max", mc_k_max, low=1, high=2**20)
    if n_exact_anchors is not None:
        n_exact_anchors = check_int("n_exact_anchors", n_exact_anchors, low=1)
    if block_size is not None:
        block_size = check_int("block_size", block_size, low=1)
    gen = check_rng(rng)

    lab = pos = views = None
    label_values, label_note = None, ""
    if kind == "labels":
        lab, label_values, label_note = check_labels(labels, n)
    elif kind == "positives":
        pos = check_positives(positives, n)
    else:
        views = check_views(positive_embeddings, n, d)
    if convention == "exclude_same_label" and lab is None:
        raise ValueError("'convention' 'exclude_same_label' needs 'labels'")
    law = _Laws(n, convention, lab, pos, views)
    if law.population.size < 2:
        raise ValueError("fewer than 2 rows have a positive other than themselves under convention "
                         f"{convention!r} (every label is a singleton?)")
    if convention == "exclude_same_label" and np.any(law.counts == n):
        raise ValueError("'convention' 'exclude_same_label' needs at least two labels (no row would have a negative)")

    strata = lab[law.population] if lab is not None else None
    design_a = systematic_sample(law.population, n_anchors, strata, gen)
    nodes = _nodes(tau, k_max)
    if n_exact_anchors is None:
        n_exact_anchors = max(16, int(_EXACT_WORK // (n * nodes)))
    design_e = systematic_sample(law.population, n_exact_anchors, strata, gen)

    report = progress if progress is not None else (lambda *a: None)
    bs = block_size or max(1, (1 << 23) // n)
    ks_mc = grid[grid <= mc_k_max]
    if ks_mc.size < 4:
        ks_mc = 2 ** np.arange(min(11, int(math.log2(mc_k_max)) + 1))
    stats_a = _per_anchor_pass(phi, tau, law, design_a.rows, bs, gen, ks_mc, n_tuples, n_blocks, report)
    in_batch = None
    if scheme is not None and views is None:
        c1_b, limit_b = batch_anchor_constants(phi, tau, law, design_a.rows, scheme)
        in_batch = {"scheme": scheme, "c1": design_a.mean_se(c1_b), "limit": design_a.mean_se(limit_b)}
    curves = AnchorCurves(k_max)
    stats_e = _per_anchor_pass(phi, tau, law, design_e.rows, bs, gen, None, 0, 0, report, curves=curves)
    return Diagnosis._build(
        n=n, d=d, kind=kind, tau=tau, eps=eps, convention=convention, k=k_user, k_how=k_how,
        batch=(batch_size is not None), k_max=k_max, grid=grid, design_a=design_a, design_e=design_e,
        stats_a=stats_a, stats_e=stats_e, curves=curves, ks_mc=ks_mc, n_no_positive=int(n - law.population.size),
        label_note=label_note, n_labels=(0 if label_values is None else int(label_values.size)),
        n_views=(views.shape[1] if views is not None else pos.shape[1] if pos is not None else -1), in_batch=in_batch)


def _grid(k_grid, k_max: int, k_user: int | None) -> NDArray[np.int64]:
    if k_grid is None:
        arr = 2 ** np.arange(int(math.floor(math.log2(k_max))) + 1, dtype=np.int64)
    else:
        arr = as_array("k_grid", k_grid)
        if (arr.ndim != 1 or arr.size < 1 or arr.dtype.kind not in "iuf" or not np.all(np.isfinite(arr))
                or np.any(arr != np.round(arr)) or np.any(arr < 1) or np.any(arr > k_max)):
            raise ValueError(f"'k_grid' must be integers in [1, k_max = {k_max}], got {k_grid!r}")
        arr = arr.astype(np.int64)
    if k_user is not None:
        arr = np.append(arr, k_user)
    return np.unique(arr)


class _Laws:
    """The positive and negative laws of every row under a convention."""

    def __init__(self, n, convention, lab, pos, views):
        self.n, self.convention, self.lab, self.pos, self.views = n, convention, lab, pos, views
        self.self_excluded = convention != "include_anchor"
        has = np.ones(n, dtype=bool)
        if lab is not None:
            self.order = np.argsort(lab, kind="stable")
            self.counts = np.bincount(lab)
            self.starts = np.concatenate([[0], np.cumsum(self.counts)])
            if self.self_excluded:
                has = self.counts[lab] > 1
        elif pos is not None and self.self_excluded:
            has = np.any(pos != np.arange(n)[:, None], axis=1)
        self.population = np.flatnonzero(has)

    def members(self, c):
        return self.order[self.starts[c]:self.starts[c + 1]]

    def positive_rows(self, a):
        """Row indices of a's positives (label and index kernels)."""
        if self.lab is not None:
            rows = self.members(self.lab[a])
        else:
            rows = self.pos[a]
        return rows[rows != a] if self.self_excluded else rows

    def draw_negatives(self, a, size, gen):
        n = self.n
        if self.convention == "include_anchor":
            return gen.integers(0, n, size=size)
        if self.convention == "exclude_anchor":
            j = gen.integers(0, n - 1, size=size)
            return j + (j >= a)
        c = self.lab[a]
        nc = self.counts[c]
        j = gen.integers(0, n - nc, size=size)
        return self.order[j + (j >= self.starts[c]) * nc]


def _per_anchor_pass(phi, tau, law, rows_all, bs, gen, ks_mc, n_tuples, n_blocks, report, curves=None):
    """Per-anchor constants of the anchors ``rows_all`` (and their exact curves, or the Monte Carlo
    tuples of the gap on ``ks_mc``)."""
    n = law.n
    n_a = rows_all.size
    out = {name: np.empty(n_a) for name in ("log_z", "ratio2", "ratio3", "mu0", "nu0", "ms")}
    for name in ("var_mu0", "var_nu0", "var_ms", "cov_mu_nu"):
        out[name] = np.zeros(n_a)
    out["top1"] = np.full(n_a, np.nan)
    out["rec10"] = np.full(n_a, np.nan)
    do_mc = ks_mc is not None and n_tuples > 0
    if do_mc:
        n_blk = min(n_blocks, n_a)
        block_of = gen.permutation(np.arange(n_a) % n_blk)
        per_anchor = max(1, -(-n_tuples // n_a))
        k_top = int(ks_mc[-1])
        seg_edges = np.concatenate([[0], ks_mc])
        gap_mc = np.zeros((n_blk, ks_mc.size))
        risk_mc = np.zeros((n_blk, ks_mc.size))
        cnt = np.zeros(n_blk)
    n_top = min(10, n - 1)
    stage = "exact curve" if curves is not None else "anchors"
    retrieval = law.views is None and curves is None
    for b0 in range(0, n_a, bs):
        idx = rows_all[b0:b0 + bs]
        rows = np.arange(idx.size)
        s = phi[idx] @ phi.T
        s /= tau  # (B, N) scores
        if law.views is not None:
            pos_s = [(law.views[a] @ phi[a]) / tau for a in idx]
        else:
            pos_s = [s[r, law.positive_rows(a)] for r, a in enumerate(idx)]
        self_s = s[rows, idx].copy()
        s[rows, idx] = -np.inf
        if retrieval:  # the anchor's top rows other than itself
            top = np.argpartition(s, -n_top, axis=1)[:, -n_top:]
            best = top[rows, np.argmax(s[rows[:, None], top], axis=1)]
            for r, a in enumerate(idx):
                plist = law.positive_rows(a)
                plist = plist[plist != a]
                if plist.size:
                    out["top1"][b0 + r] = float(np.isin(best[r], plist))
                    out["rec10"][b0 + r] = float(np.any(np.isin(top[r], plist)))
        if law.convention == "include_anchor":
            s[rows, idx] = self_s
            n_neg = np.full(idx.size, float(n))
        elif law.convention == "exclude_anchor":
            n_neg = np.full(idx.size, float(n - 1))
        else:
            s[law.lab[None, :] == law.lab[idx][:, None]] = -np.inf
            n_neg = (n - law.counts[law.lab[idx]]).astype(float)
        masked = law.convention != "include_anchor"
        shift = np.maximum(s.max(axis=1), [float(p.max()) for p in pos_s])
        e = np.subtract(s, shift[:, None])
        np.exp(e, out=e)
        z1 = e.sum(axis=1)
        z2 = np.einsum("ij,ij->i", e, e)
        z3 = np.einsum("ij,ij,ij->i", e, e, e)
        del e
        zbar = z1 / n_neg
        sl = slice(b0, b0 + idx.size)
        out["log_z"][sl] = np.log(zbar) + shift
        out["ratio2"][sl] = z2 / n_neg / zbar**2
        out["ratio3"][sl] = z3 / n_neg / zbar**3
        for r, a in enumerate(idx):
            i = b0 + r
            ps = pos_s[r]
            w0 = np.exp(ps - shift[r]) / zbar[r]
            out["mu0"][i] = w0.mean()
            out["nu0"][i] = (w0 * w0).mean()
            out["ms"][i] = ps.mean()
            m = ps.size
            if law.views is not None:
                if m >= 2:
                    out["var_mu0"][i] = w0.var(ddof=1) / m
                    out["var_nu0"][i] = (w0 * w0).var(ddof=1) / m
                    out["var_ms"][i] = ps.var(ddof=1) / m
                    out["cov_mu_nu"][i] = np.cov(w0, w0 * w0, ddof=1)[0, 1] / m
                else:
                    out["var_mu0"][i] = out["var_nu0"][i] = out["var_ms"][i] = np.nan
            if curves is not None:
                curves.add(ps, s[r][np.isfinite(s[r])] if masked else s[r])
                if (i + 1) % 8 == 0:
                    report(stage, i + 1, n_a)
            if do_mc:
                _tuples(s[r], ps, law, a, per_anchor, k_top, ks_mc, seg_edges, out["log_z"][i], gen,
                        gap_mc, risk_mc, cnt, block_of[i])
        del s
        report(stage, min(b0 + bs, n_a), n_a)
    if do_mc:
        out["gap_blocks"] = gap_mc / cnt[:, None]
        out["risk_blocks"] = risk_mc / cnt[:, None]
        out["tuples_per_anchor"] = per_anchor
    return out


def _tuples(row, ps, law, a, reps, k_top, ks, seg_edges, log_z, gen, gap_mc, risk_mc, cnt, blk):
    """``reps`` InfoNCE tuples of one anchor, k_top negatives each, nested over the grid ks."""
    chunk = max(1, (1 << 20) // k_top)
    for r0 in range(0, reps, chunk):
        nr = min(chunk, reps - r0)
        neg = law.draw_negatives(a, nr * k_top, gen)
        s_neg = row[neg].reshape(nr, k_top)
        s_pos = ps[gen.integers(0, ps.size, size=nr)]
        sh = max(float(s_neg.max()), float(s_pos.max()))
        with np.errstate(divide="ignore"):
            cum = np.log(np.cumsum(np.add.reduceat(np.exp(s_neg - sh), seg_edges[:-1], axis=1), axis=1)) + sh
        if not np.all(np.isfinite(cum)):  # e^{s - max} underflowed for a whole segment: log-sum-exp
            from scipy.special import logsumexp
            seg = np.stack([logsumexp(s_neg[:, seg_edges[g]:seg_edges[g + 1]], axis=1)
                            for g in range(ks.size)], axis=1)
            cum = np.logaddexp.accumulate(seg, axis=1)
        lse = np.logaddexp(cum, s_pos[:, None])
        gap_mc[blk] += np.sum(lse - np.log(ks)[None, :] - log_z, axis=0)
        risk_mc[blk] += np.sum(lse - s_pos[:, None], axis=0)
        cnt[blk] += nr
