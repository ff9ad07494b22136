"""Block estimators on a finite labelled population (simkit.estimators.labelled).

Expected values by explicit loops over anchors, tuples and class members written here; one
two-phase estimate with every anchor sampled equals the exact mean (no sampling error).
"""

from __future__ import annotations

import numpy as np
import pytest

from simkit.estimators.finite import scores_and_log_z
from simkit.estimators.labelled import (class_cross_entropy, class_d_block, class_first_order, class_positive_scores,
                                        exact_d_two_phase, gap_block)
from simkit.exact.finite import class_members, exact_d_curve

TAU = 0.4


def _population(n=12, d=5, seed=0):
    rng = np.random.default_rng(seed)
    e = rng.standard_normal((n, d))
    e /= np.linalg.norm(e, axis=1, keepdims=True)
    labels = np.array([0, 1, 2] * (n // 3))
    s, log_z = scores_and_log_z(e, TAU)
    return s, log_z, labels, *class_members(labels)


@pytest.mark.deterministic(reason="exact sums compared with loops, to 1e-12")
def test_first_order_and_cross_entropy_by_loops():
    s, log_z, labels, idx, mask = _population()
    n = labels.size
    m1, ratio2 = class_first_order(s, log_z, idx, mask)
    for i in range(n):
        same = labels == labels[i]
        assert np.log(np.mean(np.exp(s[i]))) == pytest.approx(log_z[i], rel=1e-12)
        assert m1[i] == pytest.approx(np.mean(np.exp(s[i, same])) / np.exp(log_z[i]), rel=1e-12)
    assert ratio2 == pytest.approx(np.mean(np.exp(2 * s) / np.exp(2 * log_z)[:, None]), rel=1e-12)
    ce = np.mean([log_z[i] - np.mean(s[i, labels == labels[i]]) for i in range(n)])
    assert class_cross_entropy(s, log_z, idx, mask) == pytest.approx(ce, rel=1e-12)


@pytest.mark.deterministic(reason="fixed draws evaluated twice: the formulas against loops, to 1e-12")
def test_gap_and_d_blocks_by_loops():
    s, log_z, labels, idx, mask = _population()
    n, r, grid = labels.size, 3, np.array([1, 2, 4])
    rng = np.random.default_rng(1)
    s_pos = class_positive_scores(s, idx, mask, r, rng)
    neg = rng.integers(0, n, size=(n, r, 4))
    g, d = gap_block(s, log_z, s_pos, neg, grid), class_d_block(s, log_z, labels, idx, mask, neg, grid)
    gap, gap_plain, dk, dk_plain, nm = (np.zeros(grid.size) for _ in range(5))
    for i in range(n):
        same = np.flatnonzero(labels == labels[i])
        assert np.all(np.isin(s_pos[i], s[i, same]))  # positives from the class
        for t in range(r):
            for j, k in enumerate(grid):
                sk = np.exp(s[i, neg[i, t, :k]]).sum()
                z = np.exp(log_z[i])
                plain = np.log((np.exp(s_pos[i, t]) + sk) / (k * z))
                gap_plain[j] += plain
                gap[j] += plain - (sk / (k * z) - 1)
                rb = np.mean([np.log1p(np.exp(s[i, y]) / sk) for y in same])
                dk[j] += rb
                hit = [y for y in neg[i, t, :k] if labels[y] == labels[i]]
                snis = np.mean(s[i, hit]) if hit else np.mean(s[i, same])
                dk_plain[j] += rb + snis - np.mean(s[i, same])
                nm[j] += not hit
    m = n * r
    for name, ref in (("gap", gap), ("gap_plain", gap_plain)):
        np.testing.assert_allclose(g[name], ref / m, rtol=1e-12)
    np.testing.assert_allclose(g["ell_inf"], np.mean(log_z[:, None] - s_pos), rtol=1e-12)
    for name, ref in (("d", dk), ("d_plain", dk_plain), ("no_match", nm)):
        np.testing.assert_allclose(d[name], ref / m, rtol=1e-12, atol=1e-15)


@pytest.mark.deterministic(reason="every anchor sampled: the difference estimator is the exact mean, MCSE 0")
def test_exact_d_two_phase_with_every_anchor():
    s, log_z, labels, idx, mask = _population()
    grid = np.array([1, 2, 4, 8])
    m1, _ = class_first_order(s, log_z, idx, mask)
    est, mcse = exact_d_two_phase(s, m1, idx, mask, grid, 100, np.random.default_rng(0))
    exact = exact_d_curve(s, idx, mask, np.arange(labels.size), grid).mean(axis=0)
    np.testing.assert_allclose(est, exact, rtol=1e-12)
    assert np.all(mcse == 0)
    part, part_se = exact_d_two_phase(s, m1, idx, mask, grid, 6, np.random.default_rng(0))
    assert np.all(part_se > 0) and np.all(np.isfinite(part))  # half the anchors: a sampling error, stated
