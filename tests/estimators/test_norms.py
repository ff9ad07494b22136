"""simkit.estimators.norms.ScaledRisk remembers the unit vectors of the last two embeddings it evaluated
(by the exact bytes of W): the remembered values must be exactly those computed afresh, a W differing in
one bit must not be served another W's values, and the remembered arrays must be read-only (a caller that
wrote into them would change later evaluations). The gap, sensitivity and control of norm_block are tested
against quadrature and finite differences in tests/studies/test_temperature.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from simkit import Uniform, VMFKernel
from simkit.embeddings.embedding import LinearEmbedding
from simkit.embeddings.training import TrainingSample
from simkit.estimators.norms import NormProfile, ScaledRisk, gap_sensitivity


def _risk(seed=5, n=30, k=6, tau=0.3):
    sample = TrainingSample.draw(Uniform(3), VMFKernel(10.0), n, k, rng=seed)
    return ScaledRisk(sample, tau, NormProfile.axis(0.5, 3))


def _fresh_units(risk, phi):
    """u = Wx/|Wx| written out here, on a new risk (nothing remembered)."""
    def unit(x):
        h = x @ phi.W.T
        return h / np.sqrt(np.sum(h * h, axis=-1, keepdims=True))
    s = risk.sample
    return unit(s.x), unit(s.x_pos), unit(s.negatives)


def test_remembered_units_equal_fresh_ones():
    rng = np.random.default_rng(3)
    risk = _risk()
    phis = [LinearEmbedding.random(3, 3, rng=rng) for _ in range(3)]
    for phi in (phis[0], phis[1], phis[0], phis[2], phis[1], phis[1]):  # hits and misses of the two-entry memory
        for got, want in zip(risk._units(phi), _fresh_units(risk, phi)):
            assert np.array_equal(got, want)
        assert np.array_equal(risk.scores(phi), _risk().scores(phi))
        assert np.array_equal(risk.scores(phi, 0.01, "ignored"), _risk().scores(phi, 0.01, "ignored"))
    assert len(risk._memo) == 2


def test_one_bit_of_w_is_a_different_embedding():
    """Positive control: W and W with one entry moved by one ulp are kept apart."""
    risk = _risk()
    phi = LinearEmbedding.random(3, 3, rng=np.random.default_rng(4))
    w = phi.W.copy()
    w[1, 2] = np.nextafter(w[1, 2], np.inf)
    near = LinearEmbedding(w)
    a, b = risk._units(phi)[2], risk._units(near)[2]
    assert not np.array_equal(a, b)
    assert np.array_equal(b, _fresh_units(risk, near)[2])


def test_remembered_units_are_read_only():
    risk = _risk()
    phi = LinearEmbedding.random(3, 3, rng=np.random.default_rng(6))
    for a in risk._units(phi):
        with pytest.raises(ValueError):
            a[0, 0] = 0.0


def test_gap_sensitivity_does_not_depend_on_what_was_evaluated_before():
    """The block's order (phi_hat, the reference, phi_hat in mode 'ignored') against fresh risks per call."""
    rng = np.random.default_rng(8)
    train, fresh = _risk(seed=1), _risk(seed=2, n=200)
    phi, ident = LinearEmbedding.random(3, 3, rng=rng), LinearEmbedding.identity(3)
    got = [gap_sensitivity(phi, train, fresh), gap_sensitivity(ident, train, fresh),
           gap_sensitivity(phi, train, fresh, mode="ignored")]
    want = [gap_sensitivity(e, _risk(seed=1), _risk(seed=2, n=200), mode=m)
            for e, m in ((phi, "scale"), (ident, "scale"), (phi, "ignored"))]
    assert got == want
