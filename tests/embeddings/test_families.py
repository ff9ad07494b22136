"""Embedding families by name, zero-padded parameters, the collapsed output layer, training checkpoints
and random Fourier features (simkit.embeddings).

Expected values are built here from the classes' own constructors or by direct numpy formulas.
"""

from __future__ import annotations

import numpy as np
import pytest

from simkit.embeddings.embedding import LinearEmbedding, TwoLayerEmbedding, family_embedding, padded_params
from simkit.embeddings.perturbation import collapse_output
from simkit.embeddings.random_features import fourier_features, fourier_map
from simkit.embeddings.training import EmpiricalRisk, TrainingSample, checkpoints, train


def _sphere(n, p, seed):
    x = np.random.default_rng(seed).standard_normal((n, p))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_family_embedding_matches_the_constructors_and_round_trips_padded_params():
    lin = family_embedding("linear", 3, 8, rng=1)
    assert np.array_equal(lin.params, LinearEmbedding.random(3, 8, rng=1).params)
    mlp = family_embedding("two_layer", 3, 8, 5, rng=2)
    assert np.array_equal(mlp.params, TwoLayerEmbedding.random(3, 8, 5, rng=2).params)
    for phi, fam, h in ((lin, "linear", 0), (mlp, "two_layer", 5)):
        th = padded_params(phi, 200)
        assert th.shape == (200,) and np.all(th[phi.n_params:] == 0)
        again = family_embedding(fam, 3, 8, h, th)
        assert np.array_equal(again.params, phi.params)
    with pytest.raises(ValueError, match="'family' must be one of linear, two_layer"):
        family_embedding("conv", 3, 8)
    with pytest.raises(ValueError, match="'size' must be >= n_params"):
        padded_params(mlp, 3)


@pytest.mark.deterministic(reason="construction: the rank-one part dominates the 0.05 noise; the random start is the control")
def test_collapse_output_maps_most_points_near_plus_or_minus_u():
    x = _sphere(2000, 3, 3)
    for init in (LinearEmbedding.random(3, 8, rng=1), TwoLayerEmbedding.random(3, 32, 32, rng=1)):
        far = collapse_output(init, 0.05, rng=np.random.default_rng(2))
        f = far(x)
        assert np.median(np.abs(f @ f.T)) > 0.9
        assert np.median(np.abs(init(x) @ init(x).T)) < 0.7  # control: the random start is not collapsed
        w = far.W if isinstance(far, LinearEmbedding) else far.W2
        w0 = init.W if isinstance(init, LinearEmbedding) else init.W2
        rng = np.random.default_rng(2)  # the documented draw order, by hand
        u = rng.standard_normal(w0.shape[0])
        a = rng.standard_normal(w0.shape[1]) / np.sqrt(w0.shape[1])
        np.testing.assert_allclose(w, np.outer(u / np.linalg.norm(u), a) + 0.05 * w0, rtol=0, atol=1e-15)
    with pytest.raises(ValueError, match="'noise' must be a finite number >= 0"):
        collapse_output(init, -1.0, rng=np.random.default_rng(0))


def test_checkpoints_are_independent_runs_from_the_start():
    rng = np.random.default_rng(5)
    x, xp, neg = _sphere(40, 3, 6), _sphere(40, 3, 7), _sphere(40 * 4, 3, 8).reshape(40, 4, 3)
    risk = EmpiricalRisk(TrainingSample(x, xp, neg), 0.5)
    init = LinearEmbedding.random(3, 4, rng=rng)
    out = checkpoints(risk, init, (0, 3, 7))
    assert out[0] == (init, 0)
    for (phi, it), c in zip(out[1:], (3, 7)):
        ref = train(risk, init, maxiter=c)
        assert np.array_equal(phi.params, ref.embedding.params) and it == ref.report.iterations <= c
    assert risk.value(out[2][0]) <= risk.value(init)


def test_fourier_features_by_formula():
    w, b = fourier_map(16, 5, 0.5, 11)
    gen = np.random.default_rng(11)
    assert np.array_equal(w, gen.standard_normal((16, 5)) / 0.5) and np.array_equal(b, gen.uniform(0, 2 * np.pi, 16))
    u = _sphere(7, 5, 1)
    f = fourier_features(u, w, b)
    c = np.cos(u @ w.T + b)
    np.testing.assert_allclose(f, c / np.linalg.norm(c, axis=1, keepdims=True), rtol=1e-14)
