"""The in-batch estimator (simkit.estimators.in_batch) against a plain-NumPy loss on the same samples
and against the exact finite-set curve (simkit.exact.in_batch.finite_curve)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats
from scipy.special import logsumexp

from simkit.estimators.in_batch import (draw_finite_pairs, in_batch_block, in_batch_losses, negatives_on_grid,
                                        pair_sums)
from simkit.exact.in_batch import SCHEMES, finite_anchor_terms, finite_curve

ALPHA = 1e-3
N_GRID = np.array([1, 2, 4, 8, 16, 32, 64])
N_BLOCKS = 200


def _unit(v):
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


@pytest.mark.deterministic(reason="same samples in both implementations; tolerance 1e-12 is float rounding")
@pytest.mark.parametrize("d", [3, 12])  # inline scores (d <= 8) and the BLAS path
def test_losses_match_plain_numpy(d):
    """Every scheme's loss equals a direct log-sum-exp over the batch's negatives, at pair counts
    that cross the 512-column tile (513, 1100) and end mid-tile."""
    rng = np.random.default_rng(7)
    x = _unit(rng.normal(size=(70, d)))
    xp = _unit(x + 0.3 * rng.normal(size=x.shape))
    y = _unit(rng.normal(size=(1100, d)))
    yp = _unit(y + 0.3 * rng.normal(size=y.shape))
    n = np.array([1, 2, 3, 8, 100, 513, 1100])
    tau = 0.2
    got = in_batch_losses(x, xp, y, yp, tau, n)
    s0 = np.sum(x * xp, axis=1) / tau
    sy, syp = x @ y.T / tau, x @ yp.T / tau
    for g, m in enumerate(n):
        negs = {"ntxent": np.column_stack([sy[:, :m], syp[:, :m]]), "clip": syp[:, :m], "iid": sy[:, :m]}
        for scheme, neg in negs.items():
            ref = logsumexp(np.column_stack([s0, neg]), axis=1) - s0
            np.testing.assert_allclose(got[scheme][:, g], ref, rtol=0, atol=1e-12, err_msg=f"{scheme} n={m}")
    raw = pair_sums(x, y, yp, tau, n)
    np.testing.assert_allclose(raw[:, -1, 0], np.exp(sy).sum(axis=1), rtol=1e-13)
    np.testing.assert_allclose(raw[:, -1, 1], np.exp(syp).sum(axis=1), rtol=1e-13)


def test_bad_input_is_named():
    x = _unit(np.ones((3, 3)))
    with pytest.raises(ValueError, match="'second' must have the shape"):
        in_batch_losses(x, x, x, x[:2], 0.5, [1])
    with pytest.raises(ValueError, match="'k' must not exceed"):
        in_batch_losses(x, x, x, x, 0.5, [4])
    with pytest.raises(ValueError, match="'scheme'"):
        negatives_on_grid("moco", [1])


def _design():
    """40 atoms on S^2 off-centre, non-uniform π, a vMF-like kernel on the atoms (πM ≠ π), τ = 0.5."""
    rng = np.random.default_rng(3)
    pts = _unit(rng.normal(size=(40, 3)) + np.array([1.5, 0.0, 0.0]))
    w = np.random.default_rng(5).random(40) + 0.2
    kern = np.exp(6.0 * pts @ pts.T)
    return pts, w / w.sum(), kern / kern.sum(axis=1, keepdims=True), 0.5


@pytest.fixture(scope="module")
def blocks():
    """N_BLOCKS independent blocks of 256 anchors sharing 64 pairs; anchors and positives drawn here
    with NumPy's own inverse CDF (not the library's sampler)."""
    pts, w, kern, tau = _design()
    scores = pts @ pts.T / tau
    terms = {s: finite_anchor_terms(scores, w, kern, s) for s in SCHEMES}
    rng = np.random.default_rng(20240)
    cdf = np.cumsum(kern, axis=1)
    out = {s: {"gap_cv": [], "risk": []} for s in SCHEMES}
    for _ in range(N_BLOCKS):
        a = rng.choice(40, size=256, p=w)
        b = np.array([min(int(np.searchsorted(cdf[i], u * cdf[i, -1], side="right")), 39)
                      for i, u in zip(a, rng.random(256))])
        ya, yb = draw_finite_pairs(w, kern, int(N_GRID[-1]), rng)
        got = in_batch_block(pts[a], pts[b], pts[ya], pts[yb], tau, N_GRID,
                             {s: {k: v[a] for k, v in t.items()} for s, t in terms.items()}, terms["iid"]["mean_s"][a])
        for s in SCHEMES:
            for name in out[s]:
                out[s][name].append(got[s][name])
    curves = {s: finite_curve(scores, w, kern, s, negatives_on_grid(s, N_GRID)) for s in SCHEMES}
    return {s: {n: np.array(v) for n, v in o.items()} for s, o in out.items()}, curves


def _max_t(samples, truth):
    mean = samples.mean(axis=0)
    se = samples.std(axis=0, ddof=1) / math.sqrt(samples.shape[0])
    return np.abs(mean - truth) / se


_N_TESTS = 2 * len(SCHEMES) * N_GRID.size
_CRIT = stats.t.isf(ALPHA / (2 * _N_TESTS), N_BLOCKS - 1)


@pytest.mark.statistical
@pytest.mark.false_fail(ALPHA, reason="Bonferroni over 42 two-sided t tests (199 df) at ALPHA in total")
def test_block_means_match_exact_curve(blocks):
    """Block means of ``gap_cv`` and of the ζ-free ``risk`` equal the exact gap and risk of every scheme at
    n = 1..64 pairs (k up to 128).

    Bonferroni over 3 schemes x 7 n x 2 statistics: critical t_199(1 - 1e-3/84) = 4.29, false-failure
    rate <= 1e-3 under any correlation. Power: a bias of 4.3 MCSE at one point is detected with probability
    0.5, 6 MCSE with 0.96; the MCSE of gap_cv is 3e-5..2e-2 nats (0.3%..4% of the gap), of risk 2e-3..6e-3.
    """
    got, curves = blocks
    for s in SCHEMES:
        for name, truth in (("gap_cv", curves[s].gap), ("risk", curves[s].risk)):
            t = _max_t(got[s][name], truth)
            assert np.all(t <= _CRIT), f"{s} {name}: |t| = {np.round(t, 2)}, critical {_CRIT:.2f}"


@pytest.mark.deterministic(reason="at the fixed seed the wrong curves are off by max |t| = 38 and 9 against "
                                  "the critical 4.3; a miss would need a deviation of 5+ MCSE towards them")
def test_positive_control_rejects_wrong_scheme(blocks):
    """The same rule rejects the i.i.d. curve at the same k (2n) for NT-Xent's blocks (max |t| 38) and the
    paper's limit CE (π's, 0.0155 nats below CLIP's) for CLIP's risk (max |t| 9)."""
    got, curves = blocks
    pts, w, kern, tau = _design()
    iid_same_k = finite_curve(pts @ pts.T / tau, w, kern, "iid", 2 * N_GRID)
    assert np.max(_max_t(got["ntxent"]["gap_cv"], iid_same_k.gap)) > _CRIT
    assert np.max(_max_t(got["clip"]["risk"], curves["clip"].gap + curves["iid"].limit)) > _CRIT
