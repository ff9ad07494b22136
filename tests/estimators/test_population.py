"""The paired estimate of R_k(phi) - R_k(reference) on fresh tuples (simkit.estimators.population).

Deterministic: the same tuples are drawn here from the same stream, chunk by chunk, and the InfoNCE
losses written out with scipy's logsumexp; the estimator must give their mean difference and its
MCSE to rounding, at any chunking, with a lifted risk and with two temperatures.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import logsumexp

from simkit import Uniform, VMFKernel
from simkit.embeddings.embedding import LinearEmbedding
from simkit.embeddings.lifted import FourierEmbedding, LiftedRisk
from simkit.embeddings.training import TrainingSample
from simkit.estimators.population import paired_risk_difference

PI, M = Uniform(3), VMFKernel(5.0)


def _losses(f, sample, tau):
    """l_k = -s(x, x+) + log(e^{s(x, x+)} + sum_j e^{s(x, y_j)}), s = f(x).f(y) / tau, written here."""
    fx, fp, fy = f(sample.x), f(sample.x_pos), f(sample.negatives.reshape(-1, 3)).reshape(sample.n, sample.k, -1)
    pos = np.sum(fx * fp, axis=1) / tau
    neg = np.einsum("nd,nkd->nk", fx, fy) / tau
    return -pos + logsumexp(np.concatenate([pos[:, None], neg], axis=1), axis=1)


def _by_hand(phi, ref, n, k, chunk, seed, tau, ref_tau):
    rng = np.random.default_rng(seed)
    diffs = []
    for lo in range(0, n, chunk):
        s = TrainingSample.draw(PI, M, min(chunk, n - lo), k, rng=rng)
        diffs.append(_losses(phi, s, tau) - _losses(ref, s, ref_tau))
    d = np.concatenate(diffs)
    return d.mean(), d.std(ddof=1) / np.sqrt(d.size)


@pytest.mark.deterministic(reason="the same tuples drawn here, losses written out: equal to rounding (rtol 1e-10)")
@pytest.mark.parametrize("chunk", [1000, 64, 7])
def test_paired_difference_equals_the_losses_written_out(chunk):
    rng = np.random.default_rng(2)
    phi, ident = LinearEmbedding(rng.standard_normal((3, 3))), LinearEmbedding.identity(3)
    est = paired_risk_difference(phi, ident, PI, M, 4, 300, tau=0.2, chunk=chunk, rng=11)
    want = _by_hand(phi, ident, 300, 4, chunk, 11, 0.2, 0.2)
    assert est.value == pytest.approx(want[0], rel=1e-10) and est.mcse == pytest.approx(want[1], rel=1e-10)
    assert est.mcse > 0
    # phi against itself: every paired difference is exactly 0
    same = paired_risk_difference(phi, phi, PI, M, 4, 50, tau=0.2, chunk=chunk, rng=11)
    assert (same.value, same.mcse) == (0.0, 0.0)


@pytest.mark.deterministic(reason="the same tuples drawn here, losses written out: equal to rounding (rtol 1e-10)")
def test_paired_difference_lifted_and_two_temperatures():
    rng = np.random.default_rng(4)
    phi = FourierEmbedding.frame(3, 8, W=rng.standard_normal((3, 3)), seed=1)
    ident = LinearEmbedding.identity(3)
    est = paired_risk_difference(phi, ident, PI, M, 3, 120, tau=0.3, reference_tau=0.1, chunk=50, rng=5,
                                 risk=LiftedRisk)
    want = _by_hand(phi, ident, 120, 3, 50, 5, 0.3, 0.1)
    assert est.value == pytest.approx(want[0], rel=1e-10) and est.mcse == pytest.approx(want[1], rel=1e-10)
