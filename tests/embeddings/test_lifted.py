"""simkit.embeddings.lifted.lifted_value_and_grad computes, in place, exactly the arithmetic of the plain
out-of-place formulas: the second implementation below (a new array for every product, |h| computed twice,
as the function was first written) must agree bit for bit, for the Fourier lift, the linear and the
two-layer families, independent and shared negatives, with and without weights. Bit identity is what
keeps the datasets of the studies that train the lift unchanged (tests/studies/test_numbers_unchanged.py).
The gradient's correctness itself is tested against finite differences in tests/studies/test_generalisation.py.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import logsumexp

from simkit import Uniform, VMFKernel
from simkit.embeddings.embedding import LinearEmbedding, TwoLayerEmbedding
from simkit.embeddings.lifted import FourierEmbedding, lifted_value_and_grad
from simkit.embeddings.training import TrainingSample


def _plain(phi, sample, tau, weights=None):
    """Losses and gradient by the out-of-place formulas (docs/design.md): every step a new array."""
    n, k, p = sample.n, sample.k, sample.p
    wt = np.ones(n) if weights is None else np.asarray(weights, dtype=float)
    pts = np.concatenate([sample.x, sample.x_pos, sample.negatives.reshape(-1, p)])
    if isinstance(phi, FourierEmbedding):  # (cos, sin) / sqrt(m), with its own backward pass
        th = (pts @ phi.W.T) @ phi.A.T
        c, s = np.cos(th), np.sin(th)
        h = np.concatenate([c, s], axis=1) / np.sqrt(phi.m)
    else:
        h, cache = phi._hidden(pts)
    f = h / np.sqrt(np.sum(h * h, axis=-1, keepdims=True))
    u, v, w = f[:n], f[n:2 * n], f[2 * n:]
    s0 = np.sum(u * v, axis=1) / tau
    sj = u @ w.T / tau if sample.shared else np.einsum("nd,nkd->nk", u, w.reshape(n, k, -1)) / tau
    scores = np.column_stack([s0, sj])
    lse = logsumexp(scores, axis=1)
    prob = np.exp(scores - lse[:, None])
    pn = prob[:, 1:] * wt[:, None]
    a0 = -prob[:, 1:].sum(axis=1) * wt
    scale = 1.0 / (tau * n)
    if sample.shared:
        g_u = (a0[:, None] * v + pn @ w) * scale
        g_w = pn.T @ u * scale
    else:
        g_u = (a0[:, None] * v + np.einsum("nk,nkd->nd", pn, w.reshape(n, k, -1))) * scale
        g_w = (pn[:, :, None] * u[:, None, :]).reshape(n * k, -1) * scale
    g = np.concatenate([g_u, a0[:, None] * u * scale, g_w])
    norm = np.sqrt(np.sum(h * h, axis=1, keepdims=True))
    g_h = (g - np.sum(f * g, axis=1, keepdims=True) * f) / norm
    if isinstance(phi, FourierEmbedding):
        m = phi.m
        g_th = (g_h[:, m:] * c - g_h[:, :m] * s) / np.sqrt(m)
        return lse - s0, ((g_th @ phi.A).T @ pts).reshape(-1)
    return lse - s0, phi._backward(pts, cache, g_h)


def _families(rng):
    return {"fourier-6": FourierEmbedding.frame(3, 6, W=rng.standard_normal((3, 3))),
            "fourier-256": FourierEmbedding.frame(3, 256, W=rng.standard_normal((3, 3))),
            "linear": LinearEmbedding.random(3, 3, rng=rng),
            "two-layer": TwoLayerEmbedding(rng.standard_normal((5, 3)), rng.standard_normal(5), rng.standard_normal((4, 5)))}


@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("family", ["fourier-6", "fourier-256", "linear", "two-layer"])
def test_in_place_arithmetic_is_bit_identical(family, shared):
    rng = np.random.default_rng(11)
    phi = _families(rng)[family]
    sample = TrainingSample.draw(Uniform(3), VMFKernel(10.0), 37, 7, rng=rng, shared=shared)
    for weights in (None, rng.uniform(0.5, 2.0, 37)):
        losses, grad = lifted_value_and_grad(phi, sample, 0.13, weights)
        want_l, want_g = _plain(phi, sample, 0.13, weights)
        assert np.array_equal(losses, want_l) and np.array_equal(grad, want_g)
        assert np.array_equal(lifted_value_and_grad(phi, sample, 0.13, weights, want_grad=False)[0], want_l)


def test_bit_comparison_detects_one_ulp():
    """Positive control: the comparison above has the power to see a change of one unit in the last place of
    one parameter (so agreement is not an artefact of comparing an array with itself)."""
    rng = np.random.default_rng(11)
    phi = FourierEmbedding.frame(3, 64, W=rng.standard_normal((3, 3)))
    sample = TrainingSample.draw(Uniform(3), VMFKernel(10.0), 40, 7, rng=rng)
    theta = phi.params.copy()
    theta[4] = np.nextafter(theta[4], np.inf)
    _, grad = lifted_value_and_grad(phi, sample, 0.1)
    _, nudged = _plain(phi.with_params(theta), sample, 0.1)
    assert not np.array_equal(grad, nudged)
    np.testing.assert_allclose(grad, nudged, rtol=1e-9)  # ... and the change is only at rounding level


def test_undefined_point_still_raises():
    """The domain guard of Embedding._normalise is the one the in-place path calls (Embedding._norm): a
    vanishing raw output h(x) raises, from both."""
    phi = LinearEmbedding(np.eye(3))
    h = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    for call in (phi._norm, phi._normalise):
        with pytest.raises(ValueError, match="row 1.*vanishes"):
            call(h)
    assert np.array_equal(phi._normalise(h[:1] * 2.0), h[:1])
