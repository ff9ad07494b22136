"""The pieces of the gap estimator on a finite set of embedded points (simkit.estimators.finite) against
loops written here, and positives drawn from the rows of M_N against their laws. Deterministic (exact
identities; the sampling check is far outside its binomial error, see the test).
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import logsumexp

from simkit.estimators.finite import gap_terms, ratio_block, sample_rows, scores_and_log_z


def test_scores_ratio_block_and_gap_terms_by_hand():
    rng = np.random.default_rng(1)
    emb = rng.standard_normal((7, 4))
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    tau, grid = 0.3, np.array([1, 2, 5])
    s, log_z = scores_and_log_z(emb, tau)
    for i in range(7):
        assert log_z[i] == pytest.approx(logsumexp([emb[i] @ emb[j] / tau for j in range(7)]) - np.log(7), rel=1e-13)
    neg = rng.integers(0, 7, (7, 3, 5))
    t_k = ratio_block(s, log_z, neg, grid)
    w_pos = rng.uniform(0.1, 2.0, (7, 3))
    plain, cv = gap_terms(w_pos, t_k, grid)
    for i in range(7):
        for r in range(3):
            for g, k in enumerate(grid):
                want = sum(np.exp(emb[i] @ emb[neg[i, r, j]] / tau - log_z[i]) for j in range(k))
                assert t_k[i, r, g] == pytest.approx(want, rel=1e-12)
                assert plain[i, r, g] == pytest.approx(np.log((w_pos[i, r] + want) / k), rel=1e-12, abs=1e-14)
                assert cv[i, r, g] == pytest.approx(plain[i, r, g] - (want / k - 1), rel=1e-12, abs=1e-14)


@pytest.mark.deterministic(reason="20000 draws per row: the largest |frequency - probability| is ~0.004 at 1 SD, "
                                  "the tolerance 0.02 is > 5 SD for every cell")
def test_sample_rows_draws_from_each_row():
    rng = np.random.default_rng(2)
    p = rng.dirichlet(np.ones(5), size=3)
    lw = np.log(p)
    draws = np.array([sample_rows(lw, rng) for _ in range(20000)])
    freq = np.stack([np.bincount(draws[:, i], minlength=5) / draws.shape[0] for i in range(3)])
    np.testing.assert_allclose(freq, p, atol=0.02)
