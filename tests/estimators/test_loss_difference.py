"""Block means of the loss difference and its bounds (simkit.estimators.loss_difference) and the per-k
tallies behind them (simkit.exact.loss_bounds.bound_tallies).

Expected values: the per-tuple output of loss_difference_bounds summed here tuple by tuple; the means
do not depend on the chunk size (the negatives are drawn in the same order).
"""

from __future__ import annotations

import numpy as np
import pytest

from simkit.embeddings.embedding import TwoLayerEmbedding
from simkit.embeddings.perturbation import perturb
from simkit.estimators.loss_difference import loss_difference_means
from simkit.exact.loss_bounds import BOUNDS, TOL_ABS, TOL_REL, bound_tallies, loss_difference_bounds


def _sphere(n, seed):
    x = np.random.default_rng(seed).standard_normal((n, 3))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.mark.deterministic(reason="the same numbers summed two ways, to 1e-12")
def test_means_by_tuple_loops_and_chunk_invariance():
    phi = TwoLayerEmbedding.random(3, 4, 6, rng=1)
    psis = [perturb(phi, e, rng=2) for e in (0.01, 0.3)]
    x, xp, K, ks, tau = _sphere(5, 3), _sphere(5, 4), 8, np.array([1, 2, 4, 8]), 0.5
    flat = _sphere(5 * K, 7)

    def stream():  # the negatives in order, whatever the chunk size
        pos = [0]

        def take(n):
            pos[0] += n
            return flat[pos[0] - n:pos[0]]
        return take

    a = loss_difference_means(phi, psis, x, xp, stream(), K, tau, ks, chunk=2)
    b = loss_difference_means(phi, psis, x, xp, stream(), K, tau, ks, chunk=5)
    for name in a:
        np.testing.assert_allclose(a[name], b[name], rtol=1e-12, atol=0)
    y = flat.reshape(5, K, 3)  # by hand, one tuple at a time
    for i, psi in enumerate(psis):
        acc = {n: np.zeros(ks.size) for n in ("dl", "bound_avg", "viol_max", "tight_max")}
        for t in range(5):
            r = loss_difference_bounds(phi(x[t:t + 1]), phi(xp[t:t + 1]), phi(y[t]).reshape(1, K, -1), psi(x[t:t + 1]),
                                       psi(xp[t:t + 1]), psi(y[t]).reshape(1, K, -1), tau, ks)
            acc["dl"] += np.abs(r["delta"][0])
            acc["bound_avg"] += r["bound_avg"][0]
            acc["viol_max"] += np.abs(r["delta"][0]) > r["bound_max"][0] + TOL_ABS + TOL_REL * np.abs(r["loss"][0])
            slack = np.maximum(np.abs(r["delta"][0]) - TOL_ABS - TOL_REL * np.abs(r["loss"][0]), 0.0)
            acc["tight_max"] = np.maximum(acc["tight_max"], np.where(r["bound_max"][0] > 0, slack / r["bound_max"][0], 0))
        np.testing.assert_allclose(b["dl"][i], acc["dl"] / 5, rtol=1e-12)
        np.testing.assert_allclose(b["bound_avg"][i], acc["bound_avg"] / 5, rtol=1e-12)
        assert np.array_equal(b["viol_max"][i], acc["viol_max"]) and np.all(b["viol_max"][i] == 0)  # proved bound
        np.testing.assert_allclose(b["tight_max"][i], acc["tight_max"], rtol=1e-12)
        assert np.all(b["tight_avg"][i] <= 1.0)


@pytest.mark.deterministic(reason="positive control by construction: a bound cut to a tenth is violated")
def test_bound_tallies_count_a_violated_bound():
    phi = TwoLayerEmbedding.random(3, 4, 6, rng=1)
    psi = perturb(phi, 0.5, rng=2)
    x, xp, y = _sphere(6, 3), _sphere(6, 4), _sphere(6 * 8, 5)
    w, w2 = phi(y).reshape(6, 8, -1), psi(y).reshape(6, 8, -1)
    r = loss_difference_bounds(phi(x), phi(xp), w, psi(x), psi(xp), w2, 0.5, np.array([1, 8]))
    ok = bound_tallies(r, w, w2)
    assert all(np.all(ok[f"viol_{t}"] == 0) for t in BOUNDS)
    broken = {**r, "bound_avg": r["bound_avg"] / 10}
    bad = bound_tallies(broken, w, w2)
    assert np.all(bad["viol_avg"] > 0) and np.all(bad["tight_avg"] > 1)
    assert ok["neg_plain"] == pytest.approx(np.linalg.norm(w2 - w, axis=-1).mean(axis=1).sum(), rel=1e-12)
